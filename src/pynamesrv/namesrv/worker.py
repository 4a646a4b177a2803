"""A worker process of ``serve --workers N``: answers reads from its replica, forwards
every write to the writer (docs/operations.md, "Workers").

It accepts on the writer's remoting port (SO_REUSEPORT), with the same limits, TLS, PROXY
protocol handling, access control and route fast path as the writer's own port. A read
(route, cluster info, topic lists, member group, KV and config reads) is answered from the
replica and never waits on the writer. Everything else goes to the writer over the link
with the identity of the connection it came on, and is answered with the writer's frame,
which arrives after the batches of the events it caused: the replica has applied them by
then. A closed connection that ever forwarded a request is reported; the writer decides
what leaves. When the link closes (the writer stopped or died) the worker stops: it never
answers from tables that no longer follow a writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import resource
import signal
import socket
import time
from time import perf_counter
from typing import Any, Final, cast

from pynamesrv.namesrv import workerlink as link
from pynamesrv.namesrv.acl import AccessControl
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import server_limits
from pynamesrv.namesrv.fastpath import RouteQueryFastPath
from pynamesrv.namesrv.processor import (
    RequestError,
    large_registration,
    registration_body_steps,
)
from pynamesrv.namesrv.replica import PreparedBody, Replica, ReplicaGap
from pynamesrv.namesrv.settings import setting
from pynamesrv.namesrv.stats import LATENCY_BUCKETS_S, NamesrvStats, RequestHistogram
from pynamesrv.remoting.codec import encode_head
from pynamesrv.remoting.codes import RequestCode, Version
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.proxy_protocol import ProxyMode, ProxyPolicy, parse_networks
from pynamesrv.remoting.server import Answer, Connection, RemotingServer
from pynamesrv.remoting.tls import TlsContextHolder, TlsSettings

log = logging.getLogger("pynamesrv.worker")

# What a worker answers from its replica; every other code goes to the writer.
READ_CODES: Final = frozenset(
    {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        RequestCode.GET_TOPICS_BY_CLUSTER,
        RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        RequestCode.GET_UNIT_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST,
        RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST,
        RequestCode.GET_KV_CONFIG,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        RequestCode.GET_NAMESRV_CONFIG,
        RequestCode.GET_BROKER_MEMBER_GROUP,
    }
)
STATS_PERIOD_S: Final = 1.0
# How often a worker looks whether a forwarded body has left, before decoding it itself.
FORWARD_POLL_S: Final = 0.001


def rss_bytes() -> int:
    """This process's resident memory (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


class Worker:
    """One worker: the link to the writer, the replica, the remoting port."""

    def __init__(self) -> None:
        self.replica: Replica | None = None
        self.server: RemotingServer | None = None
        self.stats = NamesrvStats()
        self.stats.count_topics = True  # sent to the writer each second (the journal's)
        self.index = 0
        self.going_away = False
        self.lag = RequestHistogram()  # published on the writer -> applied here
        self.link_closed = asyncio.Event()
        self._transport: asyncio.Transport | None = None
        self._decoder = link.LinkDecoder()
        self._pending: dict[int, tuple[Connection, asyncio.Future[bytes]]] = {}
        # Connections a live broker's latest registration came over (the writer says so in
        # each reply): the remoting server sheds them last when it needs a slot.
        self._protected: set[Connection] = set()
        self._ids = itertools.count(1)
        self._channel_ids: dict[Connection, int] = {}
        self._channels: dict[int, Connection] = {}
        self._hello: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._image: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._early: list[bytes] = []  # batches that arrived before the image was installed
        self._reader: Any = None
        self._fast_path: RouteQueryFastPath | None = None
        self._stats_task: asyncio.Task[None] | None = None
        self._acks: socket.socket | None = None  # acknowledgements of applied batches

    # ------------------------------------------------------------------ the link

    def link_protocol(self) -> asyncio.Protocol:
        worker = self

        class _Link(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                worker._transport = transport  # type: ignore[assignment]

            def data_received(self, data: bytes) -> None:
                try:
                    for kind, payload in worker._decoder.feed(data):
                        worker._on_message(kind, payload)
                except (link.LinkError, ReplicaGap) as exc:
                    log.error("worker %d: the link to the writer broke: %s", worker.index, exc)
                    worker._close_link()

            def connection_lost(self, exc: Exception | None) -> None:
                worker.link_closed.set()
                for _, future in worker._pending.values():
                    if not future.done():
                        future.set_result(b"")
                worker._pending.clear()

        return _Link()

    def _ack(self, position: int) -> None:
        """Tell the writer the batch is applied (it waits for it when on this core:
        ``WorkerLink.hand_over``); never blocks: a full socket means nobody waits."""
        if self._acks is not None:
            # full: nobody read, so nobody waits; or the writer is gone
            with contextlib.suppress(OSError):
                self._acks.send(link.ack(position))

    def _close_link(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _send(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _send_parts(self, parts: list[bytes]) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(parts)

    def _on_message(self, kind: int, payload: bytes) -> None:
        if kind == link.BATCH:
            published_ns, batch = link.split_batch(payload)
            if self.replica is None or not self._image.done():
                self._early.append(payload)
                return
            position = self.replica.apply_batch(batch)
            self.lag.observe(max(time.monotonic_ns() - published_ns, 0) / 1e9)
            self._ack(position)
        elif kind == link.REPLY:
            head, frame = link.split_framed(payload)
            if self.replica is not None:  # its batches are applied: a decoded body is done
                self.replica.prepared.pop(head["id"], None)
            pending = self._pending.pop(head["id"], None)
            if pending is not None and not pending[1].done():
                conn, future = pending
                if head.get("protected"):
                    self._protected.add(conn)
                else:
                    self._protected.discard(conn)
                future.set_result(frame)
        elif kind == link.CLOSE_CHANNEL:
            closing = self._channels.get(link.split_framed(payload)[0]["channel"])
            if closing is not None:
                closing.close()
        elif kind == link.GO_AWAY:
            self.going_away = True
            if self.server is not None:
                self.server.raw_answerer = None  # every request is decoded and checked
        elif kind == link.HELLO:
            self._hello.set_result(link.split_framed(payload)[0])
        elif kind == link.IMAGE:
            if self.replica is not None and self._image.done():  # rebuilt after falling behind
                self.replica.install(payload)
                log.warning("worker %d rebuilt from an image at position %d", self.index,
                            self.replica.position)  # fmt: skip
            else:
                self._image.set_result(payload)

    # ------------------------------------------------------------------ start

    async def run(self, sock: socket.socket) -> None:
        """Catch up, accept, serve until the link closes."""
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(self.link_protocol, sock)
        hello = await self._wait(self._hello)
        if hello is None:
            return
        self.index = hello["index"]
        config = NamesrvConfig()
        for key, value in hello["config"].items():
            setattr(config, setting(key).attr, value)
        image = await self._wait(self._image)
        if image is None:
            return
        replica = Replica(config)
        replica.install(image)
        for payload in self._early:
            replica.apply_batch(link.split_batch(payload)[1])
        self._early = []
        self.replica = replica
        started = perf_counter()
        await self._listen(config, hello["host"], hello["port"])
        self._send(link.framed_message(link.READY, {"position": replica.position}, b""))
        log.info(
            "worker %d (pid %d) serving from position %d (%d topics, %d brokers) after %.0f ms",
            self.index,
            os.getpid(),
            replica.position,
            len(replica.routes.topic_queue_table),
            len(replica.routes.broker_live_table),
            (perf_counter() - started) * 1000,
        )
        self._stats_task = asyncio.create_task(self._report())
        await self.link_closed.wait()
        await self.stop()

    async def _wait(self, future: asyncio.Future[Any]) -> Any:
        closed = asyncio.ensure_future(self.link_closed.wait())
        await asyncio.wait({future, closed}, return_when=asyncio.FIRST_COMPLETED)
        closed.cancel()
        return future.result() if future.done() else None

    async def _listen(self, config: NamesrvConfig, host: str, port: int) -> None:
        replica = self.replica
        assert replica is not None
        access = AccessControl.from_config(config)
        self._reader = reader = replica.reader(self.stats, access)
        replica.on_config = self._live_settings
        limits = server_limits(config)
        reads_checked = access is not None and access.read_required
        if config.route_query_fast_path and not reads_checked:
            self._fast_path = RouteQueryFastPath(
                replica.routes,
                self.stats,
                reader.cached_answers_valid,
                reader.route_template,
                max_answer_bytes=limits.write_high_water,
            )
        self.server = RemotingServer(
            self.handle,
            on_close=self._on_close,
            protected=self._protected.__contains__,
            raw_answerer=self._fast_path,
            limits=limits,
            backlog=config.server_socket_backlog,
            tls=TlsContextHolder(TlsSettings.from_properties(config.tls_properties())),
            proxy=ProxyPolicy(
                ProxyMode(config.proxy_protocol),
                parse_networks(config.proxy_protocol_trusted_addresses),
                trust_any=access is None,
            ),
        )
        await self.server.start(host, port, reuse_port=True)

    def _live_settings(self, keys: list[str]) -> None:
        if self.server is not None and self.replica is not None:
            config = self.replica.config
            self.server.limits.idle_seconds = config.server_channel_max_idle_time_seconds

    # ------------------------------------------------------------------ requests

    def handle(self, request: RemotingCommand, conn: Connection) -> Answer:
        if request.is_response:
            return None
        if request.code not in READ_CODES or (self.going_away and request.version > Version.V5_3_1):
            # Draining, a newer client's requests go to the writer too: it answers GO_AWAY
            # and applies the drain's rules (a broker's heartbeat still counts, a connection
            # sent away takes no broker with it when it closes).
            return cast(Answer, self._forward(request, conn))
        start = perf_counter()
        answer = self._reader.process(request, conn)
        self.stats.observe_request(request.code, perf_counter() - start)
        if isinstance(answer, RemotingCommand) and answer.code:
            self.stats.count_error_answer(request.code, answer.code)
        return answer

    async def _forward(self, request: RemotingCommand, conn: Connection) -> bytes | None:
        """The writer's answer, once the events it caused are applied here (see the module
        doc); None when the link is gone (the worker is stopping) or oneway."""
        channel = self._channel_ids.get(conn)
        if channel is None:
            channel = self._channel_ids[conn] = next(self._ids)
            self._channels[channel] = conn
        request_id = next(self._ids)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (conn, future)
        prepared = self._prepare(request, request_id)
        head = {
            "id": request_id,
            "channel": channel,
            "peer": conn.peer,
            "proxied_by": conn.proxied_by,
            "tls": conn.tls is not None,
            "crc": request.body_crc,  # computed as a large body arrived: not again
            "prepared": prepared is not None,  # its body is decoded here too (replication)
        }
        # The body as it was received, not copied into a re-encoded frame (workerlink).
        self._send_parts(link.request_parts(head, encode_head(request), request.body))
        if prepared is not None:
            await self._decode_beside(request_id, prepared)
        return (await future) or None  # empty: no answer (oneway, or the link is gone)

    def _prepare(self, request: RemotingCommand, request_id: int) -> PreparedBody | None:
        """A large registration's body to decode here while the writer decodes and decides it
        (``replica.PreparedBody``): a broker's first (``Replica.decodes_beside``)."""
        replica, reader = self.replica, self._reader
        if request.code != RequestCode.REGISTER_BROKER or replica is None or reader is None:
            return None
        if not large_registration(request):
            return None
        try:
            fields = reader.registration(request)
        except RequestError:
            return None  # the writer refuses it
        if not replica.decodes_beside(fields["cluster"], fields["broker_addr"]):
            return None
        prepared = replica.prepared[request_id] = PreparedBody(
            registration_body_steps(request, reader.max_inflated), fields["broker_name"]
        )
        return prepared

    async def _decode_beside(self, request_id: int, prepared: PreparedBody) -> None:
        """Decode a step a turn once the forward has left (a decode that held the loop while
        the link still had the body to write would hold the writer's decoding back), until
        done or no longer wanted (its reply came, or a batch needed it and finished it)."""
        while self.replica is not None and request_id in self.replica.prepared:
            transport = self._transport
            if transport is not None and transport.get_write_buffer_size():
                await asyncio.sleep(FORWARD_POLL_S)
                continue
            with self.replica.heap.burst(large=True):  # as the writer decodes it
                done = prepared.step()
            if done:
                return
            await asyncio.sleep(0)

    def _on_close(self, conn: Connection, reason: str) -> None:
        self._protected.discard(conn)
        channel = self._channel_ids.pop(conn, None)
        if channel is not None:
            del self._channels[channel]
            self._send(
                link.framed_message(
                    link.CHANNEL_CLOSED, {"channel": channel, "reason": reason}, b""
                )
            )

    # ------------------------------------------------------------------ figures

    def figures(self) -> dict[str, Any]:
        """What the writer's /metrics and /healthz show of this worker."""
        stats = self.stats
        server = self.server
        return {
            "position": self.replica.position if self.replica is not None else 0,
            "requests": {
                str(code): [h.count, h.sum_s, h.cumulative()] for code, h in stats.requests.items()
            },
            "route_query_hits": stats.route_query_hits,
            "route_query_misses": stats.route_query_misses,
            "errors": [[r, a, n] for (r, a), n in stats.error_answers.items()],
            "connections": len(server.connections) if server is not None else 0,
            "refused": dict(server.refused) if server is not None else {},
            "lag": [self.lag.count, self.lag.sum_s, self.lag.cumulative()],
            "rss": rss_bytes(),
            "topic_counts": stats.take_topic_counts(
                self._fast_path.take_hits() if self._fast_path else None
            ).to_record(),
        }

    async def _report(self) -> None:
        while True:
            self._send(link.framed_message(link.STATS, self.figures(), b""))
            await asyncio.sleep(STATS_PERIOD_S)

    async def stop(self) -> None:
        if self._stats_task is not None:
            self._stats_task.cancel()
        if self.server is not None:
            await self.server.stop()
            self.server = None
        self._close_link()


assert len(LATENCY_BUCKETS_S) > 0  # the lag histogram shares the request buckets


async def serve_worker(fd: int, acks_fd: int | None = None) -> None:
    """The worker process's life: its end of the writer's socketpair is ``fd``, of the one
    for acknowledgements ``acks_fd``."""
    sock = socket.socket(fileno=fd)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # the writer stops its workers (the link)
        loop.add_signal_handler(sig, lambda: None)
    worker = Worker()
    if acks_fd is not None:
        worker._acks = socket.socket(fileno=acks_fd)
        worker._acks.setblocking(False)
    await worker.run(sock)
