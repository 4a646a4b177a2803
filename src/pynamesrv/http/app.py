"""The HTTP server (aiohttp) next to the remoting port, on the same event loop.

Routes:
  /metrics                  Prometheus exposition (text, or OpenMetrics if asked for)
  /healthz                  readiness: 200 "ok" or "recovering: N provisional brokers";
                            503 "starting" or "waiting for service" (the 5.x start-up wait)
  /healthz/live             liveness: 200 "live" whenever this process answers HTTP
  /rocketmq/nsaddr          the address service clients poll: "host:port;host:port"
  /api/status               headline numbers
  /api/clusters             clusters -> broker groups -> brokers with liveness
  /api/topics?q=&limit=     topics whose name contains q, with queues and perm
  /api/topics/{topic}       the route, as GET_ROUTEINFO_BY_TOPIC's body; 404 when none
  /api/routes-at?topic=&time=[&dialect=]
                            the route this server answered at a past time, rebuilt from its
                            journal (`pipeline routes-at`'s document for this instance)
  /                         the status page (one self-contained HTML file)

Everything is read-only and reads the controller's tables directly: one event loop owns
them, so a handler sees a consistent state without locks or copies. The loop is the one that
answers route queries, so nothing here may hold it: the port has budgets for the whole port
(guard.py, budget.py), and the two scans (topic search, cluster listing) run in slices that
start over if the tables change between two of them (search.py). Time travel reads files and
replays them: that runs on a thread of its own, one at a time, and counts as a scan.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Final

import orjson
from aiohttp import web

from pynamesrv.http import views
from pynamesrv.http.guard import (
    HEALTH_RESERVE,
    REFUSED_MAX_CONNECTIONS,
    RESERVED_PATHS,
    HttpGuard,
    HttpLimits,
)
from pynamesrv.http.metrics import build_registry, render
from pynamesrv.http.search import SearchBusy, SearchGate, find_topics
from pynamesrv.namesrv.history import NoRoute, OutsideJournals, parse_time, route_at
from pynamesrv.namesrv.timetravel import DIALECTS
from pynamesrv.remoting.fdbudget import http_cap, open_file_limit

if TYPE_CHECKING:
    from pynamesrv.namesrv.view import NamesrvView

log = logging.getLogger("pynamesrv.http")

SHUTDOWN_TIMEOUT_S: Final = 2.0
BACKLOG: Final = 32  # also the most connections accepted at once past the cap (fdbudget.RESERVE)
TEXT_PLAIN: Final = "text/plain"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _now_ms() -> int:
    """Wall-clock ms, the clock the controller stamps heartbeats with."""
    return time.time_ns() // 1_000_000


def _load_page() -> tuple[bytes, str]:
    """The status page and a Content-Security-Policy that allows exactly its inline code.

    Hashing the inline <script> and <style> lets the page stay one self-contained file while
    the browser still refuses any other script (topic and broker names come from brokers,
    so the page must never be a place where injected markup can run).
    """
    html = (files("pynamesrv.http") / "static" / "index.html").read_text(encoding="utf-8")

    def hashes(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
        digests = (base64.b64encode(hashlib.sha256(b.encode()).digest()).decode() for b in blocks)
        return " ".join(f"'sha256-{d}'" for d in digests)

    csp = (
        f"default-src 'none'; script-src {hashes('script')}; style-src {hashes('style')}; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return html.encode("utf-8"), csp


def _local_host(request: web.Request) -> str | None:
    """The local address a request arrived on."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return sockname[0] if isinstance(sockname, tuple) else None


def _peer_of(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"


def _busy(busy: SearchBusy) -> web.Response:
    """429: ``httpMaxSearches`` scans run already; the page retries at its next refresh."""
    response = _json({"error": str(busy)}, status=429)
    response.headers["Retry-After"] = "1"
    return response


def _json(data: Any, status: int = 200) -> web.Response:
    # brokerAddrs has int keys (broker ids), as in the route body.
    body = orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS)
    return web.Response(body=body, status=status, content_type="application/json")


class HttpServer:
    """Serves the HTTP endpoints of one name server; start after the controller's port."""

    def __init__(self, view: NamesrvView) -> None:
        self.view = view
        self.guard = HttpGuard(
            HttpLimits(
                # the health reserve is inside HTTP's share of the descriptors
                max_connections=max(
                    1,
                    http_cap(view.http_max_connections + HEALTH_RESERVE, open_file_limit())
                    - HEALTH_RESERVE,
                ),
                header_timeout_s=view.http_header_timeout_s,
                keepalive_s=view.http_keep_alive_s,
                max_per_source=view.http_max_connections_per_source,
                max_requests_per_s=view.http_max_requests_per_s,
            )
        )
        self.searches = SearchGate(view.http_max_searches)
        self.registry = build_registry(
            view, lambda: self.nsaddr_requests, self.guard, self.searches
        )
        self.port = 0
        self.nsaddr_requests = 0  # clients finding us through the address service
        self._page, self._csp = _load_page()
        self._runner: web.AppRunner | None = None
        self._listeners: list[asyncio.Server] = []
        # Time travel reads and replays hour files: never on the loop, and one at a time
        # (the others admitted by the scan budget wait their turn here).
        self._history = ThreadPoolExecutor(1, thread_name_prefix="pynamesrv-routes-at")
        self.app = self._build_app()

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._admission])
        app.on_response_prepare.append(self._common_headers)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/healthz/live", self.live)
        app.router.add_get("/rocketmq/nsaddr", self.nsaddr)
        # The Java client asks for "nsaddr-<unit>?nofix=1" when a unit name is set.
        app.router.add_get(r"/rocketmq/{unit:nsaddr-[^/]+}", self.nsaddr)
        app.router.add_get("/api/status", self.api_status)
        app.router.add_get("/api/clusters", self.api_clusters)
        app.router.add_get("/api/topics", self.api_topics)
        app.router.add_get("/api/topics/{topic:.+}", self.api_route)
        app.router.add_get("/api/routes-at", self.api_routes_at)
        app.router.add_get("/", self.index)
        return app

    # ------------------------------------------------------------------ lifecycle

    async def start(
        self, host: str, port: int, *, sockets: list[socket.socket] | None = None
    ) -> int:
        """Listen on ``host:port`` (0 = any free port), or accept on ``sockets`` already
        bound there (``remoting.listen.bind_listeners``); returns the bound port.

        The socket is ours, not a ``TCPSite``'s: every connection passes the guard (the
        connection cap, the request timeout and size) before aiohttp's protocol sees it."""
        limits = self.guard.limits
        if limits.max_connections < self.view.http_max_connections:
            log.info(
                "httpMaxConnections=%d is more than a quarter of the open-file limit: at most "
                "%d HTTP connections (%d, and %d for health checks; the rest of the descriptors "
                "stay with the remoting port)",
                self.view.http_max_connections,
                limits.max_connections + HEALTH_RESERVE,
                limits.max_connections,
                HEALTH_RESERVE,
            )
        runner = web.AppRunner(
            self.app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S, **limits.handler_args()
        )
        await runner.setup()
        try:
            tls = self.view.http_tls
            ssl_context = tls.following_context() if tls is not None else None
            assert runner.server is not None  # setup made it
            loop = asyncio.get_running_loop()
            options: dict[str, Any] = {
                "ssl": ssl_context,
                "backlog": BACKLOG,
                "ssl_handshake_timeout": limits.header_timeout_s if ssl_context else None,
            }
            factory = self.guard.factory(runner.server)
            if sockets is None:
                self._listeners.append(
                    await loop.create_server(factory, host, port, reuse_address=True, **options)
                )
            else:
                for sock in sockets:
                    self._listeners.append(await loop.create_server(factory, sock=sock, **options))
        except BaseException:
            for listener in self._listeners:
                listener.close()
            self._listeners = []
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = self._listeners[0].sockets[0].getsockname()[1]
        scheme = "HTTPS" if ssl_context is not None else "HTTP"
        log.info("%s server (metrics, status page, nsaddr) on %s:%d", scheme, host, self.port)
        return self.port

    async def stop(self) -> None:
        """Close the port and the open connections; calling it again does nothing."""
        self.guard.budget.close()
        for listener in self._listeners:
            listener.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self.port = 0
        for listener in self._listeners:
            await listener.wait_closed()
        self._listeners = []
        self._history.shutdown(wait=False, cancel_futures=True)

    @property
    def ready(self) -> bool:
        return self.view.ready

    # ------------------------------------------------------------------ handlers

    @web.middleware
    async def _admission(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every request takes a turn of the loop first: aiohttp handles the requests one
        connection pipelined back to back without yielding, and 1,000 tiny ones in one read
        would hold the loop the remoting port shares for as long as they all take.

        A connection in the guard's reserve (every other slot was busy) may ask for the
        health checks and the metrics, once; anything else is answered 503."""
        await asyncio.sleep(0)
        if not self.guard.is_reserved(request.transport):
            return await handler(request)
        if request.path in RESERVED_PATHS:
            response = await handler(request)
        else:
            self.guard.refuse(
                REFUSED_MAX_CONNECTIONS,
                _peer_of(request),
                f"{request.path[:200]!r} asked on a slot kept for health checks",
            )
            response = web.Response(
                status=503,
                text="too many HTTP connections: only /healthz, /healthz/live and /metrics "
                "are answered now",
                content_type=TEXT_PLAIN,
            )
        response.force_close()
        return response

    @staticmethod
    async def _common_headers(request: web.Request, response: web.StreamResponse) -> None:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Cache-Control", "no-store")

    async def metrics(self, request: web.Request) -> web.Response:
        body, content_type = render(self.registry, request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def healthz(self, request: web.Request) -> web.Response:
        status, text = views.health(self.view)
        return web.Response(text=text, status=status, content_type=TEXT_PLAIN)

    async def live(self, request: web.Request) -> web.Response:
        """Liveness: the event loop runs (a restart would not help a server that is merely
        waiting for its brokers or for the 5.x start-up wait)."""
        return web.Response(text="live", content_type=TEXT_PLAIN)

    async def nsaddr(self, request: web.Request) -> web.Response:
        """Plain ``host:port;host:port``, no trailing newline (clients cut at the first one)."""
        self.nsaddr_requests += 1
        text = views.nsaddr_text(self.view, request.headers.get("Host"), _local_host(request))
        return web.Response(text=text, content_type=TEXT_PLAIN)

    async def api_status(self, request: web.Request) -> web.Response:
        status = views.status_view(
            self.view, _now_ms(), request.headers.get("Host"), _local_host(request)
        )
        return _json(status)

    async def api_clusters(self, request: web.Request) -> web.Response:
        try:
            with self.searches.enter():
                return _json(await views.clusters_view(self.view, _now_ms()))
        except SearchBusy as busy:
            return _busy(busy)

    async def api_topics(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "")
        try:
            limit = int(request.query.get("limit", views.DEFAULT_TOPIC_LIMIT))
        except ValueError:
            return _json({"error": "limit must be an integer"}, status=400)
        limit = max(1, min(limit, views.MAX_TOPIC_LIMIT))
        try:
            with self.searches.enter():
                found = await find_topics(self.view, query, limit)
        except SearchBusy as busy:
            return _busy(busy)
        return _json(views.topics_view(self.view, found))

    async def api_route(self, request: web.Request) -> web.Response:
        topic = request.match_info["topic"]
        body = self.view.route_body(topic)
        if body is None:
            return _json({"error": "no route", "topic": topic}, status=404)
        return web.Response(body=body, content_type="application/json")

    async def api_routes_at(self, request: web.Request) -> web.Response:
        """The route of ``topic`` this server answered at ``time`` (epoch ms or ISO-8601,
        UTC), rebuilt from its own journal by the code ``pynamesrv pipeline routes-at``
        runs (``namesrv.history.route_at``): that command's document for this instance.
        The journal is flushed first (every line recorded until now is read); the reading
        and replay run on a thread, never on the loop that answers routes, and count
        against ``httpMaxSearches`` like a search (429 past it). 400 for a bad query, 404
        when the journal is off, the time is before it, or the topic had no route then."""
        query = request.query
        topic, dialect = query.get("topic", ""), query.get("dialect", "standard")
        if not topic:
            return _json({"error": "give topic"}, status=400)
        if dialect not in DIALECTS:
            return _json({"error": f"dialect must be one of {', '.join(DIALECTS)}"}, status=400)
        try:
            at_ms = parse_time(query.get("time", ""))
        except ValueError as exc:
            return _json({"error": f"time: {exc}"}, status=400)
        if at_ms > _now_ms():
            return _json({"error": "time is in the future"}, status=400)
        location = self.view.journal_location()
        if location is None:
            return _json({"error": "this server writes no journal (journalEnable)"}, status=404)
        rebuild = partial(route_at, *location, at_ms, topic, DIALECTS[dialect])
        try:
            with self.searches.enter():
                await self.view.flush_journal()
                answer = await asyncio.get_running_loop().run_in_executor(self._history, rebuild)
        except SearchBusy as busy:
            return _busy(busy)
        except (OutsideJournals, NoRoute) as exc:
            return _json({"error": str(exc), "topic": topic, "time": at_ms}, status=404)
        return _json(answer)

    async def index(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self._page,
            content_type="text/html",
            charset="utf-8",
            headers={"Content-Security-Policy": self._csp},
        )
