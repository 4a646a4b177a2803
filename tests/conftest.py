"""Shared fixtures: an in-process name server on a free loopback port, TLS certificates."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvloop
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController

StartNamesrv = Callable[..., Awaitable[NamesrvController]]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict:
    """Run the suite on uvloop, the loop ``pynamesrv serve`` uses."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture
async def start_namesrv(tmp_path: Path) -> AsyncIterator[StartNamesrv]:
    """Start name servers with config overrides (Java key names; ``tls.*`` keys go where a
    -c file puts them); all stop at teardown."""
    started: list[NamesrvController] = []

    async def start(**overrides: str | int | bool) -> NamesrvController:
        home = tmp_path / f"ns{len(started)}"
        config = NamesrvConfig(
            listen_port=0,
            rocketmq_home=str(home),
            kv_config_path=str(home / "kvConfig.json"),
            config_store_path=str(home / "namesrv.properties"),
        )
        overrides = {"httpPort": 0, "journalEnable": False, **overrides}
        file_properties: dict[str, str] = {}
        for key, value in overrides.items():
            text = str(value).lower() if isinstance(value, bool) else str(value)
            if key.startswith("tls."):
                file_properties[key] = text
            else:
                assert config.set(key, text)
        registry = ConfigRegistry(config, file_properties)
        controller = NamesrvController(registry=registry, host="127.0.0.1")
        await controller.start()
        started.append(controller)
        return controller

    yield start
    for controller in reversed(started):
        await controller.stop()


@pytest.fixture
async def namesrv(start_namesrv: StartNamesrv) -> NamesrvController:
    return await start_namesrv()


# --------------------------------------------------------------------------- TLS material


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


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Generated once per run (EC keys: milliseconds). Tests that change files copy them."""
    directory = tmp_path_factory.mktemp("pki")
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
