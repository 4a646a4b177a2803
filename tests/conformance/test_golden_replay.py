"""Replay every golden 4.9.4 scenario byte for byte against a fresh in-process name server.

(The 5.2.0 corpus is replayed by test_golden5_replay.py with this module's Replayer.)

Each scenario gets its own server (the recordings each started from an empty Java
NameServer), its own temp kvConfigPath/configStorePath and its own working directory, so a
server that obeys a relative path from the wire writes into the temp dir, not the checkout.
All differences of a scenario are collected and reported together, each naming the
scenario, the frame seq and the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting import fastjson

from .deviations import (
    PROBES,
    REQUEST_CODE_NOT_SUPPORTED,
    UNSUPPORTED_REMARK,
    Deviation,
    Probe,
    ReplayPaths,
    deviations_for,
)
from .golden import (
    FLAG_RESPONSE,
    SCENARIOS,
    SERIALIZE_JSON,
    Event,
    Frame,
    Problem,
    Scenario,
    WireFrame,
    build_answer,
    build_frame,
    compare_answer,
    diff_data,
    json_header_bytes,
    load_scenario,
    quote_bare_keys,
)

ANSWER_TIMEOUT = 3.0  # an answer that exists comes within milliseconds
SILENT_WINDOW = 0.3  # how long "no answer" is watched for, batched per connection
CLOSE_TIMEOUT = 2.0  # server closes after a broken frame / after our EOF
SETTLE = 0.1  # after a oneway request, before another connection acts on its effect
SERVER_VERSION = 401  # what the recorded Java server stamps on every answer
MAX_FRAME = 16 * 1024 * 1024


@dataclass
class Received:
    """One frame our server sent; ``used`` once it was paired with an expectation."""

    wire: WireFrame
    opaque: int | None
    used: bool = False


@dataclass
class ServerConn:
    """Our side of one recorded connection, with a reader collecting every answer."""

    conn: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    received: list[Received] = field(default_factory=list)
    eof: bool = False
    read_error: str | None = None
    silent_since: float | None = None  # when we last sent a frame that must stay unanswered
    silent_seqs: list[int] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def read_loop(self) -> None:
        try:
            while True:
                head = await self.reader.readexactly(4)
                (length,) = struct.unpack(">i", head)
                if length < 4 or length > MAX_FRAME:
                    self.read_error = f"server sent a frame with length word {length}"
                    return
                rest = await self.reader.readexactly(length)
                try:
                    wire = WireFrame.parse(head + rest)
                    opaque = wire.header().get("opaque", 0)
                except (ValueError, struct.error) as exc:
                    self.read_error = f"server sent an undecodable frame: {exc}"
                    wire, opaque = WireFrame(head + rest, -1, b"", b""), None
                self.received.append(Received(wire, opaque))
                self.changed.set()
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                self.read_error = f"server closed in the middle of a frame ({exc.partial!r})"
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            self.eof = True
            self.changed.set()

    async def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``predicate()`` holds or the timeout passes (woken by the reader)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return True

    def candidates(self, opaque: int) -> list[Received]:
        return [r for r in self.received if not r.used and r.opaque == opaque]


class ScriptedClock:
    """The server's clock in a timed replay: each frame is sent at its recorded moment."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Timing:
    """A timed replay: the server reads ``clock``, which the replayer sets to ``base_ms`` plus
    each frame's recorded time; nothing expires brokers but the replayer's scans (see
    ``Replayer.advance``)."""

    clock: ScriptedClock
    base_ms: int
    ctrl: NamesrvController


# Java scans for expired brokers every 5 s (scanNotActiveBrokerInterval); a broker it still
# listed is at most this far past its deadline.
JAVA_SCAN_MS = 5000


@dataclass
class Expectation:
    """An answer we must receive: the recorded one, or the one a deviation prescribes."""

    request: Frame
    answer: WireFrame
    label: str  # "recorded seq N" or "deviation"
    config_exact: dict[str, str] | None = None


class Replayer:
    """Walks one scenario's merged timeline against a running server."""

    def __init__(
        self, scenario: Scenario, port: int, paths: ReplayPaths, timing: Timing | None = None
    ) -> None:
        self.sc = scenario
        self.port = port
        self.paths = paths
        self.timing = timing
        self.deviations = deviations_for(scenario.name)
        self.conns: dict[int, ServerConn] = {}
        self.problems: list[str] = []
        self.handled_close: set[int] = set()
        self.pending: dict[int, Expectation] = {}  # s2c seq -> expectation
        self.used_deviations: set[int] = set()
        self.checked = 0  # answers compared (guards against a replay that checks nothing)
        self.silent = 0  # frames that had to stay unanswered

    # ------------------------------------------------------------------ reporting

    def report(self, frame: Frame | None, conn: int, text: str) -> None:
        if frame is None:
            self.problems.append(f"{self.sc.name} conn {conn}: {text}")
            return
        req = frame
        if frame.dir == "s2c":
            req = self.sc.request_of.get(frame.seq, frame)
        code = req.code if req.header is not None else None
        step = (frame.step or "")[:70]
        self.problems.append(
            f"{self.sc.name} seq {frame.seq} (conn {conn}, request seq {req.seq} code {code}, "
            f"opaque {req.opaque}) [{step}]: {text}"
        )

    # ------------------------------------------------------------------ connections

    async def open(self, conn: int) -> ServerConn:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        sc = ServerConn(conn, reader, writer)
        sc.task = asyncio.create_task(sc.read_loop())
        self.conns[conn] = sc
        return sc

    async def close_all(self) -> None:
        for sc in self.conns.values():
            if not sc.writer.is_closing():
                sc.writer.close()
            if sc.task is not None:
                sc.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sc.task
            with contextlib.suppress(Exception):
                await sc.writer.wait_closed()

    async def settle_silence(self, sc: ServerConn) -> None:
        """Let the silent window of the last unanswered frame on ``sc`` run out."""
        if sc.silent_since is not None:
            remaining = sc.silent_since + SILENT_WINDOW - time.monotonic()
            if remaining > 0:
                await asyncio.sleep(remaining)

    # ------------------------------------------------------------------ expectations

    def expectation_for(self, request: Frame) -> Expectation | None:
        """What answer ``request`` must get, or None if it must get none."""
        dev = self.deviations.get(request.seq)
        recorded = self.sc.answer_of.get(request.seq)
        if dev is not None:
            self.used_deviations.add(request.seq)
        if dev is not None and dev.unsupported_code:
            return Expectation(request, self.unsupported_answer(request), "deviation")
        if recorded is None:
            return None
        answer = recorded.wire()
        if dev is not None and dev.answer_like is not None:
            answer = self.answer_like(self.sc.by_seq[dev.answer_like].wire(), request)
        if dev is not None and (dev.quote_keys or dev.body_overrides):
            answer = self.body_changed(answer, dev)
        if dev is not None and dev.header_overrides:
            answer = self.overridden(answer, dev)
        exact = None
        if dev is not None and dev.config_exact:
            exact = {
                k: v.format(
                    kv_config_path=self.paths.kv_config_path,
                    config_store_path=self.paths.config_store_path,
                )
                for k, v in dev.config_exact.items()
            }
        label = f"recorded seq {recorded.seq}" + (" + deviation" if dev else "")
        return Expectation(request, answer, label, exact)

    @staticmethod
    def unsupported_answer(request: Frame) -> WireFrame:
        assert request.header is not None
        code = request.code or 0
        header = {
            "code": REQUEST_CODE_NOT_SUPPORTED,
            "flag": FLAG_RESPONSE,
            "language": "JAVA",
            "opaque": request.opaque or 0,
            "remark": UNSUPPORTED_REMARK.format(code=code),
            "version": SERVER_VERSION,
        }
        serialize = request.wire().serialize
        if serialize == SERIALIZE_JSON:
            header["serializeTypeCurrentRPC"] = "JSON"
        return build_answer(serialize, header)

    @staticmethod
    def answer_like(other: WireFrame, request: Frame) -> WireFrame:
        """Another request's recorded answer, as an answer to ``request`` (its opaque)."""
        header = dict(other.header())
        header["opaque"] = request.opaque or 0
        return build_answer(other.serialize, header, other.body)

    @staticmethod
    def body_changed(answer: WireFrame, dev: Deviation) -> WireFrame:
        """The recorded body with the deviation's changes (text-level, so the recording's
        escaping stays as it was)."""
        text = answer.body.decode("utf-8")
        if dev.quote_keys:
            text = quote_bare_keys(text)
        if dev.body_overrides:
            obj = json.loads(text)
            obj.update(dev.body_overrides)
            text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        return build_answer(answer.serialize, answer.header(), text.encode("utf-8"))

    @staticmethod
    def overridden(answer: WireFrame, dev: Deviation) -> WireFrame:
        header = dict(answer.header())
        for key, value in (dev.header_overrides or {}).items():
            if value is None:
                header.pop(key, None)
            else:
                header[key] = value
        return build_answer(answer.serialize, header, answer.body)

    async def check_answer(self, exp: Expectation, at: Frame) -> None:
        """Wait for the answer with the request's (conn, opaque) and compare it."""
        req = exp.request
        self.checked += 1
        sc = self.conns.get(req.conn)
        if sc is None:
            self.report(at, req.conn, "connection was never opened")
            return
        opaque = req.opaque or 0
        await sc.wait(lambda: bool(sc.candidates(opaque)) or sc.eof, ANSWER_TIMEOUT)
        cands = sc.candidates(opaque)
        if not cands:
            why = "the server closed the connection" if sc.eof else f"nothing in {ANSWER_TIMEOUT} s"
            self.report(at, req.conn, f"no answer ({exp.label}): {why}")
            return
        best: tuple[Received, list[Problem]] | None = None
        for cand in cands:
            problems = compare_answer(
                exp.answer, cand.wire, request_code=req.code, config_exact=exp.config_exact
            )
            if best is None or len(problems) < len(best[1]):
                best = (cand, problems)
            if not problems:
                break
        assert best is not None
        best[0].used = True
        for problem in best[1]:
            self.report(at, req.conn, f"{problem} ({exp.label})")

    # ------------------------------------------------------------------ timeline

    async def run(self) -> list[str]:
        items = list(self.sc.timeline())
        try:
            for idx, item in enumerate(items):
                if isinstance(item, Event):
                    await self.on_event(item)
                elif item.dir == "c2s":
                    nxt = next((i for i in items[idx + 1 :] if isinstance(i, Frame)), None)
                    await self.on_c2s(item, nxt)
                else:
                    await self.on_s2c(item)
            await self.finish()
        finally:
            await self.close_all()
        unused = set(self.deviations) - self.used_deviations
        for seq in sorted(unused):
            self.problems.append(f"{self.sc.name} seq {seq}: deviation listed but never applied")
        return self.problems

    def advance(self, t: float | None, *, scan_exact: bool = False) -> None:
        """Timed replay: move the server's clock to recorded time ``t`` and run its expiry
        check the way the recording allows. Java expires a broker at its next 5 s scan, so
        at any moment a broker that Java could still list must be listed: the check runs
        ``JAVA_SCAN_MS`` behind the clock. Where the recording shows Java expiring one (the
        server closed its connection), ``scan_exact`` runs it at the clock itself."""
        timing = self.timing
        if timing is None or t is None:
            return
        timing.clock.now_ms = max(timing.clock.now_ms, timing.base_ms + round(t * 1000))
        now = timing.clock.now_ms
        timing.ctrl.scan_expired(now if scan_exact else now - JAVA_SCAN_MS)

    async def on_c2s(self, frame: Frame, nxt: Frame | None) -> None:
        self.advance(frame.t)
        sc = self.conns.get(frame.conn) or await self.open(frame.conn)
        if sc.eof:
            self.report(frame, frame.conn, "server had already closed the connection")
            return
        try:
            sc.writer.write(frame.raw)
            await sc.writer.drain()
        except (ConnectionError, OSError) as exc:
            self.report(frame, frame.conn, f"could not send: {exc}")
            return
        exp = self.expectation_for(frame) if frame.is_request else None
        if exp is not None:
            recorded = self.sc.answer_of.get(frame.seq)
            if recorded is not None:
                self.pending[recorded.seq] = exp
            else:  # a deviation answers where the recording is silent: check it now
                await self.check_answer(exp, frame)
            return
        self.silent += 1
        sc.silent_since = time.monotonic()
        sc.silent_seqs.append(frame.seq)
        if frame.is_request and nxt is not None and nxt.conn != frame.conn:
            await asyncio.sleep(SETTLE)  # e.g. a oneway REGISTER_BROKER others then query

    async def on_s2c(self, frame: Frame) -> None:
        exp = self.pending.pop(frame.seq, None)
        if exp is None:
            request = self.sc.request_of[frame.seq]
            self.report(frame, frame.conn, f"internal: no expectation for request {request.seq}")
            return
        await self.check_answer(exp, frame)

    async def on_event(self, ev: Event) -> None:
        if ev.event != "close" or ev.conn is None or ev.conn in self.handled_close:
            return
        self.handled_close.add(ev.conn)
        sc = self.conns.get(ev.conn)
        if sc is None:
            return
        anchor = self.sc.by_seq.get(ev.after_seq)
        if ev.by == "server":
            self.advance(ev.t, scan_exact=True)
            if not await sc.wait(lambda: sc.eof, CLOSE_TIMEOUT):
                self.report(
                    anchor,
                    ev.conn,
                    f"server should close the connection (recording: closed by the server "
                    f"after seq {ev.after_seq}) but it stayed open for {CLOSE_TIMEOUT} s",
                )
            self.check_unexpected(sc)
            sc.writer.close()
            return
        await self.settle_silence(sc)
        if sc.eof:
            self.report(
                anchor,
                ev.conn,
                "server closed the connection, but in the recording the client closed first",
            )
        self.check_unexpected(sc)
        with contextlib.suppress(ConnectionError, OSError):
            if sc.writer.can_write_eof():
                sc.writer.write_eof()
        if not await sc.wait(lambda: sc.eof, CLOSE_TIMEOUT):
            self.report(
                anchor,
                ev.conn,
                f"server did not close its side within {CLOSE_TIMEOUT} s after the client's "
                "EOF (the Java server did)",
            )
        self.check_unexpected(sc)
        sc.writer.close()

    def check_unexpected(self, sc: ServerConn) -> None:
        """Every frame we did not pair with an expectation is one too many."""
        if sc.read_error:
            self.report(None, sc.conn, sc.read_error)
            sc.read_error = None
        for rec in sc.received:
            if rec.used:
                continue
            rec.used = True
            try:
                header = rec.wire.header()
            except (ValueError, struct.error):
                header = {"raw": rec.wire.raw[:120]}
            silent = [
                self.sc.by_seq[s]
                for s in sc.silent_seqs
                if (self.sc.by_seq[s].opaque or 0) == rec.opaque
            ]
            frame = silent[-1] if silent else None
            body = rec.wire.body[:120]
            text = (
                f"unexpected frame from the server (the recording has no answer here): "
                f"header {header}, body {body!r}"
            )
            if frame is not None:
                self.report(frame, sc.conn, text)
            else:
                self.report(None, sc.conn, text)

    async def finish(self) -> None:
        """One batched silent window for all still-open connections, then final checks."""
        open_conns = [sc for sc in self.conns.values() if sc.conn not in self.handled_close]
        deadline = max((sc.silent_since or 0.0 for sc in open_conns), default=0.0)
        remaining = deadline + SILENT_WINDOW - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
        for sc in open_conns:
            if sc.eof:
                self.report(None, sc.conn, "server closed a connection the recording kept open")
            self.check_unexpected(sc)
        for seq in sorted(self.pending):
            self.problems.append(f"{self.sc.name} seq {seq}: internal: expectation never checked")
        recorded = sum(1 for f in self.sc.frames if f.dir == "s2c")
        extra = sum(1 for d in self.deviations.values() if d.unsupported_code)
        if self.checked != recorded + extra:
            self.problems.append(
                f"{self.sc.name}: internal: compared {self.checked} answers, "
                f"expected {recorded} recorded + {extra} deviation answers"
            )


# ---------------------------------------------------------------------- fixtures and tests


@contextlib.asynccontextmanager
async def running_server(tmp_path: Path) -> AsyncIterator[tuple[NamesrvController, ReplayPaths]]:
    """A fresh name server with its files under tmp_path (the caller chdirs to work/)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    paths = ReplayPaths(
        workdir=work,
        kv_config_path=tmp_path / "namesrv" / "kvConfig.json",
        config_store_path=tmp_path / "namesrv.properties",
    )
    config = NamesrvConfig(
        listen_port=0,
        kv_config_path=str(paths.kv_config_path),
        config_store_path=str(paths.config_store_path),
        rocketmq_home="rmq",  # as in the recordings (GET_NAMESRV_CONFIG ignores it)
        rocketmq_remoting_version=401,
        http_port=0,  # answer as 4.9.4 (the recorded server) does
    )
    ctrl = NamesrvController(config, host="127.0.0.1")
    await ctrl.start()
    try:
        yield ctrl, paths
    finally:
        await ctrl.stop()


@pytest.mark.parametrize("name", SCENARIOS)
async def test_golden_replay(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our answers match the Java 4.9.4 answers, except the listed deviations."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")  # relative paths from the wire land in the temp dir
    scenario = load_scenario(name)
    async with running_server(tmp_path) as (ctrl, paths):
        problems = await Replayer(scenario, ctrl.port, paths).run()
    # after stop(): queued file writes are done
    for dev in deviations_for(name).values():
        if dev.post_check is not None:
            problems.extend(dev.post_check(paths))
    assert not problems, f"{len(problems)} difference(s) in {name}:\n" + "\n".join(problems)


async def probe_once(port: int, probe: Probe) -> WireFrame:
    """Send one synthetic JSON request and read the single answer."""
    header = {
        "code": probe.code,
        "extFields": dict(probe.ext_fields),
        "flag": 0,
        "language": "JAVA",
        "opaque": 7,
        "serializeTypeCurrentRPC": "JSON",
        "version": 401,
    }
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(build_frame(SERIALIZE_JSON, json_header_bytes(header), probe.request_body))
        await writer.drain()
        head = await asyncio.wait_for(reader.readexactly(4), ANSWER_TIMEOUT)
        (length,) = struct.unpack(">i", head)
        rest = await asyncio.wait_for(reader.readexactly(length), ANSWER_TIMEOUT)
        wire = WireFrame.parse(head + rest)
    finally:
        writer.close()
    return wire


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: f"code{p.code}")
async def test_5x_only_codes_answered(
    probe: Probe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codes 4.9.4 ignores (so the corpus cannot hold them) get their 5.x answer."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    async with running_server(tmp_path) as (ctrl, _):
        wire = await probe_once(ctrl.port, probe)
    got = wire.header()
    problems = [
        f"header.{k}: expected {v!r}, got {got.get(k, '<absent>')!r}"
        for k, v in {**probe.expect, "opaque": 7}.items()
        if got.get(k) != v
    ]
    if got.get("code") == REQUEST_CODE_NOT_SUPPORTED:
        problems.append(f"answered as an unknown code: {got.get('remark')!r}")
    if probe.body is not None:
        problems.extend(str(p) for p in diff_data(probe.body, fastjson.loads(wire.body or b"null")))
    assert not problems, f"code {probe.code} ({probe.reason}):\n" + "\n".join(problems)
