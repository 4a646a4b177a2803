"""Caller addresses: RocketMQ's ``whiteRemoteAddress`` patterns and the host of a peer.

Not one of Java's name-server parts (its NameServer checks no address); the ACL
(``namesrv.acl``) restricts accounts by these patterns and the controller asks whether a
listen address is loopback only. Pure: no sockets, no name resolution.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class _Alternative:
    """One address pattern: per byte (IPv4) or per 16-bit group (IPv6), allowed ranges."""

    version: int
    parts: tuple[tuple[tuple[int, int], ...], ...]

    def matches(self, groups: tuple[int, ...]) -> bool:
        for value, ranges in zip(groups, self.parts, strict=True):
            for lo, hi in ranges:
                if lo <= value <= hi:
                    break
            else:
                return False
        return True


_ANY_TEXTS: Final = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """RocketMQ's whiteRemoteAddress forms: ``192.168.1.1``, ``*``, ``192.168.0.*``,
    ``192.168.1.1,192.168.1.2``, ``192.168.1.{1,2}``, ``10.0.1-10.*``, IPv6 literals and
    IPv6 groups with ``*``/``a-b``/``{a,b}``. Every part may use every form (a superset of
    Java's, which allows a range or a brace list in one position only). Blank: any address
    (no restriction)."""

    text: str
    any_address: bool
    alternatives: tuple[_Alternative, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> AddressPattern:
        """Raise ValueError with a one-line reason when ``text`` is not a pattern."""
        raw = (text or "").strip()
        if not raw or raw in _ANY_TEXTS:
            return cls(raw, True)
        alternatives = tuple(_parse_alternative(a.strip()) for a in _split_outside_braces(raw))
        return cls(raw, False, alternatives)

    def matches(self, host: str) -> bool:
        if self.any_address:
            return True
        groups = _address_groups(host)
        if groups is None:
            return False
        version, values = groups
        return any(a.version == version and a.matches(values) for a in self.alternatives)


def _split_outside_braces(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '}}' in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise ValueError(f"unbalanced '{{' in {text!r}")
    parts.append(text[start:])
    if any(not p.strip() for p in parts):
        raise ValueError(f"empty address in list {text!r}")
    return parts


def _parse_alternative(text: str) -> _Alternative:
    if ":" in text:
        return _Alternative(6, tuple(_parse_part(p, 16, text) for p in _ipv6_groups(text)))
    pieces = text.split(".")
    if len(pieces) != 4:
        raise ValueError(f"{text!r} is not an IPv4 address or pattern (four dot-separated parts)")
    return _Alternative(4, tuple(_parse_part(p, 10, text) for p in pieces))


def _ipv6_groups(text: str) -> list[str]:
    if not any(c in text for c in "*-{"):
        try:  # a literal: let the standard library read every short form
            exploded = ipaddress.IPv6Address(text).exploded
        except ValueError as exc:
            raise ValueError(f"{text!r} is not an IPv6 address") from exc
        return exploded.split(":")
    if "::" in text:
        left, _, right = text.partition("::")
        head = left.split(":") if left else []
        tail = right.split(":") if right else []
        missing = 8 - len(head) - len(tail)
        if missing < 1:
            raise ValueError(f"{text!r} has too many groups for '::'")
        return [*head, *["0"] * missing, *tail]
    groups = text.split(":")
    if len(groups) != 8:
        raise ValueError(f"{text!r} is not an IPv6 pattern (eight groups, or '::')")
    return groups


def _parse_part(part: str, base: int, whole: str) -> tuple[tuple[int, int], ...]:
    """One byte/group: ``*``, ``n``, ``a-b`` or ``{n,a-b,...}`` -> allowed ranges."""
    top = 255 if base == 10 else 0xFFFF
    part = part.strip()
    if part == "*":
        return ((0, top),)
    items = [part]
    if part.startswith("{") and part.endswith("}"):
        items = [i.strip() for i in part[1:-1].split(",")]
    ranges = []
    for item in items:
        low, dash, high = item.partition("-")
        try:
            lo = _number(low, base, top)
            hi = _number(high, base, top) if dash else lo
        except ValueError:
            kind = "a number 0-255" if base == 10 else "a hex group 0-ffff"
            raise ValueError(
                f"{item!r} in {whole!r} is not {kind}, '*', 'a-b' or '{{a,b}}'"
            ) from None
        if lo > hi:
            raise ValueError(f"range {item!r} in {whole!r} runs backwards")
        ranges.append((lo, hi))
    return tuple(ranges)


def _number(text: str, base: int, top: int) -> int:
    text = text.strip()
    digits = "0123456789" if base == 10 else "0123456789abcdefABCDEF"
    if not text or len(text) > 4 or any(c not in digits for c in text):
        raise ValueError(text)
    value = int(text, base)
    if value > top:
        raise ValueError(text)
    return value


def _address_groups(host: str) -> tuple[int, tuple[int, ...]] | None:
    """(4, bytes) or (6, groups) of a caller address; an IPv4-mapped IPv6 address is IPv4."""
    parts = host.split(".")
    if len(parts) == 4 and all(p.isdigit() and len(p) <= 3 for p in parts):  # the usual case
        values = tuple(int(p) for p in parts)
        return (4, values) if max(values) <= 255 else None
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv4Address):
        return 4, tuple(address.packed)
    packed = address.packed
    return 6, tuple(int.from_bytes(packed[i : i + 2], "big") for i in range(0, 16, 2))


def host_of(peer: str) -> str:
    """``1.2.3.4:5678`` -> ``1.2.3.4``; ``::1:5678`` or ``[::1]:5678`` -> ``::1``."""
    if peer.startswith("["):
        return peer[1:].partition("]")[0]
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() and host else peer


def caller_address(channel: object) -> str:
    """The ``ip:port`` of the connection a request came on (any object with ``peer``)."""
    peer = getattr(channel, "peer", None)
    return peer if isinstance(peer, str) and peer else "-"


def is_loopback_host(host: str) -> bool:
    """Whether a listen address is reachable from this machine only."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a wildcard is "" or an address; a host name may resolve anywhere
