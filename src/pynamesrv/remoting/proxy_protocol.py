"""The HAProxy PROXY protocol header (v1 text, v2 binary), sans-IO: bytes in, a result out.

A load balancer that terminates the client's TCP connection (an AWS NLB, a Kubernetes
service with PROXY protocol on, HAProxy) writes one header before the client's first byte,
naming the client's address. Java 5.1.4+ detects it on the remoting port (apache/rocketmq
#6957) and takes the client address from it; ``parse`` is that detection and decoding, and
``ProxyPolicy`` says whose headers the server believes.

Detection never mistakes a RocketMQ frame or a TLS ClientHello for a header: a frame starts
with its 4-byte big-endian length (below 16 MiB, so its first byte is 0x00), a ClientHello
with 0x16; a v1 header starts with ``PROXY `` and a v2 header with a 12-byte signature
starting ``\\r\\n``. So the first byte decides in practice, and only a prefix of a
signature asks for more bytes.

Addresses are checked strictly, since they end up in log lines and ACL address checks: a
v1 line holds printable ASCII only, and an address with an IPv6 zone id (``fe80::1%eth0``;
Python's parser takes any text after the ``%``, a line break included) is refused, as no
load balancer sends one. v2 addresses are binary and cannot carry one.

Memory is bounded: a v1 header is at most 107 bytes (the spec's limit), a v2 header at most
``16 + MAX_V2_PAYLOAD``; longer is an error, so a peer cannot make us buffer a header forever
(the caller also times it with ``frameReadTimeoutSeconds``).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

V1_PREFIX: Final = b"PROXY "
V2_SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
V1_MAX_LENGTH: Final = 107  # "PROXY TCP6 <39> <39> <5> <5>\r\n", from the spec
# Addresses (at most 216 bytes, AF_UNIX) plus TLVs. Load balancers send a few dozen bytes of
# TLVs (AWS: the VPC endpoint id); 4 KiB leaves room for SSL sub-TLVs and bounds what one
# connection may make us hold before its header is complete.
MAX_V2_PAYLOAD: Final = 4096
_V2_HEADER: Final = struct.Struct("!12sBBH")
_INET: Final = struct.Struct("!4s4sHH")
_INET6: Final = struct.Struct("!16s16sHH")


class ProxyHeaderError(ValueError):
    """The bytes start like a PROXY header but are not a valid one: close the connection."""


@dataclass(frozen=True, slots=True)
class ProxyHeader:
    """A complete header. ``source`` is the client's ``(ip, port)``; None when the header
    carries no address (v1 UNKNOWN, v2 LOCAL such as a load balancer's health check, v2
    UNSPEC or AF_UNIX): then the connection's own address stands."""

    version: int
    source: tuple[str, int] | None
    length: int  # bytes of the header, consumed from the stream


class Detection(StrEnum):
    """What the first bytes of a connection are."""

    PROXY = "proxy"  # a header starts here (perhaps incomplete)
    OTHER = "other"  # not a header: a frame, a TLS hello, anything else
    MORE = "more"  # a prefix of a signature: wait for more bytes


def detect(data: bytes) -> Detection:
    """Whether ``data`` (the first bytes of a connection) starts with a PROXY header."""
    if data.startswith((V1_PREFIX, V2_SIGNATURE)):
        return Detection.PROXY
    if V1_PREFIX.startswith(data) or V2_SIGNATURE.startswith(data):  # b"" too
        return Detection.MORE
    return Detection.OTHER


def parse(data: bytes) -> ProxyHeader | None:
    """The header at the start of ``data``, or None while it is incomplete.

    ``data`` must start with a signature (``detect`` said PROXY); what follows the header
    is the client's own stream, from ``data[header.length:]``. Raises ``ProxyHeaderError``
    with a short reason when the header is malformed or too long.
    """
    if data.startswith(V1_PREFIX):
        return _parse_v1(data)
    if data.startswith(V2_SIGNATURE):
        return _parse_v2(data)
    raise ProxyHeaderError("not a PROXY protocol header")


def _parse_v1(data: bytes) -> ProxyHeader | None:
    end = data.find(b"\r\n", 0, V1_MAX_LENGTH)
    if end < 0:
        if len(data) >= V1_MAX_LENGTH or b"\n" in data[:V1_MAX_LENGTH]:
            raise ProxyHeaderError("v1 header without CRLF in its first 107 bytes")
        return None
    line = data[len(V1_PREFIX) : end]
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("v1 header is not ASCII") from None
    if not text.isprintable():  # a lone LF, a tab, NUL...: the spec has single spaces only
        raise ProxyHeaderError(f"v1 header {_shown(text)} holds control characters")
    parts = text.split(" ")
    if parts[0] == "UNKNOWN":  # the rest, if any, is ignored (the spec says so)
        return ProxyHeader(1, None, end + 2)
    if parts[0] not in ("TCP4", "TCP6") or len(parts) != 5:
        raise ProxyHeaderError(f"v1 header {_shown(text)}: expected TCP4/TCP6 and 4 fields")
    family, src, _dst, sport, dport = parts
    want = ipaddress.IPv4Address if family == "TCP4" else ipaddress.IPv6Address
    for address in (src, _dst):
        if "%" in address:  # Python accepts any text after it as an IPv6 zone id
            raise ProxyHeaderError(
                f"v1 header: {_shown(address)} has a zone id (a PROXY address names no interface)"
            )
        try:
            want(address)
        except ValueError:
            raise ProxyHeaderError(f"v1 header: {_shown(address)} is not {family}") from None
    for port in (sport, dport):
        if not (port.isdigit() and port.isascii() and len(port) <= 5 and int(port) <= 65535):
            raise ProxyHeaderError(f"v1 header: {_shown(port)} is not a port")
        if len(port) > 1 and port[0] == "0":
            raise ProxyHeaderError(f"v1 header: port {_shown(port)} has a leading zero")
    return ProxyHeader(1, (src, int(sport)), end + 2)


def _parse_v2(data: bytes) -> ProxyHeader | None:
    if len(data) < _V2_HEADER.size:
        return None
    _sig, ver_cmd, fam, length = _V2_HEADER.unpack_from(data)
    version, command = ver_cmd >> 4, ver_cmd & 0x0F
    if version != 2:
        raise ProxyHeaderError(f"v2 header with version {version}")
    if command > 1:
        raise ProxyHeaderError(f"v2 header with command {command} (0 LOCAL, 1 PROXY)")
    if length > MAX_V2_PAYLOAD:
        raise ProxyHeaderError(f"v2 header of {length} bytes (at most {MAX_V2_PAYLOAD})")
    total = _V2_HEADER.size + length
    if len(data) < total:
        return None
    family, transport = fam >> 4, fam & 0x0F
    if family > 3 or transport > 2:
        raise ProxyHeaderError(f"v2 header with address family byte 0x{fam:02x}")
    if command == 0:  # LOCAL: the proxy's own connection (a health check); addresses ignored
        return ProxyHeader(2, None, total)
    body = data[_V2_HEADER.size : total]
    if family == 1:  # AF_INET
        if length < _INET.size:
            raise ProxyHeaderError(f"v2 INET header of {length} bytes (needs {_INET.size})")
        src, _dst, sport, _dport = _INET.unpack_from(body)
        return ProxyHeader(2, (str(ipaddress.IPv4Address(src)), sport), total)
    if family == 2:  # AF_INET6
        if length < _INET6.size:
            raise ProxyHeaderError(f"v2 INET6 header of {length} bytes (needs {_INET6.size})")
        src, _dst, sport, _dport = _INET6.unpack_from(body)
        return ProxyHeader(2, (_ipv6(src), sport), total)
    return ProxyHeader(2, None, total)  # UNSPEC or AF_UNIX: no IP address to use


def _ipv6(packed: bytes) -> str:
    """An IPv6 source as text; an IPv4-mapped one as the IPv4 address it is."""
    address = ipaddress.IPv6Address(packed)
    return str(address.ipv4_mapped) if address.ipv4_mapped else str(address)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 48 else text[:45] + "...")


# --------------------------------------------------------------------------- policy


class ProxyMode(StrEnum):
    """``proxyProtocol``: whether the remoting port reads PROXY headers."""

    OFF = "off"  # never: a header closes the connection with a hint to turn this on
    AUTO = "auto"  # when a connection starts with one (Java's behaviour), from trusted peers
    REQUIRED = "required"  # every connection must start with one, from a trusted peer


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(text: str) -> tuple[Network, ...]:
    """``proxyProtocolTrustedAddresses``: addresses or CIDR networks separated by ``;`` or
    ``,``. Raises ``ValueError`` naming the entry that is neither."""
    out: list[Network] = []
    for entry in text.replace(",", ";").split(";"):
        entry = entry.strip()
        if entry:
            out.append(ipaddress.ip_network(entry, strict=False))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class ProxyPolicy:
    """Whose PROXY headers the server believes. A header rewrites the address every check
    of the caller sees (ACL ``whiteRemoteAddress``, the audit log): believing it from any
    peer lets anyone who reaches the port claim any address, so ``trusted`` should name the
    load balancers (empty: every peer, as Java does)."""

    mode: ProxyMode = ProxyMode.OFF
    trusted: tuple[Network, ...] = ()
    # With no ``trusted`` networks: every peer (Java), or none (where addresses guard
    # something, the server sets this false: ACL address checks).
    trust_any: bool = True

    def trusts(self, host: str) -> bool:
        """Whether a connection from ``host`` (the socket's peer IP) may send a header."""
        if not self.trusted:
            return self.trust_any
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        return any(address in network for network in self.trusted)
