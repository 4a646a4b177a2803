"""A test PKI for the TLS tests: a CA, server and client certificates, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files of a test PKI: a CA, two server certificates for 127.0.0.1 / localhost (the
    second one for reload tests), a client certificate from the same CA, and a client
    certificate from a CA nobody trusts."""

    ca: Path
    server_cert: Path
    server_key: Path
    server2_cert: Path
    server2_key: Path
    server_key_encrypted: Path  # server_key under KEY_PASSWORD
    client_cert: Path
    client_key: Path
    rogue_client_cert: Path
    rogue_client_key: Path


KEY_PASSWORD = "s3cret"


def _issue(
    subject: str,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for ``subject`` signed by ``issuer`` (self-signed when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        builder = builder.add_extension(
            x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
        )
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256()), key


def _write_pair(
    directory: Path,
    stem: str,
    pair: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    password: str | None = None,
) -> tuple[Path, Path]:
    cert, key = pair
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )
    return cert_path, key_path


def make_pki(directory: Path) -> TlsFiles:
    """Issue every certificate of ``TlsFiles`` into ``directory``."""
    ca_cert, ca_key = _issue("pynamesrv test CA", None, ca=True)
    rogue_cert, rogue_key = _issue("rogue CA", None, ca=True)
    issuer = (ca_cert.subject, ca_key)
    server = _issue("server one", issuer, server=True)
    ca_path, _ = _write_pair(directory, "ca", (ca_cert, ca_key))
    server_cert, server_key = _write_pair(directory, "server", server)
    _, server_key_encrypted = _write_pair(directory, "server-encrypted", server, KEY_PASSWORD)
    server2_cert, server2_key = _write_pair(
        directory, "server2", _issue("server two", issuer, server=True)
    )
    client_cert, client_key = _write_pair(directory, "client", _issue("client one", issuer))
    rogue_client_cert, rogue_client_key = _write_pair(
        directory, "rogue-client", _issue("rogue client", (rogue_cert.subject, rogue_key))
    )
    return TlsFiles(
        ca=ca_path,
        server_cert=server_cert,
        server_key=server_key,
        server2_cert=server2_cert,
        server2_key=server2_key,
        server_key_encrypted=server_key_encrypted,
        client_cert=client_cert,
        client_key=client_key,
        rogue_client_cert=rogue_client_cert,
        rogue_client_key=rogue_client_key,
    )
