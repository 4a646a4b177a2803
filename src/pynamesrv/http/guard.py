"""Limits of the HTTP port: how many connections, how long and how large a request may be.

aiohttp alone accepts any number of connections and waits up to an hour (its keep-alive
timeout) for a request that never completes: 1,100 connections sending their headers slowly
took every descriptor of a process limited to 1,024, and the remoting port could accept no
broker (issue 24). Each accepted connection gets a ``GuardedConnection`` in front of
aiohttp's own protocol:

* past ``max_connections`` open ones, a connection is answered 503 and closed at once;
* a request's bytes (its head, and a body if any) must arrive within ``header_timeout_s`` of
  the read that started it, and a new connection must start its first request within it;
* a request may hold at most ``MAX_REQUEST_BYTES`` (nothing served here reads a body);
* aiohttp's own parser refuses longer lines, larger or more headers (400).

Each refusal is counted by reason and logged at most once per interval. Whether a read
completed a request head, and whether aiohttp's parser refused it, is read from its
``RequestHandler`` (``_request_count``, ``_messages``), the one place that says so at once;
``tests/e2e/test_http_limits.py`` fails if an aiohttp upgrade moves them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from pynamesrv.remoting.ratelog import RateLimitedLog

log = logging.getLogger("pynamesrv.http")

MAX_LINE_BYTES: Final = 8190  # request line (aiohttp's default)
MAX_FIELD_BYTES: Final = 8190  # one header
MAX_HEADERS: Final = 64
MAX_REQUEST_BYTES: Final = 64 * 1024  # one request's head and body
KEEPALIVE_S: Final = 75.0  # an idle keep-alive connection (aiohttp's default: 3,630 s)

REFUSED_MAX_CONNECTIONS: Final = "max_connections"
REFUSED_HEADER_TIMEOUT: Final = "header_timeout"
REFUSED_TOO_LARGE: Final = "too_large"
REFUSED_BAD_REQUEST: Final = "bad_request"
REFUSAL_REASONS: Final = (
    REFUSED_BAD_REQUEST,
    REFUSED_HEADER_TIMEOUT,
    REFUSED_MAX_CONNECTIONS,
    REFUSED_TOO_LARGE,
)
_LOG_PERIOD_S: Final = 10.0
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

    def handler_args(self) -> dict[str, Any]:
        """aiohttp's own limits, as ``RequestHandler`` keyword arguments."""
        return {
            "keepalive_timeout": KEEPALIVE_S,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_FIELD_BYTES,
            "max_headers": MAX_HEADERS,
            "lingering_time": self.header_timeout_s,
            "logger": _AIOHTTP_LOG,
        }


class HttpGuard:
    """Counts the open HTTP connections and the refused ones; makes their protocols."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.open = 0
        self.refused: Counter[str] = Counter()
        self._log = RateLimitedLog(log, _LOG_PERIOD_S)

    def factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        """The protocol factory of the listening socket, in front of aiohttp's ``server``."""
        return lambda: GuardedConnection(self, server)

    def refuse(self, reason: str, peer: str, detail: str) -> None:
        self.refused[reason] += 1
        message = f"closing HTTP connection {peer} ({reason}): {detail}"
        self._log.hit(reason, logging.WARNING, message)


def _parser_refused(inner: RequestHandler, heads: int) -> bool:
    """Whether one of the last ``heads`` messages is aiohttp's parse error (answered 400)."""
    return any(isinstance(m, _ErrInfo) for m, _ in islice(reversed(inner._messages), heads))


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"


class GuardedConnection(asyncio.Protocol):
    """One HTTP connection: the guard's limits, then aiohttp's ``RequestHandler``."""

    def __init__(self, guard: HttpGuard, server: web.Server) -> None:
        self.guard = guard
        self.server = server
        self.inner: RequestHandler | None = None
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._pending = 0  # bytes since the last request head completed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)
        guard = self.guard
        if guard.open >= guard.limits.max_connections:
            guard.refuse(
                REFUSED_MAX_CONNECTIONS,
                _peer(transport),
                f"{guard.open} open (httpMaxConnections {guard.limits.max_connections})",
            )
            tcp.write(_BUSY)
            tcp.close()
            return
        guard.open += 1
        self.transport = tcp
        self.inner = self.server()
        self.inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if inner is None:
            return
        heads = inner._request_count
        inner.data_received(data)
        heads = inner._request_count - heads
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
        self._disarm()
        inner, self.inner, self.transport = self.inner, None, None
        if inner is not None:
            self.guard.open -= 1
            inner.connection_lost(exc)

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
