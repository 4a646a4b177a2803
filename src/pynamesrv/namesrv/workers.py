"""The writer's side of ``serve --workers N``: starts N-1 worker processes, feeds each the
stream, decides the writes they forward, restarts one that dies (docs/operations.md,
"Workers").

The writer is the one process that decides (registry, expiry, journal, KV and config files,
the state lock, HTTP); it also accepts on the remoting port. Each worker gets its settings,
an image and then every batch of the ``replication.Publisher`` over its own socketpair. A
request a worker forwards is handled as if it had come on the writer's own port, on a
``RemoteChannel`` that stands for the worker's connection (its peer, PROXY source and TLS
as the worker saw them); its reply is queued behind the batches of what it changed.

A batch is sent at once, not at the end of the loop's turn (where the transport would
flush it after answering every request that turn read). A worker pinned to the writer's
one CPU is then handed the core: the writer waits (at most ``HAND_OVER_MAX_S``) for its
acknowledgement, and the kernel runs the worker meanwhile, so it applies the batch now
rather than when the scheduler ends the writer's time slice, milliseconds later (a
``sched_yield`` is no promise: under the query load on one core only a third of batches
were applied within 1 ms). Elsewhere the writer yields its core once a turn.

A worker that does not read (stuck, or slower than the stream) cannot hold the writer: its
link's buffer is bounded (``serverWorkerMaxBacklogBytes``); past it, batches for it stop, one line
says so, ``rebuilds`` counts it, and once it has read its backlog it gets a fresh image
(replies held meanwhile follow the image). A worker whose link closes (killed, crashed) has
its connections closed as the writer's own would be: brokers registered on them leave as on
a channel close, as Java removes a broker whose connection closed; they register again on
their next heartbeat. It is then started again, from an image.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from pynamesrv.namesrv import workerlink as link
from pynamesrv.namesrv.replication import FORWARDED, Publisher, config_values
from pynamesrv.namesrv.stats import RouteQueryCounts
from pynamesrv.remoting.codec import decode_frame_payload, encode
from pynamesrv.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from pynamesrv.namesrv.controller import NamesrvController

log = logging.getLogger("pynamesrv")

STOP_GUARD_S: Final = 30.0
MAX_RESTART_DELAY_S: Final = 30.0
WORKER_MODULE: Final = "pynamesrv.cli.worker"
LOST: Final = "channel_closed"  # why a dead worker's connections left
# The longest a writer waits for a worker on its core to apply a batch (``hand_over``): a
# heartbeat's batch takes microseconds; a large registration's is not waited for whole.
HAND_OVER_MAX_S: Final = 0.002
ACKS_READ: Final = 8 * 4096  # whole acknowledgements (``link.ack``: 8 bytes each)


def worker_count(text: str) -> int:
    """``serverWorkers``: a number, or ``auto`` (the CPUs this process may run on)."""
    if text.strip().lower() == "auto":
        try:
            return max(len(os.sched_getaffinity(0)), 1)
        except AttributeError:  # not Linux
            return os.cpu_count() or 1
    return int(text)


class RemoteChannel:
    """A worker's connection, as the writer's registry and processor see it: the identity
    (``peer`` after PROXY, ``proxied_by``, ``tls``) and whether it is open. Closing it asks
    the worker to close the connection (expiry of the last broker on it)."""

    __slots__ = ("channel_id", "is_open", "peer", "proxied_by", "tls", "worker")

    def __init__(self, worker: WorkerLink, channel_id: int, head: dict[str, Any]) -> None:
        self.worker = worker
        self.channel_id = channel_id
        self.peer: str = head.get("peer") or "?"
        self.proxied_by: str | None = head.get("proxied_by")
        self.tls: bool = bool(head.get("tls"))
        self.is_open = True

    def __repr__(self) -> str:
        return f"<Connection {self.peer} on worker {self.worker.index}>"

    def close(self) -> None:
        if self.is_open:
            self.worker.send(
                link.framed_message(link.CLOSE_CHANNEL, {"channel": self.channel_id}, b"")
            )


@dataclass
class WorkerFigures:
    """What a worker last reported (``Worker.figures``), and the writer's own counts."""

    pid: int = 0
    ready: bool = False
    position: int = 0
    starts: int = 0
    rebuilds: int = 0
    failed_starts: int = 0  # in a row, each ended before it served (restart backoff)
    reported: dict[str, Any] = field(default_factory=dict)


class WorkerLink(asyncio.Protocol):
    """The writer's end of one worker's socketpair."""

    def __init__(self, pool: WorkerPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.figures = WorkerFigures()
        self.process: asyncio.subprocess.Process | None = None
        self.transport: asyncio.Transport | None = None
        self.socket: socket.socket | None = None  # the transport's, for ``send_now``
        self.channels: dict[int, RemoteChannel] = {}
        self.ready = asyncio.Event()
        self.closed = asyncio.Event()
        self._decoder = link.LinkDecoder()
        self._behind = False  # batches stopped: rebuilt from an image once it has read
        self._imaging = False
        self._held: list[bytes] = []  # replies waiting for that image
        # The worker's acknowledgements of applied batches (their positions), and whether it
        # runs on the writer's one core (``hand_over``).
        self.acks: socket.socket | None = None
        self.shares_core = False
        self._acked = 0
        # A forwarded request whose body is the next message: its head and frame.
        self.awaiting_body: tuple[dict[str, Any], memoryview] | None = None

    # ------------------------------------------------------------------ asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        high = self.pool.controller.config.server_worker_max_backlog_bytes
        self.transport.set_write_buffer_limits(high=high, low=high // 4)

    def data_received(self, data: bytes) -> None:
        try:
            messages = self._decoder.feed(data)
        except link.LinkError as exc:
            log.error("worker %d: the link broke: %s", self.index, exc)
            self.close()
            return
        for kind, payload in messages:
            self.pool.on_message(self, kind, payload)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.publisher.unsubscribe(self.on_batch)
        if self.acks is not None:
            self.acks.close()
            self.acks = None
        self.closed.set()

    def pause_writing(self) -> None:
        """The worker left serverWorkerMaxBacklogBytes unread: stop its batches (module doc)."""
        if self._imaging or self._behind:
            return
        self._behind = True
        self.figures.rebuilds += 1
        self.pool.publisher.unsubscribe(self.on_batch)
        log.warning(
            "worker %d left %d MiB of the writer's stream unread (serverWorkerMaxBacklogBytes): "
            "its stream stops, and it is rebuilt from an image once it has read what it was "
            "sent",
            self.index,
            self.pool.controller.config.server_worker_max_backlog_bytes >> 20,
        )

    def resume_writing(self) -> None:
        if self._behind and not self.closed.is_set():
            self._behind = False
            self.start_stream()
            held, self._held = self._held, []
            for reply in held:
                self.send(reply)

    # ------------------------------------------------------------------ sending

    def send(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send_parts(self, parts: list[bytes]) -> None:
        """A message as its parts (``link.parts_message``): a batch or an image is not
        copied into it."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(parts)

    def reply(self, data: bytes) -> None:
        """A forwarded request's answer: behind the batches of what it changed."""
        if self._behind:
            self._held.append(data)
        else:
            self.send(data)

    def send_now(self, parts: list[bytes]) -> None:
        """``send_parts``, but written to the socket now when nothing waits before it (the
        transport writes at the end of the loop's turn), what the socket does not take left
        to the transport, in order."""
        transport, sock = self.transport, self.socket
        if transport is None or sock is None or transport.is_closing():
            return
        if transport.get_write_buffer_size():
            transport.writelines(parts)
            return
        try:
            sent = sock.sendmsg(parts)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:  # the transport sees it too, and closes the link
            sent = 0
        if sent < sum(map(len, parts)):
            transport.write(memoryview(b"".join(parts))[sent:])

    def hand_over(self, position: int) -> None:
        """Wait (the writer's loop blocked, at most ``HAND_OVER_MAX_S``) until the worker has
        applied the batch at ``position``: with both on one core, the kernel then runs the
        worker, which applies the batch within its turn; a yield only lets it run when the
        scheduler deems it due, up to a time slice later (the apply lag's p99 on one core)."""
        deadline = time.monotonic() + HAND_OVER_MAX_S
        while self._read_acks() < position and self.acks is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.acks], [], [], left)[0]:
                return

    def _read_acks(self) -> int:
        """The highest position the worker acknowledged, after reading what is there."""
        while self.acks is not None:
            try:
                data = self.acks.recv(ACKS_READ)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:  # the worker is gone: its link closes too
                self.acks.close()
                self.acks = None
                break
            self._acked = max(self._acked, *link.ack_positions(data))
        return self._acked

    @property
    def applies_now(self) -> bool:
        """Whether the worker applies each batch as it comes (and says so): serving, its
        stream not stopped for falling behind."""
        return self.acks is not None and self.figures.ready and not self._behind

    def check_core(self) -> None:
        """Whether the worker runs on the writer's one CPU (both pinned to it: taskset,
        cpusets); read again with every report, as affinity can change."""
        self._read_acks()  # those it sent while nobody waited (one a batch)
        pid = self.figures.pid
        try:
            mine = os.sched_getaffinity(0)
            self.shares_core = len(mine) == 1 and os.sched_getaffinity(pid) == mine
        except (AttributeError, OSError):  # not Linux, or the worker is gone
            self.shares_core = False

    def on_batch(self, position: int, batch: bytes) -> None:
        self.send_now(link.batch_message(time.monotonic_ns(), batch))

    def start_stream(self) -> None:
        """An image of now, then every batch after it (in one turn of the loop: none lost)."""
        self._imaging = True
        try:
            self.send_parts(link.parts_message(link.IMAGE, (self.pool.publisher.image(),)))
        finally:
            self._imaging = False
        self.pool.publisher.subscribe(self.on_batch)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class WorkerPool:
    """N-1 worker processes beside the writer (``serverWorkers`` = N)."""

    def __init__(self, controller: NamesrvController, count: int) -> None:
        self.controller = controller
        self.count = count
        self.publisher = Publisher(controller.routes, controller.kv, controller.registry)
        self.publisher.started_ms = controller.processor.started_ms
        self.publisher.after_publish = self.yield_core
        self.links: list[WorkerLink] = []
        self.stopping = False
        self.going_away = False
        self._yielded = False  # this turn of the loop (``yield_core``)
        self._tasks: set[asyncio.Task[Any]] = set()
        controller.add_listener(self.publisher.on_events)

    def yield_core(self) -> None:
        """Let a worker waiting for this core run now that every worker has the batch (see
        the module doc): a worker that shares the writer's one core gets it handed over
        until it has applied the batch (``hand_over``); otherwise the writer yields its core,
        once a turn of the loop (with no other task waiting on the core the call returns at
        once)."""
        sharing = [w for w in self.links if w.shares_core and w.applies_now]
        if sharing:
            for worker in sharing:
                worker.hand_over(self.publisher.position)
            return
        if self._yielded:
            return
        self._yielded = True
        asyncio.get_running_loop().call_soon(self._next_turn)
        if hasattr(os, "sched_yield"):
            os.sched_yield()

    def _next_turn(self) -> None:
        self._yielded = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start every worker; each accepts once it has caught up (``all_ready``, /healthz,
        one log line each), while the writer already serves."""
        self.links = [WorkerLink(self, index) for index in range(1, self.count)]
        for worker in self.links:
            await self._spawn(worker)
        log.info(
            "starting %d worker processes to accept on port %d beside the writer (pids %s)",
            len(self.links),
            self.controller.port,
            ", ".join(str(w.figures.pid) for w in self.links),
        )

    @property
    def all_ready(self) -> bool:
        return all(w.figures.ready and not w.closed.is_set() for w in self.links)

    async def _spawn(self, worker: WorkerLink) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        acks, their_acks = socket.socketpair()
        config = self.controller.config
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                WORKER_MODULE,
                str(theirs.fileno()),
                config.log_level,
                config.log_format,
                str(their_acks.fileno()),
                pass_fds=(theirs.fileno(), their_acks.fileno()),
            )
        finally:
            theirs.close()
            their_acks.close()
        acks.setblocking(False)
        worker.acks = acks
        worker.process = process
        worker.figures.pid = process.pid
        worker.figures.starts += 1
        worker.figures.ready = False
        ours.setblocking(False)  # ``send_now`` writes to it beside the loop
        worker.socket = ours
        await loop.connect_accepted_socket(lambda: worker, ours)
        hello = {
            "index": worker.index,
            "host": self.controller.host,
            "port": self.controller.port,
            "config": config_values(self.controller.registry),
        }
        worker.send(link.framed_message(link.HELLO, hello, b""))
        worker.start_stream()
        if self.going_away:
            worker.send(link.message(link.GO_AWAY, b""))
        self._keep(asyncio.ensure_future(self._watch(worker)))

    async def _watch(self, worker: WorkerLink) -> None:
        """Until the worker's link closes: then its connections are gone, and (unless the
        server stops) it is started again."""
        await worker.closed.wait()
        process = worker.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        if process is not None:
            await process.wait()
        if self.stopping:
            return
        channels, worker.channels = worker.channels, {}
        for channel in channels.values():
            channel.is_open = False
            self.controller.on_connection_closed(channel, LOST)
        log.warning(
            "worker %d (pid %d) ended (exit %s) with %d connections that forwarded requests; "
            "starting it again",
            worker.index,
            worker.figures.pid,
            process.returncode if process is not None else "?",
            len(channels),
        )
        if not worker.figures.ready:  # it died before it served: do not spin on a crash
            worker.figures.failed_starts += 1
            await asyncio.sleep(min(2.0**worker.figures.failed_starts, MAX_RESTART_DELAY_S))
            if self.stopping:
                return
        else:
            worker.figures.failed_starts = 0
        fresh = WorkerLink(self, worker.index)
        fresh.figures = worker.figures
        self.links[self.links.index(worker)] = fresh
        await self._spawn(fresh)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def go_away(self) -> None:
        """A graceful shutdown began: every worker answers GO_AWAY as the writer does."""
        self.going_away = True
        for worker in self.links:
            worker.send(link.message(link.GO_AWAY, b""))

    async def stop(self) -> None:
        """Close every link (a worker stops when its link closes) and wait for the exits."""
        self.stopping = True
        for worker in self.links:
            worker.close()
        for worker in self.links:
            process = worker.process
            if process is None:
                continue
            try:
                await asyncio.wait_for(process.wait(), STOP_GUARD_S)
            except TimeoutError:
                log.warning("worker %d did not stop: killed", worker.index)
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGKILL)
                await process.wait()
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------------ messages

    def on_message(self, worker: WorkerLink, kind: int, payload: bytes) -> None:
        if kind == link.REQUEST:
            head, frame = link.split_framed_view(payload)
            if head.get("body"):  # its body is the next message (``link.request_parts``)
                worker.awaiting_body = (head, frame)
            else:
                self._on_request(worker, head, frame, None)
        elif kind == link.BODY and worker.awaiting_body is not None:
            head, frame = worker.awaiting_body
            worker.awaiting_body = None
            self._on_request(worker, head, frame, payload)
        elif kind == link.CHANNEL_CLOSED:
            head, _ = link.split_framed(payload)
            channel = worker.channels.pop(head["channel"], None)
            if channel is not None and not self.stopping:
                channel.is_open = False
                self.controller.on_connection_closed(channel, head["reason"])
        elif kind == link.STATS:
            worker.check_core()
            reported, _ = link.split_framed(payload)
            worker.figures.reported = reported
            worker.figures.position = reported["position"]
            counts = reported.get("topic_counts")
            if counts:
                self.controller.stats.add_topic_counts(RouteQueryCounts(**counts))
        elif kind == link.READY:
            head, _ = link.split_framed(payload)
            worker.figures.position = head["position"]
            worker.check_core()
            worker.figures.ready = True
            worker.ready.set()

    def _on_request(
        self, worker: WorkerLink, head: dict[str, Any], frame: memoryview, body: bytes | None
    ) -> None:
        channel_id = head["channel"]
        channel = worker.channels.get(channel_id)
        if channel is None:
            channel = worker.channels[channel_id] = RemoteChannel(worker, channel_id, head)
        try:
            request = decode_frame_payload(frame[4:])
        except Exception as exc:  # the worker decoded it: a broken link, not a peer
            log.error("worker %d forwarded an undecodable frame: %s", worker.index, exc)
            worker.close()
            return
        if body is not None:
            request.body = body
        request.body_crc = head.get("crc")  # the worker's, computed as the body arrived
        # The worker decodes the body too: its batch may name it (``replication.FORWARDED``;
        # a stepwise registration's task keeps this context).
        token = FORWARDED.set((worker.on_batch, head["id"])) if head.get("prepared") else None
        try:
            answer = self.controller.server.handler(request, channel)  # type: ignore[arg-type]
            if answer is not None and not isinstance(answer, (bytes, RemotingCommand)):
                self._keep(
                    asyncio.ensure_future(
                        self._reply_later(worker, head["id"], request, answer, channel)
                    )
                )
                return
        finally:
            if token is not None:
                FORWARDED.reset(token)
        self._reply(worker, head["id"], request, answer, channel)

    async def _reply_later(
        self,
        worker: WorkerLink,
        request_id: int,
        request: RemotingCommand,
        pending: Awaitable[RemotingCommand | bytes | None],
        channel: RemoteChannel,
    ) -> None:
        answer = await pending
        self._reply(worker, request_id, request, answer, channel)

    def _reply(
        self,
        worker: WorkerLink,
        request_id: int,
        request: RemotingCommand,
        answer: RemotingCommand | bytes | None,
        channel: RemoteChannel,
    ) -> None:
        self.publisher.settle()  # a config write that changed no value changed the listing
        if answer is None or request.is_oneway:
            frame = b""
        else:
            frame = answer if isinstance(answer, bytes) else encode(answer)
        head = {
            "id": request_id,
            "position": self.publisher.position,
            # a broker's latest registration came over it: the worker sheds it last
            "protected": self.controller.routes.serves_brokers(channel),
        }
        worker.reply(link.framed_message(link.REPLY, head, frame))

    # ------------------------------------------------------------------ observability

    def status(self) -> list[dict[str, Any]]:
        """Each worker: pid, whether it serves, how far behind the writer, its figures."""
        out = []
        for worker in self.links:
            figures = worker.figures
            reported = figures.reported
            out.append(
                {
                    "worker": worker.index,
                    "pid": figures.pid,
                    "ready": figures.ready and not worker.closed.is_set(),
                    "position": figures.position,
                    "behind": max(self.publisher.position - figures.position, 0),
                    "starts": figures.starts,
                    "rebuilds": figures.rebuilds,
                    "shares_core": worker.shares_core,  # the writer hands it its core
                    "connections": reported.get("connections", 0),
                    "rss_bytes": reported.get("rss", 0),
                    "backlog_bytes": (
                        worker.transport.get_write_buffer_size() if worker.transport else 0
                    ),
                }
            )
        return out
