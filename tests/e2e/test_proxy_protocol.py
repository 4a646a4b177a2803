"""PROXY protocol headers on the remoting port (issue 24, finding 6), over real connections.

The test stands in for the load balancer: it opens the connection, writes the header a
HAProxy / AWS NLB would write, then speaks RocketMQ (plain or TLS) as the client behind it.
The client address of the header must be the one the name server sees everywhere: the
connection's peer, ACL ``whiteRemoteAddress`` checks, the audit line.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from helpers import query_route
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.settings import SettingError, setting
from pynamesrv.remoting.acl_sign import Credentials, sign
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.proxy_protocol import V2_SIGNATURE
from pynamesrv.remoting.server import Connection
from pynamesrv.remoting.tls import client_context
from tls_pki import TlsFiles
from waiting import trickled_until_closed, wait_for

StartNamesrv = Callable[..., Awaitable[NamesrvController]]
SERVER_LOG = "pynamesrv.remoting.server"
CLIENT = ("192.0.2.7", 40123)


def v1(src: str = CLIENT[0], sport: int = CLIENT[1]) -> bytes:
    family = "TCP6" if ":" in src else "TCP4"
    dst = "::1" if ":" in src else "127.0.0.1"
    return f"PROXY {family} {src} {dst} {sport} 9876\r\n".encode()


def v2(src: str = CLIENT[0], sport: int = CLIENT[1], tlvs: bytes = b"") -> bytes:
    address = ipaddress.ip_address(src)
    family = 0x11 if address.version == 4 else 0x21
    dst = ipaddress.ip_address("127.0.0.1" if address.version == 4 else "::1")
    payload = address.packed + dst.packed + struct.pack("!HH", sport, 9876) + tlvs
    return V2_SIGNATURE + bytes([0x21, family]) + struct.pack("!H", len(payload)) + payload


async def exchange(
    port: int, preface: bytes, request: RemotingCommand, *, ssl_files: TlsFiles | None = None
) -> tuple[RemotingCommand | None, asyncio.StreamWriter]:
    """Write ``preface`` (the load balancer's header), then ``request`` (over TLS when
    ``ssl_files``); the answer, or None when the server closed without one. The connection
    stays open (the caller closes the writer) so the server's side can be looked at."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(preface)
    if ssl_files is not None:
        await writer.start_tls(client_context(ca_path=str(ssl_files.ca)))
    writer.write(encode(request))
    decoder = FrameDecoder()
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), 10)
        if not chunk:
            return None, writer
        frames = decoder.feed(chunk)
        if frames:
            return frames[0], writer


def connection_of(ns: NamesrvController, peer: str) -> Connection | None:
    return next((c for c in ns.server.connections if c.peer == peer), None)


async def closed_without_answer(port: int, data: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    finally:
        writer.close()


def route_query() -> RemotingCommand:
    query = requests.get_routeinfo_by_topic("T")
    query.opaque = 5
    return query


# ------------------------------------------------------------------ the client's address


@pytest.mark.parametrize(
    ("header", "peer"),
    [
        (v1(), "192.0.2.7:40123"),
        (v1("2001:db8::7", 5000), "2001:db8::7:5000"),
        (v2(), "192.0.2.7:40123"),
        (v2("2001:db8::7", 5000, tlvs=b"\xea\x00\x05\x01vpce"), "2001:db8::7:5000"),
    ],
    ids=["v1-tcp4", "v1-tcp6", "v2-inet", "v2-inet6-tlv"],
)
async def test_header_names_the_client_the_server_sees(
    start_namesrv: StartNamesrv, header: bytes, peer: str
) -> None:
    ns = await start_namesrv(proxyProtocol="auto")
    answer, writer = await exchange(ns.port, header, route_query())
    try:
        assert answer is not None and answer.code == ResponseCode.TOPIC_NOT_EXIST
        assert answer.opaque == 5
        conn = connection_of(ns, peer)
        assert conn is not None, [c.peer for c in ns.server.connections]
        assert conn.proxied_by is not None and conn.proxied_by.startswith("127.0.0.1:")
    finally:
        writer.close()
    # A client without a header is still served in auto mode.
    assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_local_header_of_a_health_check_keeps_the_balancers_address(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv(proxyProtocol="auto")
    local = V2_SIGNATURE + b"\x20\x00\x00\x00"
    answer, writer = await exchange(ns.port, local, route_query())
    try:
        assert answer is not None and answer.code == ResponseCode.TOPIC_NOT_EXIST
        (conn,) = ns.server.connections
        assert conn.peer.startswith("127.0.0.1:") and conn.proxied_by is None
    finally:
        writer.close()


async def test_header_before_a_tls_handshake(
    start_namesrv: StartNamesrv, tls_files: TlsFiles
) -> None:
    ns = await start_namesrv(
        proxyProtocol="required",
        **{
            "tls.server.certPath": str(tls_files.server_cert),
            "tls.server.keyPath": str(tls_files.server_key),
            "tls.server.mode": "enforcing",
        },
    )
    answer, writer = await exchange(ns.port, v2(), route_query(), ssl_files=tls_files)
    try:
        assert answer is not None and answer.code == ResponseCode.TOPIC_NOT_EXIST
        conn = connection_of(ns, "192.0.2.7:40123")
        assert conn is not None and conn.tls is not None
    finally:
        writer.close()


ACCOUNTS = """\
accounts:
  - accessKey: elsewhere
    secretKey: elsewhere-secret
    whiteRemoteAddress: 10.20.30.*
    admin: true
"""
ELSEWHERE = Credentials("elsewhere", "elsewhere-secret")


async def test_acl_address_check_and_audit_see_the_proxied_client(
    start_namesrv: StartNamesrv, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    acl.chmod(0o600)
    ns = await start_namesrv(
        aclFile=str(acl), proxyProtocol="auto", proxyProtocolTrustedAddresses="127.0.0.1"
    )

    def write() -> RemotingCommand:
        return sign(requests.put_kv_config("ProxyNs", "k", "v"), ELSEWHERE)

    # From the balancer's own address the account's whiteRemoteAddress refuses it ...
    answer, writer = await exchange(ns.port, b"", write())
    writer.close()
    assert answer is not None and answer.code == ResponseCode.NO_PERMISSION
    # ... from the client the header names, it is accepted and audited under that address.
    with caplog.at_level(logging.INFO, logger="pynamesrv.audit"):
        answer, writer = await exchange(ns.port, v1("10.20.30.7", 5555), write())
    writer.close()
    assert answer is not None and answer.code == ResponseCode.SUCCESS
    assert ns.kv.get("ProxyNs", "k") == "v"
    denied, applied = [r.getMessage() for r in caplog.records if r.name == "pynamesrv.audit"]
    assert denied.startswith("denied PUT_KV_CONFIG by 127.0.0.1:")
    assert applied.startswith("admin write PUT_KV_CONFIG by 10.20.30.7:5555 ")


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "header",
    [
        b"PROXY TCP4 192.0.2.7 not-an-address 1 9876\r\n",
        b"PROXY " + b"1" * 120,
        V2_SIGNATURE + b"\x21\x11\xff\xff",  # 64 KiB announced
        V2_SIGNATURE + b"\x31\x11\x00\x0c" + b"\x00" * 12,  # version 3
    ],
    ids=["v1-bad-address", "v1-no-crlf", "v2-too-long", "v2-bad-version"],
)
async def test_malformed_header_closes_with_one_log_line(
    start_namesrv: StartNamesrv, caplog: pytest.LogCaptureFixture, header: bytes
) -> None:
    ns = await start_namesrv(proxyProtocol="auto")
    with caplog.at_level(logging.INFO, logger=SERVER_LOG):
        assert await closed_without_answer(ns.port, header + encode(route_query()))
    lines = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
    assert len(lines) == 1 and "(proxy_header)" in lines[0], lines
    assert ns.server.refused["proxy_header"] == 1
    assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_a_forged_log_line_in_a_v1_source_is_refused_and_logged_as_one_line(
    start_namesrv: StartNamesrv, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32 finding 13: a TCP6 source `fe80::1%<LF><forged line>` passed validation,
    became the connection's peer and was logged raw in its "closing ..." line."""
    ns = await start_namesrv(proxyProtocol="auto")
    forged = b"PROXY TCP6 fe80::1%\n2026-01-01_INFO_admin_write_by_root ::1 40123 9876\r\n"
    broken_frame = b"\x00\x00\x00\x02\x00\x00"  # shorter than its own header length
    with caplog.at_level(logging.INFO, logger=SERVER_LOG):
        assert await closed_without_answer(ns.port, forged + broken_frame)
    lines = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
    assert lines and all("\n" not in line and "\r" not in line for line in lines), lines
    assert ns.server.refused["proxy_header"] == 1
    assert not any(c.peer.startswith("fe80") for c in ns.server.connections)


async def test_header_from_an_untrusted_address_is_refused(
    start_namesrv: StartNamesrv, caplog: pytest.LogCaptureFixture
) -> None:
    ns = await start_namesrv(proxyProtocol="auto", proxyProtocolTrustedAddresses="10.0.0.0/8")
    with caplog.at_level(logging.INFO, logger=SERVER_LOG):
        assert await closed_without_answer(ns.port, v1() + encode(route_query()))
    (line,) = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
    assert "not in proxyProtocolTrustedAddresses" in line
    assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_required_mode_closes_a_connection_without_a_header(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv(proxyProtocol="required")
    assert await closed_without_answer(ns.port, encode(route_query()))
    assert ns.server.refused["proxy_header"] == 1
    answer, writer = await exchange(ns.port, v1(), route_query())
    writer.close()
    assert answer is not None and answer.code == ResponseCode.TOPIC_NOT_EXIST


async def test_off_closes_a_header_with_the_key_to_set(
    start_namesrv: StartNamesrv, caplog: pytest.LogCaptureFixture
) -> None:
    ns = await start_namesrv(proxyProtocol="off")
    with caplog.at_level(logging.INFO, logger=SERVER_LOG):
        assert await closed_without_answer(ns.port, v2() + encode(route_query()))
    (line,) = [r.getMessage() for r in caplog.records if r.name == SERVER_LOG]
    assert "set proxyProtocol=auto" in line
    assert not any(c.peer.startswith("192.0.2.7") for c in ns.server.connections)


async def test_detected_by_default_from_anyone_without_acl_and_from_no_one_with_it(
    start_namesrv: StartNamesrv, tmp_path: Path
) -> None:
    """As Java, a header is detected out of the box; once aclFile makes addresses guard
    something, only the balancers named in proxyProtocolTrustedAddresses are believed."""
    plain = await start_namesrv()
    assert plain.server.proxy.trusts("127.0.0.1")
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    acl.chmod(0o600)
    guarded = await start_namesrv(aclFile=str(acl))
    assert not guarded.server.proxy.trusts("127.0.0.1")
    assert await closed_without_answer(guarded.port, v2() + encode(route_query()))


async def test_a_trickled_header_is_closed_at_the_frame_deadline(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv(proxyProtocol="auto", frameReadTimeoutSeconds=1)
    reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
    writer.write(V2_SIGNATURE + b"\x21\x11\x0f\xa0")  # 4000 bytes announced, within bounds

    assert await trickled_until_closed(reader, writer, itertools.repeat(b"\x04")) == b""
    assert ns.server.refused["frame_timeout"] == 1
    await wait_for(lambda: not ns.server.connections, "the slot freed")


def test_trusted_addresses_key_refuses_what_is_not_a_network() -> None:
    entry = setting("proxyProtocolTrustedAddresses")
    assert entry.parse(" 10.0.0.0/8 , 192.0.2.7;fd00::/8 ") == "10.0.0.0/8;192.0.2.7;fd00::/8"
    with pytest.raises(SettingError, match="CIDR"):
        entry.parse("10.0.0.0/8;lb.example.com")


async def test_start_says_whose_headers_are_believed(
    start_namesrv: StartNamesrv, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="pynamesrv"):
        await start_namesrv(proxyProtocol="auto")
        await start_namesrv(proxyProtocol="required", proxyProtocolTrustedAddresses="10.0.0.0/8")
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "PROXY" in r.getMessage()]
    assert lines == [
        (
            "INFO",
            "PROXY protocol auto: headers from any address, as Java (no ACL address check "
            "depends on it; set proxyProtocolTrustedAddresses to the load balancers)",
        ),
        ("INFO", "PROXY protocol required: headers from 10.0.0.0/8"),
    ]
