"""A fuzz run: batches of mutated frames over several connections, a real check after each.

Before the first batch a fake broker registers a topic nobody else uses and the route answer
for it is recorded. Each batch then spreads its frames over ``connections`` lanes, several
frames per write now and then (pipelining is where answers got lost), and sends every
``canary_every``-th frame on a fresh connection right behind a route query for that topic:
the query came first, so its answer must arrive whatever the frame does. After the batch a
route query on a fresh connection must get the recorded answer within the timeout, or the
run counts a failed check or a hang. When the fuzzer started the server, each new kind of
bad log event is traced back to one frame by replaying the batch in halves (``triage``).

A lane follows its connection with ``StreamModel``: after a frame the server will close on,
or one it waits to complete, the lane half-closes and continues on a new connection, so
frames are not silently swallowed by a dead or waiting connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codes import RequestCode, Version
from pynamesrv.simulate.fuzz.connection import FuzzConnection
from pynamesrv.simulate.fuzz.mutators import FrameForge, Mutant
from pynamesrv.simulate.fuzz.stats import Finding, FuzzStats
from pynamesrv.simulate.fuzz.target import ServerProcess
from pynamesrv.simulate.fuzz.triage import Replayer
from pynamesrv.simulate.fuzz.wire import (
    SERIALIZE_JSON,
    Fate,
    StreamModel,
    answer_opaque_code,
    dump_json,
    frame,
    reflagged,
    split,
)

CHECK_TOPIC = "FuzzCheckTopic"
CHECK_BROKER = "fuzz-check-broker"
CHECK_CLUSTER = "FuzzCheckCluster"
CHECK_BROKER_ADDR = "192.0.2.77:10911"  # TEST-NET-1: no corpus frame names it
CANARY_OPAQUE_BASE = 0x7C000000
CHECK_OPAQUE = 0x7B000000
TRAILER_OPAQUE_BASE = 0x7E000000
CLOSE_GRACE_S = 2.0  # how long a connection with a broken frame is left to the server

ProgressSink = Callable[[FuzzStats], None]


@dataclass(slots=True)
class RunOptions:
    """How a run sends and checks (the frames themselves come from the ``FrameForge``)."""

    frames: int = 100_000
    first_index: int = 0
    batch: int = 500
    connections: int = 4
    max_write: int = 8  # frames joined into one write at most
    canary_every: int = 16  # 0: no canaries
    check_timeout_s: float = 30.0
    max_rss_mib: float | None = None
    triage: bool = True
    max_triage: int = 25
    progress_interval_s: float = 5.0


def check_frame(opaque: int) -> bytes:
    """GET_ROUTEINFO_BY_TOPIC for the check topic, as a 4.9.4 Java client sends it."""
    header = {
        "code": int(RequestCode.GET_ROUTEINFO_BY_TOPIC),
        "extFields": {"topic": CHECK_TOPIC},
        "flag": 0,
        "language": "JAVA",
        "opaque": opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": int(Version.V4_9_4),
    }
    return frame(SERIALIZE_JSON, dump_json(header).encode())


class FuzzRun:
    """One run against one server; ``stats`` holds the outcome."""

    def __init__(
        self,
        forge: FrameForge,
        host: str,
        port: int,
        options: RunOptions,
        *,
        server: ServerProcess | None = None,
        on_progress: ProgressSink | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.forge = forge
        self.host = host
        self.port = port
        self.options = options
        self.server = server
        self.on_progress = on_progress
        self.stop = stop or asyncio.Event()
        self.stats = FuzzStats(frames_total=options.frames)
        self.batch = 0
        self.expected: tuple[int, bytes] | None = None
        self._triaged: set[str] = set()  # log event signatures already looked into
        self._lanes = [_Lane(self) for _ in range(options.connections)]
        self._canary_slots = asyncio.Semaphore(8)
        self._open_conns: set[FuzzConnection] = set()
        self._lingering: set[asyncio.Future[None]] = set()
        self._started = 0.0
        self._last_progress = 0.0

    # ------------------------------------------------------------------ the run

    async def run(self) -> FuzzStats:
        self._started = time.monotonic()
        broker = BrokerClient(
            namesrv_addrs=[f"{self.host}:{self.port}"],
            cluster=CHECK_CLUSTER,
            broker_name=CHECK_BROKER,
            broker_id=0,
            broker_addr=CHECK_BROKER_ADDR,
            topics={CHECK_TOPIC: TopicConfig(CHECK_TOPIC, 4, 4, 6)},
            timeout_s=self.options.check_timeout_s,
        )
        outcome = (await broker.start())[0]
        try:
            if not outcome.ok:
                raise RuntimeError(f"the check broker could not register: {outcome.error}")
            answer = await self.route_query(CHECK_OPAQUE)
            if answer is None or answer[0] != 0:
                raise RuntimeError(f"the check topic is not routed after registering: {answer}")
            self.expected = answer
            await self._batches()
        finally:
            self.stats.elapsed_s = time.monotonic() - self._started
            await broker.stop(unregister=not self.stats.hangs and not self.stats.crashed)
            for lane in self._lanes:
                lane.retire()
            await self._close_all()
        return self.stats

    async def _batches(self) -> None:
        opts = self.options
        end = opts.first_index + opts.frames
        for start in range(opts.first_index, end, opts.batch):
            if self.stop.is_set():
                break
            self.batch = (start - opts.first_index) // opts.batch
            known = set(self.server.tally.signatures) if self.server else set()
            indices = range(start, min(start + opts.batch, end))
            await self._send_batch(indices)
            self.stats.batches += 1
            healthy = await self._check_after_batch(indices)
            if self.server is not None and healthy:
                await self.server.settle()
                await self._look_into_new_events(known, indices)
            self._progress()
            if not healthy:
                break
        self._progress(force=True)

    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        self.stats.elapsed_s = now - self._started
        if self.server is not None:
            self.stats.peak_rss_kib = self.server.poll_memory()
            self.stats.server_bad_log_events = self.server.tally.bad_events
        if self.on_progress and (
            force or now - self._last_progress >= self.options.progress_interval_s
        ):
            self._last_progress = now
            self.on_progress(self.stats)

    # ------------------------------------------------------------------ sending

    async def _send_batch(self, indices: range) -> None:
        opts = self.options
        lanes: list[list[Mutant]] = [[] for _ in self._lanes]
        canaries: list[Mutant] = []
        probes: list[Mutant] = []
        for n, index in enumerate(indices):
            mutant = self.forge.mutant(index)
            self.stats.by_mutator[mutant.mutator] += 1
            self.stats.frames += 1
            self.stats.bytes_sent += len(mutant.data)
            if mutant.silent_opaque is not None:
                probes.append(mutant)
            elif opts.canary_every and index % opts.canary_every == 0:
                canaries.append(mutant)
            else:
                lanes[n % len(lanes)].append(mutant)
        rng = random.Random(self.forge.seed * 7919 + indices.start)
        lane_parts = zip(self._lanes, lanes, strict=True)
        results = await asyncio.gather(
            *(lane.send(part, random.Random(rng.random())) for lane, part in lane_parts),
            *(self._canary(m) for m in canaries),
            *(self._silence_probe(m) for m in probes),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, (OSError, TimeoutError)):
                self.stats.connect_failures += 1  # the batch check tells whether it matters
            elif isinstance(result, BaseException):
                raise result

    async def open(self, *, counted: bool = True) -> FuzzConnection:
        loop = asyncio.get_running_loop()
        silent = self._silent_answered if counted else None
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: FuzzConnection(silent), self.host, self.port),
            self.options.check_timeout_s,
        )
        self._open_conns.add(conn)
        conn.lost.add_done_callback(lambda _: self._closed(conn, counted))
        if counted:
            self.stats.connections += 1
        return conn

    def _closed(self, conn: FuzzConnection, counted: bool) -> None:
        self._open_conns.discard(conn)
        if counted:
            self.stats.answers += conn.reader.frames
            self.stats.unreadable_answers += conn.reader.unreadable
            if conn.reader.unreadable:  # a client could not read these answers either
                detail = f"{conn.reader.unreadable} answer(s) whose header does not parse"
                self.stats.add(Finding.of("unreadable_answer", detail, None, self.batch))
            self.stats.closed_by_server += conn.closed_by_server

    def linger(self, conn: FuzzConnection | None) -> None:
        """Leave a connection the server should close (a broken frame) to the server, for
        a grace period; then half-close it (a server may answer an error and stay open)."""
        if conn is None:
            return

        async def wait_close() -> None:
            try:
                await asyncio.wait_for(asyncio.shield(conn.lost), CLOSE_GRACE_S)
            except TimeoutError:
                conn.finish()

        task = asyncio.ensure_future(wait_close())
        self._lingering.add(task)
        task.add_done_callback(self._lingering.discard)

    def _silent_answered(self, mutant: Mutant, code: int) -> None:
        kind = "oneway" if mutant.mutator == "oneway" else "response-flagged"
        detail = f"a {kind} request was answered (code {code})"
        self.stats.add(Finding.of("silent_answered", detail, mutant, self.batch))

    async def _canary(self, mutant: Mutant) -> None:
        """A route query and the fuzzed frame in one write on a fresh connection."""
        async with self._canary_slots:
            opaque = CANARY_OPAQUE_BASE + mutant.index % (1 << 24)
            conn = await self.open()
            answer = conn.expect(opaque)
            if mutant.silent_opaque is not None:
                conn.silent[mutant.silent_opaque] = mutant
            conn.write(check_frame(opaque) + mutant.data)
            conn.finish()
            self.stats.canaries += 1
            try:
                raw = await asyncio.wait_for(answer, self.options.check_timeout_s)
            except TimeoutError:
                # a client waited longer than the check timeout: the server stalled (the
                # batch check decides whether it hangs)
                detail = (
                    f"no answer to a route query within {self.options.check_timeout_s}s "
                    "(nor a close)"
                )
                self.stats.add(Finding.of("stall", detail, mutant, self.batch))
                conn.abort()
                return
            if raw is None:
                detail = "the answer to a route query sent before this frame was lost"
                self.stats.add(Finding.of("lost_answer", detail, mutant, self.batch))
            elif self._is_expected(raw):
                self.stats.canaries_ok += 1
            else:
                detail = f"wrong route answer before this frame: {raw[:300]!r}"
                self.stats.add(Finding.of("check_failed", detail, mutant, self.batch))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(conn.lost), self.options.check_timeout_s)

    async def _silence_probe(self, mutant: Mutant) -> None:
        """A frame that must get no answer, then the same request made normal, in one write
        on a fresh connection. Answers come in request order (a write's answer waits for
        its own disk write, behind the earlier one's), so once the second request is
        answered, an answer to the first would have arrived: none may have."""
        async with self._canary_slots:
            assert mutant.silent_opaque is not None
            opaque = TRAILER_OPAQUE_BASE + mutant.index % (1 << 24)
            conn = await self.open()
            conn.silent[mutant.silent_opaque] = mutant
            answer = conn.expect(opaque)
            conn.write(mutant.data + reflagged(mutant.data, flag=0, opaque=opaque))
            self.stats.silence_probes += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(answer, self.options.check_timeout_s)
            conn.finish()
            try:
                await asyncio.wait_for(asyncio.shield(conn.lost), self.options.check_timeout_s)
            except TimeoutError:
                conn.abort()

    # ------------------------------------------------------------------ checking

    async def route_query(self, opaque: int) -> tuple[int, bytes] | None:
        """(code, body) of a route query on a fresh connection; None if it closed first;
        TimeoutError if no answer within the check timeout."""
        conn = await self.open(counted=False)
        try:
            answer = conn.expect(opaque)
            conn.write(check_frame(opaque))
            raw = await asyncio.wait_for(answer, self.options.check_timeout_s)
        finally:
            conn.abort()
        if raw is None:
            return None
        parsed = answer_opaque_code(raw)
        return (-1, raw) if parsed is None else (parsed[1], split(raw).body)

    def _is_expected(self, raw: bytes) -> bool:
        parsed = answer_opaque_code(raw)
        return parsed is not None and (parsed[1], split(raw).body) == self.expected

    async def _check_after_batch(self, indices: range) -> bool:
        """The route check; False when the run cannot go on (crash or hang)."""
        where = f"after frames {indices.start}..{indices.stop - 1}"
        started = time.monotonic()
        self.stats.checks += 1
        try:
            answer = await self.route_query(CHECK_OPAQUE)
        except (TimeoutError, OSError) as exc:
            answer = None
            if self._crashed(where):
                return False
            if isinstance(exc, TimeoutError):
                self.stats.hangs += 1
                detail = f"no route answer within {self.options.check_timeout_s}s {where}"
                self.stats.add(Finding.of("hang", detail, None, self.batch))
                return False
        self.stats.check_max_s = max(self.stats.check_max_s, time.monotonic() - started)
        if answer == self.expected:
            self.stats.checks_ok += 1
        else:
            detail = f"route answer {where}: {answer!r:.300} instead of the recorded one"
            self.stats.add(Finding.of("check_failed", detail, None, self.batch))
        if self.server is not None:
            peak = self.server.poll_memory()
            bound = self.options.max_rss_mib
            if bound is not None and peak > bound * 1024 and not self.stats.finding_counts["rss"]:
                detail = (
                    f"server peak RSS {peak / 1024:.0f} MiB over the bound {bound:g} MiB {where}"
                )
                self.stats.add(Finding.of("rss", detail, None, self.batch))
        return not self._crashed(where)

    def _crashed(self, where: str) -> bool:
        if self.server is None or not self.server.exited:
            return False
        if not self.stats.crashed:
            self.stats.crashed = True
            detail = f"the server exited with status {self.server.returncode} {where}"
            self.stats.add(Finding.of("crash", detail, None, self.batch))
        return True

    # ------------------------------------------------------------------ log events

    async def _look_into_new_events(self, known: set[str], indices: range) -> None:
        """Record each new kind of bad log event of this batch, traced to one frame."""
        assert self.server is not None
        tally = self.server.tally
        new = [s for s in tally.signatures if s not in known and s not in self._triaged]
        for signature in new:
            self._triaged.add(signature)
            kind = "log" if signature in tally.serious else "log_warning"
            culprit = None
            if self.options.triage and len(self._triaged) <= self.options.max_triage:
                start = max(self.options.first_index, indices.start - self.options.batch)
                replayer = Replayer(self, self.server)
                culprit = await replayer.find_culprit(list(range(start, indices.stop)), signature)
            detail = signature if culprit else f"{signature} (no single frame reproduces it)"
            self.stats.add(Finding.of(kind, detail, culprit, self.batch))

    async def _close_all(self) -> None:
        if self._lingering:
            await asyncio.wait(list(self._lingering), timeout=CLOSE_GRACE_S * 2)
        conns = list(self._open_conns)
        for conn in conns:
            conn.finish()
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.lost) for c in conns], timeout=5)
        for conn in list(self._open_conns):
            conn.abort()


class _Lane:
    """A sequence of connections carrying its share of each batch, one after another."""

    def __init__(self, run: FuzzRun) -> None:
        self.run = run
        self.conn: FuzzConnection | None = None
        self.model: StreamModel | None = None

    async def send(self, mutants: list[Mutant], rng: random.Random) -> None:
        group: list[Mutant] = []
        size = rng.randint(1, self.run.options.max_write)
        for mutant in mutants:
            if self.conn is None or not self.conn.usable:
                await self._flush(group)  # to a new connection, if it was the server's
                group = []
                if self.conn is None or not self.conn.usable:
                    await self._reconnect()
            assert self.model is not None
            fate = self.model.feed(mutant.data)
            group.append(mutant)
            if fate is not Fate.OPEN or len(group) >= size:
                await self._flush(group)
                group = []
                size = rng.randint(1, self.run.options.max_write)
            if fate is Fate.CLOSING:
                self.run.linger(self.conn)
                self.conn = self.model = None
            elif fate is Fate.WAITING:
                self.retire()
        await self._flush(group)

    async def _reconnect(self) -> None:
        self.retire()
        self.conn = await self.run.open()
        self.model = StreamModel(self.run.forge.context.limits.max_frame_length)

    async def _flush(self, group: list[Mutant]) -> None:
        if not group:
            return
        if self.conn is None or not self.conn.usable:  # the server closed it meanwhile
            await self._reconnect()
            assert self.model is not None
            for mutant in group:
                self.model.feed(mutant.data)
        conn = self.conn
        assert conn is not None
        for mutant in group:
            if mutant.silent_opaque is not None:
                conn.silent[mutant.silent_opaque] = mutant
        conn.write(b"".join(m.data for m in group))
        self.run.stats.writes += 1
        if not conn.writable.is_set():
            try:
                await asyncio.wait_for(conn.writable.wait(), self.run.options.check_timeout_s)
            except TimeoutError:
                conn.abort()  # the server stopped reading: the batch check will tell why

    def retire(self) -> None:
        if self.conn is not None:
            self.conn.finish()
        self.conn = None
        self.model = None
