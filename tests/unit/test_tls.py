"""The sans-IO TLS layer, settings and reloading, with byte strings and files only.

Two ``TlsSession``s (a server and a client) talk through the test: every byte one produces
is handed to the other, in whatever pieces the test chooses, so record splitting, held
plaintext, alerts and close_notify are checked without sockets.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
from pathlib import Path

import pytest

from pynamesrv.remoting.tls import (
    ClientAuth,
    TlsContextHolder,
    TlsError,
    TlsMode,
    TlsSession,
    TlsSettings,
    client_context,
)
from tls_pki import KEY_PASSWORD, TlsFiles


def settings(files: TlsFiles, **extra: str) -> TlsSettings:
    props = {
        "tls.server.certPath": str(files.server_cert),
        "tls.server.keyPath": str(files.server_key),
        **extra,
    }
    return TlsSettings.from_properties(props)


def pair(server_context: ssl.SSLContext, client: ssl.SSLContext) -> tuple[TlsSession, TlsSession]:
    return (
        TlsSession(server_context),
        TlsSession(client, server_side=False, server_hostname="127.0.0.1"),
    )


def handshake(server: TlsSession, client: TlsSession, piece: int = 1 << 20) -> None:
    """Shuttle handshake bytes both ways, ``piece`` bytes per feed, until both are done."""
    to_server = client.start()
    for _ in range(100):
        for i in range(0, len(to_server), piece):
            assert server.receive(to_server[i : i + piece]) == b""
        to_client = server.data_to_send()
        for i in range(0, len(to_client), piece):
            client.receive(to_client[i : i + piece])
        to_server = client.data_to_send()
        if server.handshake_done and client.handshake_done and not to_server:
            return
    raise AssertionError("handshake did not finish")


def verified_client(files: TlsFiles, **kwargs: object) -> ssl.SSLContext:
    return client_context(ca_path=str(files.ca), **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ record layer


def test_handshake_then_data_both_ways(tls_files: TlsFiles) -> None:
    server, client = pair(settings(tls_files).server_context(), verified_client(tls_files))
    handshake(server, client)
    assert server.version in ("TLSv1.2", "TLSv1.3")
    assert server.receive(client.encrypt(b"request")) == b"request"
    assert client.receive(server.encrypt(b"answer")) == b"answer"


def test_handshake_fed_one_byte_at_a_time(tls_files: TlsFiles) -> None:
    server, client = pair(settings(tls_files).server_context(), verified_client(tls_files))
    handshake(server, client, piece=1)
    assert server.receive(client.encrypt(b"ping")) == b"ping"


@pytest.mark.parametrize("piece", [1, 7, 16_384, 16_413, 100_000])
def test_large_payload_split_into_records_arrives_whole(tls_files: TlsFiles, piece: int) -> None:
    """A 1 MiB message spans 64+ records; fed in any cut, the plaintext is the same bytes."""
    server, client = pair(settings(tls_files).server_context(), verified_client(tls_files))
    handshake(server, client)
    payload = os.urandom(1 << 20)
    records = client.encrypt(payload)
    assert len(records) > len(payload)  # framing overhead: it really is many records
    received = bytearray()
    step = piece if piece > 1 else 997  # byte by byte would take long; 997 is odd enough
    for i in range(0, len(records), step):
        received += server.receive(records[i : i + step])
    assert bytes(received) == payload


def test_plaintext_given_before_the_handshake_is_sent_after_it(tls_files: TlsFiles) -> None:
    server, client = pair(settings(tls_files).server_context(), verified_client(tls_files))
    hello = client.start()
    assert client.encrypt(b"early") == b""  # held: no keys yet
    server.receive(hello)
    client.receive(server.data_to_send())
    assert client.handshake_done
    assert server.receive(client.data_to_send()) == b"early"


def test_untrusted_server_fails_the_client_handshake_with_the_reason(tls_files: TlsFiles) -> None:
    server, client = pair(
        settings(tls_files).server_context(), client_context(ca_path=str(tls_files.client_cert))
    )
    server.receive(client.start())
    with pytest.raises(TlsError, match=r"certificate verify failed|unable to get"):
        client.receive(server.data_to_send())
    alert = client.data_to_send()
    with pytest.raises(TlsError, match=r"TLS handshake failed: .*UNKNOWN_CA"):
        server.receive(alert)


def test_garbage_after_the_handshake_byte_is_a_clean_error(tls_files: TlsFiles) -> None:
    server = TlsSession(settings(tls_files).server_context())
    with pytest.raises(TlsError, match="TLS handshake failed"):
        server.receive(b"\x16\x03\x01\x00\x05hello" + b"\x00" * 64)


def test_a_plain_remoting_frame_is_not_tls(tls_files: TlsFiles) -> None:
    server = TlsSession(settings(tls_files).server_context())
    with pytest.raises(TlsError):
        server.receive(b"\x00\x00\x00\x20\x00\x00\x00\x10" + b"{" * 40)


def test_close_notify_is_seen_by_the_peer(tls_files: TlsFiles) -> None:
    server, client = pair(settings(tls_files).server_context(), verified_client(tls_files))
    handshake(server, client)
    assert server.receive(client.encrypt(b"last") + client.close()) == b"last"
    assert server.peer_closed
    assert server.receive(b"anything after") == b""


def test_required_client_certificate(tls_files: TlsFiles) -> None:
    required = settings(
        tls_files,
        **{
            "tls.server.need.client.auth": "require",
            "tls.server.trustCertPath": str(tls_files.ca),
        },
    ).server_context()
    with_cert = verified_client(
        tls_files, cert_path=str(tls_files.client_cert), key_path=str(tls_files.client_key)
    )
    server, client = pair(required, with_cert)
    handshake(server, client)
    subject = dict(x[0] for x in server.peer_certificate()["subject"])  # type: ignore[index]
    assert subject["commonName"] == "client one"

    server, client = pair(required, verified_client(tls_files))
    server.receive(client.start())
    client.receive(server.data_to_send())  # TLS 1.3: the client is done before the verdict
    with pytest.raises(TlsError, match="PEER_DID_NOT_RETURN_A_CERTIFICATE"):
        server.receive(client.data_to_send())


# ------------------------------------------------------------------ settings


def test_defaults_serve_no_tls() -> None:
    default = TlsSettings.from_properties({"listenPort": "9876"})
    assert default.mode is TlsMode.PERMISSIVE
    assert not default.serves_tls
    assert TlsContextHolder(default).context() is None
    assert "tls.server.certPath" in default.describe()


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"tls.server.mode": "enforce"}, "tls.server.mode='enforce' is not one of disabled"),
        (
            {"tls.server.need.client.auth": "always"},
            "tls.server.need.client.auth='always' is not one of none / optional / require",
        ),
        ({"tls.test.mode.enable": "yes"}, "tls.test.mode.enable='yes' is not true or false"),
        ({"tls.server.authClient": "1"}, "tls.server.authClient='1' is not true or false"),
        ({"tls.server.mode": "enforcing"}, "tls.server.mode=enforcing needs tls.server.certPath"),
        ({"tls.server.keyPath": "/k.pem"}, "tls.server.keyPath=/k.pem needs tls.server.certPath"),
        ({"tls.server.certpath": "/c.pem"}, "tls.server.certpath is not a TLS setting"),
        ({"tls.config.file": "/nonexistent/tls.properties"}, "tls.config.file=/nonexistent"),
    ],
)
def test_bad_settings_are_one_line_errors_naming_the_key(
    props: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError) as caught:
        TlsSettings.from_properties(props)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text


def test_client_auth_needs_a_trust_file(tls_files: TlsFiles) -> None:
    with pytest.raises(ValueError, match=r"require needs tls\.server\.trustCertPath"):
        settings(tls_files, **{"tls.server.need.client.auth": "REQUIRE"})


def test_files_that_do_not_load_name_their_key(tls_files: TlsFiles, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    with pytest.raises(ValueError, match=rf"tls\.server\.certPath={broken}.*cannot load"):
        TlsContextHolder(settings(tls_files, **{"tls.server.certPath": str(broken)}))
    mismatched = settings(tls_files, **{"tls.server.keyPath": str(tls_files.server2_key)})
    with pytest.raises(ValueError, match=r"tls\.server\.keyPath=.*cannot load"):
        TlsContextHolder(mismatched)


def test_encrypted_key_needs_its_password(tls_files: TlsFiles) -> None:
    keyed = {"tls.server.keyPath": str(tls_files.server_key_encrypted)}
    holder = TlsContextHolder(
        settings(tls_files, **keyed, **{"tls.server.keyPassword": KEY_PASSWORD})
    )
    assert holder.context() is not None
    wrong = settings(tls_files, **keyed, **{"tls.server.keyPassword": "wrong"})
    assert KEY_PASSWORD not in repr(wrong) and "wrong" not in repr(wrong)
    with pytest.raises(ValueError, match="cannot load"):
        TlsContextHolder(wrong)


def test_config_file_values_win_over_the_properties(tls_files: TlsFiles, tmp_path: Path) -> None:
    config = tmp_path / "tls.properties"
    config.write_text(
        "# as Java's /etc/rocketmq/tls.properties\n"
        f"tls.server.certPath={tls_files.server2_cert}\n"
        f"tls.server.keyPath={tls_files.server2_key}\n"
        "tls.server.need.client.auth=optional\n"
        f"tls.server.trustCertPath={tls_files.ca}\n"
        "tls.client.authServer=true\n"
    )
    loaded = settings(tls_files, **{"tls.config.file": str(config), "tls.server.mode": "enforcing"})
    assert loaded.cert_path == str(tls_files.server2_cert)
    assert loaded.need_client_auth is ClientAuth.OPTIONAL
    assert loaded.mode is TlsMode.ENFORCING
    assert loaded.config_file == str(config)


def test_test_mode_serves_a_self_signed_certificate() -> None:
    holder = TlsContextHolder(TlsSettings.from_properties({"tls.test.mode.enable": "true"}))
    context = holder.context()
    assert context is not None
    server, client = pair(context, client_context(verify=False))
    handshake(server, client)
    assert server.receive(client.encrypt(b"x")) == b"x"


# ------------------------------------------------------------------ reloading


def _replace(source: Path, target: Path) -> None:
    """Atomically, as an operator's deploy tool does (write aside, rename over)."""
    staging = target.with_suffix(".new")
    shutil.copyfile(source, staging)
    os.replace(staging, target)


def _served_cert(context: ssl.SSLContext, files: TlsFiles) -> str:
    """The common name of the certificate a client is shown (tls_pki names each one)."""
    server, client = pair(context, verified_client(files))
    handshake(server, client)
    certificate = client.peer_certificate()
    assert certificate is not None and isinstance(certificate["subject"], tuple)
    return dict(rdn[0] for rdn in certificate["subject"])["commonName"]


def test_holder_rebuilds_when_the_files_are_replaced(
    tls_files: TlsFiles, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    shutil.copyfile(tls_files.server_cert, cert)
    shutil.copyfile(tls_files.server_key, key)
    holder = TlsContextHolder(
        TlsSettings.from_properties(
            {"tls.server.certPath": str(cert), "tls.server.keyPath": str(key)}
        )
    )
    first = holder.context()
    assert first is not None
    assert holder.context() is first  # unchanged files: the same context, no rebuild
    assert _served_cert(first, tls_files) == "server one"

    caplog.set_level(logging.INFO, logger="pynamesrv.remoting.tls")
    _replace(tls_files.server2_cert, cert)  # the key is not there yet: does not load
    assert holder.context() is first
    assert holder.context() is first
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # said once, not once per connection
    assert "keeping the previous ones" in warnings[0].getMessage()

    _replace(tls_files.server2_key, key)
    second = holder.context()
    assert second is not None and second is not first
    assert holder.reloads == 1
    assert _served_cert(second, tls_files) == "server two"


def test_the_mode_in_the_config_file_counts_too(tmp_path: Path) -> None:
    """Java ignores tls.server.mode in tls.config.file; an operator who wrote it meant it."""
    config = tmp_path / "tls.properties"
    config.write_text("tls.server.mode=disabled\n")
    loaded = TlsSettings.from_properties(
        {"tls.server.mode": "permissive", "tls.config.file": str(config)}
    )
    assert loaded.mode is TlsMode.DISABLED
