"""TLS on the remoting port and the HTTP port, against running name servers.

Clients are Python's own ``ssl`` (asyncio streams, so the raw alerts and closes are seen),
the project's ``RemotingClient`` / ``BrokerClient`` with an ``SSLContext``, and the
installed ``pynamesrv admin`` / ``pynamesrv serve`` commands. Certificates come from the
session's test PKI (tests/conftest.py): a CA, two server certificates, a client certificate
and one from a CA nobody trusts.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
import pytest

from helpers import read_until_eof
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.tls import TlsSession, client_context
from tls_pki import KEY_PASSWORD, TlsFiles
from waiting import trickled_until_closed, wait_for

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
TOPIC = "TlsTopic"
SERVER_LOG = "pynamesrv.remoting.server"

StartNamesrv = Callable[..., Awaitable[NamesrvController]]


# ------------------------------------------------------------------ helpers


def cert_keys(cert: Path, key: Path, **extra: str) -> dict[str, str]:
    """``start_namesrv`` keywords for a TLS server (``tls.*`` keys have dots in them)."""
    return {"tls.server.certPath": str(cert), "tls.server.keyPath": str(key), **extra}


def trusting(files: TlsFiles, *, client_cert: bool = False, **kwargs: object) -> ssl.SSLContext:
    """A client that verifies the server against the test CA (and shows its certificate)."""
    if client_cert:
        kwargs.update(cert_path=str(files.client_cert), key_path=str(files.client_key))
    return client_context(ca_path=str(files.ca), **kwargs)  # type: ignore[arg-type]


def route_query(opaque: int = 1, topic: str = TOPIC) -> RemotingCommand:
    query = requests.get_routeinfo_by_topic(topic)
    query.opaque = opaque  # for frames written straight to a socket
    return query


async def register(ns: NamesrvController, **kwargs: object) -> BrokerClient:
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="TlsCluster",
        broker_name="tls-broker",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={TOPIC: TopicConfig(TOPIC, 4, 4, 6)},
        **kwargs,  # type: ignore[arg-type]
    )
    [outcome] = await broker.register_all()
    assert outcome.ok, outcome.error
    return broker


async def ask(client: RemotingClient, topic: str = TOPIC) -> RemotingCommand:
    return await client.request(route_query(topic=topic), timeout=5)


def broker_names(answer: RemotingCommand) -> list[str]:
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return [b["brokerName"] for b in orjson.loads(answer.body)["brokerDatas"]]


def peer_der(client: RemotingClient) -> bytes:
    sslobj = client.transport.get_extra_info("ssl_object")  # type: ignore[union-attr]
    return sslobj.getpeercert(binary_form=True)


def der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def server_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == SERVER_LOG and text in r.getMessage()]


def assert_no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    """Refusals are one log line each: no traceback, nothing at ERROR (asyncio's "Fatal
    error on transport" would be)."""
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


async def tls_stream(
    port: int, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"), 5
    )


# ------------------------------------------------------------------ modes


async def test_permissive_serves_plain_and_tls_clients_on_one_port(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    ns = await start_namesrv(**cert_keys(tls_files.server_cert, tls_files.server_key))
    await register(ns)
    plain = await RemotingClient.connect("127.0.0.1", ns.port)
    secure = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    try:
        plain_answer, tls_answer = await asyncio.gather(ask(plain), ask(secure))
        assert broker_names(plain_answer) == broker_names(tls_answer) == ["tls-broker"]
        assert plain_answer.body == tls_answer.body
        assert plain.transport.get_extra_info("ssl_object") is None  # type: ignore[union-attr]
        assert peer_der(secure) == der(tls_files.server_cert)
    finally:
        await plain.close()
        await secure.close()


async def test_enforcing_closes_plain_text_without_an_answer(
    start_namesrv: StartNamesrv, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ns = await start_namesrv(
        **cert_keys(tls_files.server_cert, tls_files.server_key, **{"tls.server.mode": "enforcing"})
    )
    await register(ns, ssl_context=trusting(tls_files))  # brokers get in over TLS
    reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
    writer.write(encode(route_query()))
    assert await read_until_eof(reader) == b""  # closed, not a byte of answer
    writer.close()
    assert len(server_lines(caplog, "plain text refused (tls.server.mode=enforcing)")) == 1

    with pytest.raises(RemotingError):  # the plain broker client cannot register
        plain = await RemotingClient.connect("127.0.0.1", ns.port)
        await ask(plain)
    secure = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    assert broker_names(await ask(secure)) == ["tls-broker"]
    await secure.close()
    assert_no_tracebacks(caplog)


async def test_disabled_closes_a_tls_hello_cleanly(
    start_namesrv: StartNamesrv, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    ns = await start_namesrv(
        **cert_keys(tls_files.server_cert, tls_files.server_key, **{"tls.server.mode": "disabled"})
    )
    await register(ns)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await tls_stream(ns.port, trusting(tls_files))
    with pytest.raises(RemotingError, match="during the TLS handshake"):
        await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    assert len(server_lines(caplog, "TLS handshake refused (tls.server.mode=disabled)")) == 2
    assert_no_tracebacks(caplog)
    plain = await RemotingClient.connect("127.0.0.1", ns.port)  # plain text still served
    assert broker_names(await ask(plain)) == ["tls-broker"]
    await plain.close()


async def test_default_settings_refuse_tls_and_say_which_key_to_set(
    start_namesrv: StartNamesrv, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """The deliberate deviation from Java: no certificate configured, no TLS (Java would
    answer with a self-signed test certificate); plain text is served as always."""
    caplog.set_level(logging.INFO)
    ns = await start_namesrv()
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await tls_stream(ns.port, client_context(verify=False))
    [line] = server_lines(caplog, "no certificate configured")
    assert line.levelno == logging.WARNING
    assert "tls.server.certPath" in line.getMessage()
    assert_no_tracebacks(caplog)


async def test_test_mode_serves_a_self_signed_certificate(start_namesrv: StartNamesrv) -> None:
    ns = await start_namesrv(**{"tls.test.mode.enable": "true"})
    client = await RemotingClient.connect(
        "127.0.0.1", ns.port, ssl_context=client_context(verify=False)
    )
    answer = await ask(client)
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    await client.close()


# ------------------------------------------------------------------ reload


def replace_atomically(source: Path, target: Path) -> None:
    staging = target.with_name(target.name + ".new")
    shutil.copyfile(source, staging)
    os.replace(staging, target)


async def test_certificate_reload_without_restart(
    start_namesrv: StartNamesrv,
    tls_files: TlsFiles,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copyfile(tls_files.server_cert, cert)
    shutil.copyfile(tls_files.server_key, key)
    ns = await start_namesrv(**cert_keys(cert, key))
    await register(ns)
    old = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    assert peer_der(old) == der(tls_files.server_cert)

    replace_atomically(tls_files.server2_cert, cert)
    replace_atomically(tls_files.server2_key, key)
    new = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    assert peer_der(new) == der(tls_files.server2_cert)
    assert ns.tls.reloads == 1
    assert [r for r in caplog.records if "TLS certificate reloaded" in r.getMessage()]

    old_answer, new_answer = await asyncio.gather(ask(old), ask(new))
    assert broker_names(old_answer) == broker_names(new_answer) == ["tls-broker"]
    assert peer_der(old) == der(tls_files.server_cert)  # open connections keep theirs
    await old.close()
    await new.close()


# ------------------------------------------------------------------ mutual TLS


@pytest.fixture
async def mutual(start_namesrv: StartNamesrv, tls_files: TlsFiles) -> NamesrvController:
    ns = await start_namesrv(
        **cert_keys(
            tls_files.server_cert,
            tls_files.server_key,
            **{
                "tls.server.need.client.auth": "require",
                "tls.server.trustCertPath": str(tls_files.ca),
            },
        )
    )
    await register(ns, ssl_context=trusting(tls_files, client_cert=True))
    return ns


async def test_mutual_tls_serves_a_client_with_a_trusted_certificate(
    mutual: NamesrvController, tls_files: TlsFiles
) -> None:
    client = await RemotingClient.connect(
        "127.0.0.1", mutual.port, ssl_context=trusting(tls_files, client_cert=True)
    )
    assert broker_names(await ask(client)) == ["tls-broker"]
    await client.close()


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
async def test_mutual_tls_refuses_a_client_without_a_certificate(
    mutual: NamesrvController,
    tls_files: TlsFiles,
    caplog: pytest.LogCaptureFixture,
    version: ssl.TLSVersion,
) -> None:
    """TLS 1.2 fails the client's handshake; in 1.3 the client finishes first and learns
    of the refusal (an alert) on its first read. Either way no answer comes back."""
    caplog.set_level(logging.INFO)
    context = trusting(tls_files)
    context.maximum_version = version
    try:
        reader, writer = await tls_stream(mutual.port, context)
    except (ssl.SSLError, ConnectionError):
        assert version is ssl.TLSVersion.TLSv1_2
    else:
        assert version is ssl.TLSVersion.TLSv1_3
        writer.write(encode(route_query()))
        with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
            await read_until_eof(reader)
        writer.close()
    [line] = server_lines(caplog, "TLS handshake failed")
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in line.getMessage()
    assert_no_tracebacks(caplog)


async def test_mutual_tls_refuses_a_certificate_from_another_ca(
    mutual: NamesrvController, tls_files: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    context = client_context(
        ca_path=str(tls_files.ca),
        cert_path=str(tls_files.rogue_client_cert),
        key_path=str(tls_files.rogue_client_key),
    )
    with pytest.raises(RemotingError):
        client = await RemotingClient.connect("127.0.0.1", mutual.port, ssl_context=context)
        await ask(client)
    [line] = server_lines(caplog, "TLS handshake failed")
    assert "certificate verify failed" in line.getMessage() or "unable to get" in line.getMessage()
    assert_no_tracebacks(caplog)


# ------------------------------------------------------------------ volume over TLS


async def test_pipelined_requests_over_tls_are_all_answered_in_order(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    """500 queries in one write: they span many TLS records and come back, each with its
    opaque, through the repeat fast path and the normal path alike."""
    ns = await start_namesrv(
        **cert_keys(tls_files.server_cert, tls_files.server_key, **{"tls.server.mode": "enforcing"})
    )
    await register(ns, ssl_context=trusting(tls_files))
    reader, writer = await tls_stream(ns.port, trusting(tls_files))
    topics = [TOPIC, "NoSuchTopic"]
    writer.write(b"".join(encode(route_query(i, topics[i % 7 == 0])) for i in range(1, 501)))
    decoder, answers = FrameDecoder(), []
    while len(answers) < 500:
        chunk = await asyncio.wait_for(reader.read(1 << 20), 10)
        assert chunk, "connection closed"
        answers += decoder.feed(chunk)
    assert [a.opaque for a in answers] == list(range(1, 501))
    for answer in answers:
        expected = ResponseCode.TOPIC_NOT_EXIST if answer.opaque % 7 == 0 else ResponseCode.SUCCESS
        assert answer.code == expected
    writer.close()


async def test_a_registration_near_the_frame_limit_over_tls(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    """A ~14 MB registration body is ~850 TLS records, read in many pieces."""
    ns = await start_namesrv(
        **cert_keys(tls_files.server_cert, tls_files.server_key, **{"tls.server.mode": "enforcing"})
    )
    prefix = "T" * 120
    topics = {f"{prefix}-{i}": TopicConfig(f"{prefix}-{i}", 8, 8, 6) for i in range(37_000)}
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="Big",
        broker_name="big",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics=topics,
        ssl_context=trusting(tls_files),
        timeout_s=60,
    )
    size = len(broker.registration_request().body)
    assert 12 << 20 < size < 16 << 20
    [outcome] = await broker.register_all()
    assert outcome.ok, outcome.error
    client = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    assert broker_names(await ask(client, f"{prefix}-36999")) == ["big"]
    await client.close()
    await broker.close_connections()


# ------------------------------------------------------------------ the commands


async def admin(*args: str) -> tuple[int, str, str]:
    environ = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT,
        "admin",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_admin_cli_over_tls(mutual: NamesrvController, tls_files: TlsFiles) -> None:
    addr = f"127.0.0.1:{mutual.port}"
    code, out, err = await admin(
        "topicRoute", "-n", addr, "-t", TOPIC, "--json",
        "--tls-ca", str(tls_files.ca),
        "--tls-cert", str(tls_files.client_cert), "--tls-key", str(tls_files.client_key),
    )  # fmt: skip
    assert code == 0, err
    assert [b["brokerName"] for b in orjson.loads(out)["route"]["brokerDatas"]] == ["tls-broker"]

    # Group-level options work too, and a write goes through.
    code, _, err = await admin(
        "--tls-insecure", "--tls-cert", str(tls_files.client_cert),
        "--tls-key", str(tls_files.client_key),
        "updateKvConfig", "-n", addr, "-s", "ns", "-k", "k", "-v", "v",
    )  # fmt: skip
    assert code == 0, err
    assert mutual.kv.table["ns"]["k"] == "v"

    # Without a client certificate the server refuses: unreachable (3), one line.
    code, _, err = await admin("topicRoute", "-n", addr, "-t", TOPIC, "--tls-insecure")
    assert code == 3
    assert err.startswith("error: ") and err.count("\n") == 1

    # The system CAs do not know the test CA: --tls alone fails verification.
    code, _, err = await admin(
        "topicRoute", "-n", addr, "-t", TOPIC, "--tls",
        "--tls-cert", str(tls_files.client_cert), "--tls-key", str(tls_files.client_key),
    )  # fmt: skip
    assert code == 3
    assert "failed: certificate verify failed: " in err


async def test_broker_client_over_tls_registers_and_unregisters(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    ns = await start_namesrv(
        **cert_keys(tls_files.server_cert, tls_files.server_key, **{"tls.server.mode": "enforcing"})
    )
    broker = await register(ns, ssl_context=trusting(tls_files))
    conn = next(iter(ns.server.connections))
    assert conn.tls is not None and conn.tls.handshake_done
    client = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    assert broker_names(await ask(client)) == ["tls-broker"]
    await broker.stop()  # unregisters over TLS
    assert (await ask(client)).code == ResponseCode.TOPIC_NOT_EXIST
    await client.close()


def test_serve_refuses_a_bad_tls_setting_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=0\nhttpPort=0\ntls.server.mode=enforce\n")
    result = subprocess.run(
        [ENTRY_POINT, "serve", "-c", config, "--no-journal"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: {config}: tls.server.mode='enforce' is not allowed: "
        "disabled / permissive / enforcing"
    )
    assert "Traceback" not in result.stderr


def test_serve_reads_tls_from_the_config_file_and_tls_config_file(
    tmp_path: Path, tls_files: TlsFiles
) -> None:
    """The wiring an operator uses: -c names tls.config.file, which holds the certificate."""
    tls_properties = tmp_path / "tls.properties"
    tls_properties.write_text(
        f"tls.server.certPath={tls_files.server_cert}\ntls.server.keyPath={tls_files.server_key}\n"
    )
    config = tmp_path / "namesrv.properties"
    config.write_text(
        f"listenPort=0\nhttpPort=0\ntls.server.mode=enforcing\ntls.config.file={tls_properties}\n"
    )
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--no-journal", "--listen", "127.0.0.1"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        port, tls_line = 0, ""
        for line in proc.stderr:
            if "boot success" in line:
                port = int(line.rsplit(":", 1)[1])
            if "TLS enforcing" in line:
                tls_line = line
                break
        assert port and str(tls_files.server_cert) in tls_line

        async def query() -> tuple[RemotingCommand, bytes]:
            client = await RemotingClient.connect(
                "127.0.0.1", port, ssl_context=trusting(tls_files)
            )
            try:
                return await ask(client), peer_der(client)
            finally:
                await client.close()

        answer, served = asyncio.run(query())
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        assert served == der(tls_files.server_cert)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ------------------------------------------------------------------ HTTPS


async def raw_https_get(port: int, files: TlsFiles) -> tuple[bytes, bytes]:
    """The certificate the HTTP port shows a new connection, and its /healthz response."""
    reader, writer = await tls_stream(port, trusting(files))
    served = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    response = await read_until_eof(reader)
    writer.close()
    return served, response


async def test_https_healthz_and_its_certificate_reload(
    start_namesrv: StartNamesrv, tls_files: TlsFiles, tmp_path: Path
) -> None:
    cert, key = tmp_path / "http.pem", tmp_path / "http.key"
    shutil.copyfile(tls_files.server_cert, cert)
    shutil.copyfile(tls_files.server_key, key)
    ns = await start_namesrv(httpTlsCertPath=str(cert), httpTlsKeyPath=str(key))
    http = HttpServer(ns.view)
    port = await http.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            url = f"https://127.0.0.1:{port}/healthz"
            async with session.get(url, ssl=trusting(tls_files)) as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
            with pytest.raises(aiohttp.ClientError):  # no plain HTTP on that port
                await session.get(f"http://127.0.0.1:{port}/healthz")
        served, response = await raw_https_get(port, tls_files)
        assert served == der(tls_files.server_cert)

        replace_atomically(tls_files.server2_cert, cert)
        replace_atomically(tls_files.server2_key, key)
        served, response = await raw_https_get(port, tls_files)
        assert served == der(tls_files.server2_cert)
        assert response.startswith(b"HTTP/1.1 200") and response.endswith(b"ok")
    finally:
        await http.stop()


# ------------------------------------------------------------------ remote config


@pytest.mark.parametrize(
    "update",
    [
        "tls.server.mode=disabled",
        "tls.server.need.client.auth=none",
        "tls.server.certPath=/tmp/attacker.pem",
        "tls.config.file=/tmp/attacker.properties",
        "httpTlsCertPath=/tmp/attacker.pem",
        "httpTlsKeyPassword=x",
        "orderMessageEnable=true\ntls.server.mode=disabled",
    ],
)
async def test_tls_keys_cannot_be_changed_remotely(
    start_namesrv: StartNamesrv, tls_files: TlsFiles, update: str
) -> None:
    ns = await start_namesrv(
        **cert_keys(tls_files.server_cert, tls_files.server_key, **{"tls.server.mode": "enforcing"})
    )
    client = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    answer = await client.request(
        RemotingCommand(code=RequestCode.UPDATE_NAMESRV_CONFIG, body=update.encode()), timeout=5
    )
    key = update.split("\n")[-1].split("=")[0]
    assert (answer.code, answer.remark) == (
        ResponseCode.NO_PERMISSION,
        f"Can not update config remotely: {key} (set it in the -c file and restart)",
    )
    assert not ns.config.order_message_enable  # nothing of a refused update applies
    await client.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
    writer.write(encode(route_query()))
    assert await read_until_eof(reader) == b""  # still enforcing
    writer.close()


async def test_key_passwords_are_never_reported_nor_stored_masked(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    ns = await start_namesrv(
        httpTlsCertPath=str(tls_files.server_cert),
        httpTlsKeyPath=str(tls_files.server_key_encrypted),
        httpTlsKeyPassword=KEY_PASSWORD,
        **cert_keys(
            tls_files.server_cert,
            tls_files.server_key_encrypted,
            **{"tls.server.keyPassword": KEY_PASSWORD},
        ),
    )
    client = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    answer = await client.request(requests.get_namesrv_config(), timeout=5)
    reported = dict(line.split("=", 1) for line in answer.body.decode().splitlines())
    assert reported["tls.server.keyPassword"] == reported["httpTlsKeyPassword"] == "******"
    assert reported["tls.server.certPath"] == str(tls_files.server_cert)
    assert KEY_PASSWORD not in answer.body.decode()
    assert KEY_PASSWORD not in str(ns.registry.all_properties())  # serve -p, the journal

    update = await client.request(
        requests.update_namesrv_config({"orderMessageEnable": "true"}), timeout=5
    )
    assert update.code == ResponseCode.SUCCESS
    await client.close()
    stored = Path(ns.config.config_store_path).read_text()
    # Never the mask: a key a start set is left out of a store written without -c (it is
    # read again only as -c, where it would override the command line), never "******".
    assert "******" not in stored
    assert "tls.server.keyPassword=" not in stored and "httpTlsKeyPassword=" not in stored
    assert "orderMessageEnable=true\n" in stored


async def test_a_trickled_client_hello_is_closed_at_the_frame_deadline(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    """The handshake counts against frameReadTimeoutSeconds, as a frame does: a ClientHello
    sent a byte at a time (each byte resets the idle timeout) must not hold its connection
    slot, or half-open handshakes fill maxConnections."""
    ns = await start_namesrv(
        frameReadTimeoutSeconds=1, **cert_keys(tls_files.server_cert, tls_files.server_key)
    )
    hello = TlsSession(trusting(tls_files), server_side=False).start()
    reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)

    one_by_one = (bytes([byte]) for byte in hello)
    assert await trickled_until_closed(reader, writer, one_by_one) == b""  # no ServerHello
    assert ns.server.refused["frame_timeout"] == 1
    await wait_for(lambda: not ns.server.connections, "the slot freed")
    # A handshake that completes in time is not cut short by the same clock.
    client = await RemotingClient.connect("127.0.0.1", ns.port, ssl_context=trusting(tls_files))
    answer = await client.request(route_query(), timeout=10)
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    await client.close()
