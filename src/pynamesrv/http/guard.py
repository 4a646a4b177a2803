"""Limits of the HTTP port: how many connections, from whom, how long and how large a request.

aiohttp alone accepts any number of connections and waits up to an hour (its keep-alive
timeout) for a request that never completes: 1,100 connections sending their headers slowly
took every descriptor of a process limited to 1,024, and the remoting port could accept no
broker (issue 24). Then 256 keep-alive connections sending one request a minute held every
slot, and the readiness and liveness probes were answered 503 until the pod was restarted
(issue 32). Each accepted connection gets a ``GuardedConnection`` in front of aiohttp's own
protocol:

* an idle keep-alive connection is closed after ``keepalive_s`` (httpKeepAliveSeconds);
* past ``max_connections`` open ones, a new connection closes the oldest idle keep-alive
  connection (one that was answered and has not started another request; one in the middle
  of a request, or that has not sent its first, is never idle) and takes its slot;
* with none idle, it gets one of ``HEALTH_RESERVE`` more slots that serve only
  ``RESERVED_PATHS`` (/healthz, /healthz/live, /metrics: decided once its request head is
  read, then closed): the probes and the scrape get in whatever holds the others. Past the
  reserve it is answered 503 and closed at once;
* one address (loopback too) holds at most ``max_per_source`` connections: past it, a new one
  closes that address's oldest idle connection, or is answered 503 and closed;
* the whole port reads at most ``max_requests_per_s`` requests a second (``budget.py``): past
  it, a connection with bytes to read is paused and waits its turn;
* a request's bytes (its head, and a body if any) must arrive within ``header_timeout_s`` of
  the read that started it, and a new connection must start its first request within it;
* a request may hold at most ``MAX_REQUEST_BYTES`` (nothing served here reads a body);
* aiohttp's own parser refuses longer lines, larger or more headers (400).

Each refusal or shed connection is counted by reason and logged at most once a minute per
reason. Whether a read completed a request head, whether aiohttp's parser refused it, and
whether a request is being handled, is read from its ``RequestHandler`` (``_request_count``,
``_messages``, ``_request_in_progress``), the one place that says so at once;
``tests/e2e/test_http_limits.py`` fails if an aiohttp upgrade moves them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from pynamesrv.http.budget import RequestBudget
from pynamesrv.remoting.ratelog import RateLimitedLog

log = logging.getLogger("pynamesrv.http")

MAX_LINE_BYTES: Final = 8190  # request line (aiohttp's default)
MAX_FIELD_BYTES: Final = 8190  # one header
MAX_HEADERS: Final = 64
MAX_REQUEST_BYTES: Final = 64 * 1024  # one request's head and body
HEALTH_RESERVE: Final = 8  # slots past max_connections, for RESERVED_PATHS only
RESERVED_PATHS: Final = frozenset({"/healthz", "/healthz/live", "/metrics"})

REFUSED_MAX_CONNECTIONS: Final = "max_connections"
REFUSED_MAX_PER_SOURCE: Final = "max_per_source"
REFUSED_IDLE_SHED: Final = "idle_shed"
REFUSED_HEADER_TIMEOUT: Final = "header_timeout"
REFUSED_TOO_LARGE: Final = "too_large"
REFUSED_BAD_REQUEST: Final = "bad_request"
REFUSAL_REASONS: Final = (
    REFUSED_BAD_REQUEST,
    REFUSED_HEADER_TIMEOUT,
    REFUSED_IDLE_SHED,
    REFUSED_MAX_CONNECTIONS,
    REFUSED_MAX_PER_SOURCE,
    REFUSED_TOO_LARGE,
)
_LOG_PERIOD_S: Final = 60.0
_BUSY: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 28\r\n"
    b"Connection: close\r\n\r\ntoo many HTTP connections\r\n\r\n"
)


class _NoParseErrors(logging.Filter):
    """Drops aiohttp's traceback per malformed request (a peer could flood the log with them):
    the guard counts those and logs one line per interval. Other errors still log."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, HttpProcessingError)


_AIOHTTP_LOG: Final = logging.getLogger("pynamesrv.http.aiohttp")
_AIOHTTP_LOG.addFilter(_NoParseErrors())


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_connections: int = 256
    header_timeout_s: float = 10.0
    keepalive_s: float = 15.0
    max_per_source: int = 32
    max_requests_per_s: float = 200.0

    def handler_args(self) -> dict[str, Any]:
        """aiohttp's own limits, as ``RequestHandler`` keyword arguments."""
        return {
            "keepalive_timeout": self.keepalive_s,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_FIELD_BYTES,
            "max_headers": MAX_HEADERS,
            "lingering_time": self.header_timeout_s,
            "logger": _AIOHTTP_LOG,
        }


class HttpGuard:
    """Counts the open HTTP connections (by source, and those in the reserve) and the refused
    ones; makes their protocols and picks the idle connection to shed."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.budget = RequestBudget(limits.max_requests_per_s)
        self.open = 0  # the reserve's included
        self.refused: Counter[str] = Counter()
        self.per_source: Counter[str] = Counter()
        self.reserved: set[asyncio.BaseTransport] = set()  # connections in the reserve
        # Open connections, least recently active first: the oldest idle one is shed first.
        self._by_activity: OrderedDict[GuardedConnection, None] = OrderedDict()
        self._log = RateLimitedLog(log, _LOG_PERIOD_S)

    def factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        """The protocol factory of the listening socket, in front of aiohttp's ``server``."""
        return lambda: GuardedConnection(self, server)

    def refuse(self, reason: str, peer: str, detail: str) -> None:
        self.refused[reason] += 1
        message = f"closing HTTP connection {peer} ({reason}): {detail}"
        self._log.hit(reason, logging.WARNING, message)

    def deferred(self, peer: str) -> None:
        """A connection waits for the request budget: logged at most once a minute."""
        self._log.hit(
            "request_budget",
            logging.WARNING,
            f"HTTP request budget spent (httpMaxRequestsPerSecond "
            f"{self.limits.max_requests_per_s:g}): {peer} and {self.budget.waiting - 1} more "
            "connections wait their turn",
        )

    def is_reserved(self, transport: asyncio.BaseTransport | None) -> bool:
        return transport is not None and transport in self.reserved

    def admit(self, conn: GuardedConnection, source: str, reserved: bool) -> None:
        self.open += 1
        self.per_source[source] += 1
        self._by_activity[conn] = None
        if reserved and conn.transport is not None:
            self.reserved.add(conn.transport)

    def release(self, conn: GuardedConnection, source: str) -> None:
        self.open -= 1
        left = self.per_source[source] - 1
        if left > 0:
            self.per_source[source] = left
        else:
            del self.per_source[source]
        self._by_activity.pop(conn, None)
        if conn.transport is not None:
            self.reserved.discard(conn.transport)

    def touched(self, conn: GuardedConnection) -> None:
        if conn in self._by_activity:
            self._by_activity.move_to_end(conn)

    def shed(self, source: str | None, newcomer: str) -> bool:
        """Close the least recently active idle connection (of ``source`` if given, else any
        outside the reserve) to make room for ``newcomer``; False when none is idle.

        O(open connections) at worst, and only when a limit is reached."""
        for conn in self._by_activity:
            if source is not None and conn.source != source:
                continue
            if source is None and self.is_reserved(conn.transport):
                continue
            if conn.idle():
                conn.shed(f"the oldest idle keep-alive connection, closed for {newcomer}")
                return True
        return False


def _parser_refused(inner: RequestHandler, heads: int) -> bool:
    """Whether one of the last ``heads`` messages is aiohttp's parse error (answered 400)."""
    return any(isinstance(m, _ErrInfo) for m, _ in islice(reversed(inner._messages), heads))


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"


def _source(transport: asyncio.BaseTransport) -> str:
    """The peer's address without the port: IPv4 as is (an IPv4-mapped IPv6 address too, so
    one host is one source on a dual-stack socket), IPv6 by its /64 (one host commonly holds
    a whole /64). Loopback is a source like any other."""
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple):
        return "?"
    host = str(peer[0]).split("%", 1)[0]  # a link-local address's zone
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return host


class GuardedConnection(asyncio.Protocol):
    """One HTTP connection: the guard's limits, then aiohttp's ``RequestHandler``."""

    def __init__(self, guard: HttpGuard, server: web.Server) -> None:
        self.guard = guard
        self.server = server
        self.inner: RequestHandler | None = None
        self.transport: asyncio.Transport | None = None
        self.source = "?"
        self._timer: asyncio.TimerHandle | None = None
        self._pending = 0  # bytes since the last request head completed
        self._held: bytearray | None = None  # read while the request budget was spent

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)
        guard = self.guard
        limits = guard.limits
        source = _source(transport)
        peer = _peer(transport)
        if guard.per_source[source] >= limits.max_per_source and not guard.shed(source, peer):
            self._turn_away(
                tcp,
                REFUSED_MAX_PER_SOURCE,
                f"{guard.per_source[source]} open from {source}, none idle "
                f"(httpMaxConnectionsPerSource {limits.max_per_source})",
            )
            return
        reserved = False
        if guard.open - len(guard.reserved) >= limits.max_connections and not guard.shed(
            None, peer
        ):
            if len(guard.reserved) >= HEALTH_RESERVE:
                self._turn_away(
                    tcp,
                    REFUSED_MAX_CONNECTIONS,
                    f"{guard.open} open, none idle (httpMaxConnections "
                    f"{limits.max_connections} and {HEALTH_RESERVE} for health checks)",
                )
                return
            reserved = True  # health checks and the scrape only (HttpServer's middleware)
        self.transport = tcp
        self.source = source
        guard.admit(self, source, reserved)
        self.inner = self.server()
        self.inner.connection_made(transport)
        self._arm()

    def _turn_away(self, tcp: asyncio.Transport, reason: str, detail: str) -> None:
        self.guard.refuse(reason, _peer(tcp), detail)
        tcp.write(_BUSY)
        tcp.close()

    def idle(self) -> bool:
        """Answered at least once and waiting for its next request: nothing of a request
        received, queued, being handled or still being written."""
        inner, transport = self.inner, self.transport
        return (
            inner is not None
            and transport is not None
            and not transport.is_closing()
            and inner._request_count > 0
            and self._pending == 0
            and self._held is None
            and not inner._messages
            and not inner._request_in_progress
            and transport.get_write_buffer_size() == 0
        )

    def shed(self, detail: str) -> None:
        """Close now to give the slot to another connection (the guard's counts follow at
        once: the transport reports its loss only later)."""
        self._close(REFUSED_IDLE_SHED, detail)
        self._release()

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self._held is not None:  # reading is paused; bytes already on their way
            self._held += data
            return
        budget = self.guard.budget
        if not budget.allows() and self.transport is not None:
            self._held = bytearray(data)
            self.transport.pause_reading()
            budget.wait(self)
            self.guard.deferred(_peer(self.transport))
            return
        self._feed(data)

    def resume_from_budget(self) -> None:
        """The request budget has a token for this connection: read what waited, go on."""
        held, self._held = self._held, None
        if self.transport is None or held is None:
            return
        self.transport.resume_reading()
        self._feed(bytes(held))

    def _feed(self, data: bytes) -> None:
        inner = self.inner
        if inner is None:
            return
        self.guard.touched(self)
        heads = inner._request_count
        inner.data_received(data)
        heads = inner._request_count - heads
        self.guard.budget.spend(heads)
        if heads:  # a request's head arrived: the next one's time starts with its bytes
            self._pending = 0
            self._disarm()
            if _parser_refused(inner, heads) and self.transport is not None:
                self.guard.refuse(
                    REFUSED_BAD_REQUEST, _peer(self.transport), "a malformed or too long head"
                )
            return
        self._pending += len(data)
        if self._pending > MAX_REQUEST_BYTES:
            self._close(REFUSED_TOO_LARGE, f"more than {MAX_REQUEST_BYTES} bytes in a request")
        elif self._timer is None:
            self._arm()

    def eof_received(self) -> None:
        if self.inner is not None:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        inner = self.inner
        self._release()
        if inner is not None:
            inner.connection_lost(exc)

    def _release(self) -> None:
        """Give the slot back, once; aiohttp's protocol still hears of the loss."""
        self._disarm()
        if self.transport is not None:
            self.guard.release(self, self.source)
            self.transport = None

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.guard.limits.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        self._close(
            REFUSED_HEADER_TIMEOUT,
            f"a request incomplete after {self.guard.limits.header_timeout_s:g}s "
            f"({self._pending} bytes)",
        )

    def _close(self, reason: str, detail: str) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.guard.refuse(reason, _peer(self.transport), detail)
        self.transport.abort()  # the descriptor back now, not after a slow peer reads
