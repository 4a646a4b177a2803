"""The PROXY protocol header parser (remoting/proxy_protocol.py), with byte strings only."""

from __future__ import annotations

import ipaddress
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pynamesrv.remoting.codec import encode
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.proxy_protocol import (
    MAX_V2_PAYLOAD,
    V2_SIGNATURE,
    Detection,
    ProxyHeader,
    ProxyHeaderError,
    ProxyMode,
    ProxyPolicy,
    detect,
    parse,
    parse_networks,
)
from pynamesrv.remoting.tls import TlsSession, client_context

FRAME = encode(RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": "T"}))


def client_hello() -> bytes:
    return TlsSession(client_context(verify=False), server_side=False).start()


def v2(command: int = 1, family: int = 0x11, payload: bytes = b"", version: int = 2) -> bytes:
    """A v2 header: signature, version/command, family/transport, length, payload."""
    return (
        V2_SIGNATURE
        + bytes([version << 4 | command, family])
        + struct.pack("!H", len(payload))
        + payload
    )


def inet(src: str, sport: int, dst: str = "10.0.0.1", dport: int = 9876) -> bytes:
    return struct.pack(
        "!4s4sHH",
        ipaddress.IPv4Address(src).packed,
        ipaddress.IPv4Address(dst).packed,
        sport,
        dport,
    )


def inet6(src: str, sport: int, dst: str = "fd00::1", dport: int = 9876) -> bytes:
    return struct.pack(
        "!16s16sHH",
        ipaddress.IPv6Address(src).packed,
        ipaddress.IPv6Address(dst).packed,
        sport,
        dport,
    )


# ------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    ("first_bytes", "expected"),
    [
        (FRAME, Detection.OTHER),
        (FRAME[:1], Detection.OTHER),  # a frame's length word starts 0x00: decided at once
        (b"\x16", Detection.OTHER),  # a TLS handshake record
        (b"PROXY TCP4 ", Detection.PROXY),
        (V2_SIGNATURE, Detection.PROXY),
        (b"", Detection.MORE),
        (b"PROX", Detection.MORE),
        (V2_SIGNATURE[:7], Detection.MORE),
        (b"PROXZ", Detection.OTHER),
        (V2_SIGNATURE[:5] + b"x", Detection.OTHER),
    ],
)
def test_detection_tells_headers_from_frames_and_tls(
    first_bytes: bytes, expected: Detection
) -> None:
    assert detect(first_bytes) is expected


def test_a_client_hello_is_never_taken_for_a_header() -> None:
    assert detect(client_hello()) is Detection.OTHER


@given(st.binary(max_size=64))
def test_detection_of_anything_after_a_frame_length_is_other(tail: bytes) -> None:
    length = struct.pack(">i", len(FRAME))  # any length below 16 MiB starts with 0x00
    assert detect(length + tail) is Detection.OTHER


# ------------------------------------------------------------------ v1


@pytest.mark.parametrize(
    ("line", "source"),
    [
        (b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 9876\r\n", ("192.0.2.7", 56324)),
        (b"PROXY TCP6 2001:db8::7 fd00::1 56324 9876\r\n", ("2001:db8::7", 56324)),
        (b"PROXY UNKNOWN\r\n", None),
        (b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n", None),
    ],
)
def test_v1_header_gives_the_client_and_leaves_the_stream(
    line: bytes, source: tuple[str, int] | None
) -> None:
    header = parse(line + FRAME)
    assert header == ProxyHeader(1, source, len(line))
    assert (line + FRAME)[header.length :] == FRAME


def test_v1_header_in_pieces_needs_more_until_its_crlf() -> None:
    line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 9876\r\n"
    for cut in range(len(b"PROXY "), len(line)):
        assert parse(line[:cut]) is None, cut
    assert parse(line) is not None


@pytest.mark.parametrize(
    "line",
    [
        b"PROXY TCP4 192.0.2.7 10.0.0.1 56324\r\n",  # a field missing
        b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n",  # IPv6 under TCP4
        b"PROXY TCP6 192.0.2.7 fd00::1 1 2\r\n",  # IPv4 under TCP6
        b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 9876\r\n",  # port out of range
        b"PROXY TCP4 192.0.2.7 10.0.0.1 080 9876\r\n",  # leading zero
        b"PROXY TCP4 192.0.2.7 10.0.0.1 -1 9876\r\n",
        b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
        b"PROXY TCP4  192.0.2.7 10.0.0.1 1 2\r\n",  # two spaces
        b"PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n",  # LF alone
        b"PROXY TCP4 192.0.2.\xff 10.0.0.1 1 2\r\n",  # not ASCII
        b"PROXY " + b"9" * 120,  # no CRLF within 107 bytes
        # issue 32 finding 13: Python takes any text after % as a zone id, a LF included
        b"PROXY TCP6 fe80::1%\nforged ::1 1 2\r\n",
        b"PROXY TCP6 fe80::1%\x7f ::1 1 2\r\n",
        b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",  # no balancer sends a zone id
        b"PROXY TCP6 ::1 fe80::1%\x1b[2J 1 2\r\n",  # the destination is checked as well
        b"PROXY UNKNOWN\x00\r\n",
    ],
)
def test_malformed_v1_header_is_an_error(line: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse(line)


# ------------------------------------------------------------------ v2


@pytest.mark.parametrize(
    ("family", "payload", "source"),
    [
        (0x11, inet("192.0.2.7", 40000), ("192.0.2.7", 40000)),
        (0x21, inet6("2001:db8::7", 40000), ("2001:db8::7", 40000)),
        (0x21, inet6("::ffff:192.0.2.7", 40000), ("192.0.2.7", 40000)),  # v4-mapped
        (0x00, b"", None),  # UNSPEC
        (0x31, b"\x00" * 216, None),  # AF_UNIX: no IP to use
    ],
)
def test_v2_proxy_header_gives_the_client(
    family: int, payload: bytes, source: tuple[str, int] | None
) -> None:
    data = v2(1, family, payload) + FRAME
    header = parse(data)
    assert header == ProxyHeader(2, source, 16 + len(payload))
    assert data[header.length :] == FRAME


def test_v2_local_header_keeps_the_connections_own_address() -> None:
    assert parse(v2(0, 0x11, inet("192.0.2.7", 1))) == ProxyHeader(2, None, 28)


def test_v2_tlvs_after_the_addresses_are_skipped() -> None:
    # AWS NLB: PP2_TYPE_AWS (0xEA), subtype VPC endpoint id; then a NOOP (0x04).
    tlvs = b"\xea\x00\x17\x01vpce-0123456789abcdef0" + b"\x04\x00\x03abc"
    data = v2(1, 0x11, inet("192.0.2.7", 40000) + tlvs) + FRAME
    header = parse(data)
    assert header is not None and header.source == ("192.0.2.7", 40000)
    assert data[header.length :] == FRAME


def test_v2_header_in_pieces_needs_more_until_its_length() -> None:
    data = v2(1, 0x11, inet("192.0.2.7", 40000))
    for cut in range(len(V2_SIGNATURE), len(data)):
        assert parse(data[:cut]) is None, cut
    assert parse(data) is not None


@pytest.mark.parametrize(
    "data",
    [
        v2(version=1),  # v1 in the binary format
        v2(command=2),
        v2(1, 0x41, b"\x00" * 12),  # family 4
        v2(1, 0x13, inet("192.0.2.7", 1)),  # transport 3
        v2(1, 0x11, b"\x00" * 11),  # shorter than its addresses
        v2(1, 0x21, b"\x00" * 35),
        V2_SIGNATURE + b"\x21\x11" + struct.pack("!H", MAX_V2_PAYLOAD + 1),  # too long
    ],
)
def test_malformed_v2_header_is_an_error(data: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse(data)


def test_v2_length_bound_is_checked_before_the_payload_arrives() -> None:
    """A peer announcing 64 KiB must not make us wait for (and hold) it."""
    with pytest.raises(ProxyHeaderError, match="at most"):
        parse(V2_SIGNATURE + b"\x21\x11\xff\xff")
    assert parse(v2(1, 0x11, inet("192.0.2.7", 1) + b"\x04" * (MAX_V2_PAYLOAD - 12))) is not None


# ------------------------------------------------------------------ fuzz-ish


@given(st.binary(max_size=300))
def test_anything_after_a_v1_prefix_parses_needs_more_or_is_an_error(tail: bytes) -> None:
    data = b"PROXY " + tail
    try:
        header = parse(data)
    except ProxyHeaderError:
        return
    assert header is None or 8 <= header.length <= 107


@given(st.binary(max_size=600))
def test_anything_after_the_v2_signature_parses_needs_more_or_is_an_error(tail: bytes) -> None:
    data = V2_SIGNATURE + tail
    try:
        header = parse(data)
    except ProxyHeaderError:
        return
    assert header is None or 16 <= header.length <= min(len(data), 16 + MAX_V2_PAYLOAD)


@given(
    st.ip_addresses(v=4).map(str),
    st.integers(0, 65535),
    st.binary(max_size=40),
    st.integers(len(V2_SIGNATURE), 80),
)
def test_v2_split_anywhere_gives_the_same_header(
    src: str, port: int, tlvs: bytes, cut: int
) -> None:
    data = v2(1, 0x11, inet(src, port) + tlvs) + FRAME
    whole = parse(data)
    assert whole is not None and whole.source == (src, port)
    if cut < whole.length:
        assert parse(data[:cut]) is None


# ------------------------------------------------------------------ policy


def test_policy_trusts_listed_networks_only() -> None:
    policy = ProxyPolicy(ProxyMode.AUTO, parse_networks("10.0.0.0/8; 192.0.2.7, fd00::/8"))
    assert policy.trusts("10.1.2.3") and policy.trusts("192.0.2.7")
    assert policy.trusts("fd00::9") and policy.trusts("::ffff:10.9.9.9")
    assert not policy.trusts("192.0.2.8") and not policy.trusts("?")
    assert ProxyPolicy(ProxyMode.AUTO).trusts("203.0.113.1")  # empty: everyone, as Java


def test_bad_trusted_network_names_the_entry() -> None:
    with pytest.raises(ValueError, match=r"10\.0\.0\.300"):
        parse_networks("10.0.0.0/8;10.0.0.300")
