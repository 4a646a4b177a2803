"""Who holds the remoting port's connection slots: counts per source address, and the idlest
connection to shed when every slot is taken.

Both are asked on every accept, so during a flood of connections at wire speed, and neither
may scan every connection each time: the per-source counts are one dict entry per address,
and the idlest connections are found ``IDLE_CANDIDATES`` at a time by one scan, then taken
in turn while each is still as idle as it was. Sockets know nothing of this module; the
server (``server.RemotingServer``) decides what to close and logs it.
"""

from __future__ import annotations

import heapq
import ipaddress
from collections.abc import Callable, Collection
from operator import attrgetter
from typing import Final, Generic, Protocol, TypeVar

# Connections kept from one scan for the idlest: a full server under a flood of accepts
# scans all its connections once per this many accepts.
IDLE_CANDIDATES: Final = 64


class Slot(Protocol):
    """What ``IdleConnections`` reads of a connection."""

    @property
    def last_activity(self) -> float: ...  # monotonic time of its last read

    @property
    def is_open(self) -> bool: ...


S = TypeVar("S", bound=Slot)


def source_of(host: str) -> str:
    """The source a connection from ``host`` counts under: an IPv4 address as it is (an
    IPv4-mapped IPv6 one too, so a host is one source on a dual-stack socket), an IPv6
    address by its /64 (one host commonly holds a whole /64, and would otherwise pass the
    cap by changing addresses). The HTTP port counts its sources the same way."""
    host = host.split("%", 1)[0]  # a link-local address's zone
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return host


class SourceCounts:
    """Open connections by source address, at most ``cap`` each (0: no cap). Loopback is an
    address like any other: a local flood counts."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.counts: dict[str, int] = {}

    def admit(self, host: str) -> bool:
        """Count one more connection from ``host``; False (not counted) when it has ``cap``."""
        count = self.counts.get(host, 0)
        if self.cap and count >= self.cap:
            return False
        self.counts[host] = count + 1
        return True

    def release(self, host: str) -> None:
        left = self.counts[host] - 1
        if left:
            self.counts[host] = left
        else:
            del self.counts[host]


class IdleConnections(Generic[S]):
    """Finds the open connection longest without a read that is not protected."""

    def __init__(self, batch: int = IDLE_CANDIDATES) -> None:
        self.batch = batch
        # The idlest of the last scan, idlest last, with their last_activity then.
        self._candidates: list[tuple[S, float]] = []

    def idlest(self, connections: Collection[S], protected: Callable[[S], bool]) -> S | None:
        """The idlest open connection of ``connections`` not ``protected``, or None.

        A candidate of the last scan is still the idlest while its ``last_activity`` is as
        it was: a connection's only grows, and a new connection's is now, so no other can
        have become idler meanwhile. A new scan when no candidate is left."""
        for _ in range(2):
            candidates = self._candidates
            while candidates:
                conn, stamp = candidates.pop()
                if (
                    conn.is_open
                    and conn.last_activity == stamp
                    and conn in connections
                    and not protected(conn)
                ):
                    return conn
            found = heapq.nsmallest(
                self.batch,
                (c for c in connections if c.is_open and not protected(c)),
                key=attrgetter("last_activity"),
            )
            if not found:
                return None
            self._candidates = [(c, c.last_activity) for c in reversed(found)]
        return None
