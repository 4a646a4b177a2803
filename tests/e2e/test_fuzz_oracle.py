"""The fuzzer's judgement, against a fake name server that misbehaves on purpose.

The bounded run in ``test_fuzz.py`` says whether the real server survives; these tests say
whether the fuzzer would notice if it did not, and stays quiet when nothing is wrong. The
fake on the other side of the connection frames like Java (a broken frame or header closes
the connection, a oneway request is never answered, the answers of one read are written
together) and can be told to break one rule: answer oneway requests, lose the answers of
a read that holds a deeply nested header, stop answering, change the route, or send an
answer no client can read.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from conformance.golden import golden_5x_dir, golden_dir
from pynamesrv.simulate.fuzz import FuzzConfig, Limits, RunOptions, make_forge
from pynamesrv.simulate.fuzz.runner import CHECK_TOPIC, FuzzRun
from pynamesrv.simulate.fuzz.target import LogTally
from pynamesrv.simulate.fuzz.wire import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    decode_rocketmq_header,
    dump_json,
    frame,
)

MIB = 1 << 20
GOLDEN = [golden_dir(), golden_5x_dir()]  # the frames real peers sent
LIMITS = Limits(max_frame_length=4 * MIB, bomb_max=2 * MIB, flood_max=MIB, big_body_max=MIB)
ROUTE_BODY = b'{"brokerDatas":[],"queueDatas":[],"fake":true}'
INT32 = range(-(1 << 31), 1 << 31)


@dataclass
class Misbehaviour:
    answer_oneway: bool = False
    lose_answers_on_deep_nesting: bool = False
    freeze_on_code: int | None = None  # stop answering anything once this code arrives
    wrong_route: bool = False
    garble_unknown_codes: bool = False  # answer code 9999 with a header no client reads


class FakeNamesrv(asyncio.Protocol):
    def __init__(self, bad: Misbehaviour, state: dict[str, bool]) -> None:
        self.bad = bad
        self.state = state
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out: list[bytes] = []
        broken = False
        while len(self.buffer) >= 4 and not broken:
            (length,) = struct.unpack_from(">i", self.buffer)
            if length < 4 or length > LIMITS.frame_room - 4:
                broken = True
                break
            if len(self.buffer) < 4 + length:
                break
            raw, self.buffer = self.buffer[: 4 + length], self.buffer[4 + length :]
            answer = self.answer(raw)
            if answer is None:
                continue
            if answer == b"close":
                broken = True
            elif answer == b"lose":
                out.clear()
                broken = True
            else:
                out.append(answer)
        if out and not self.state.get("frozen"):
            assert self.transport is not None
            self.transport.write(b"".join(out))
        if broken and self.transport is not None:
            self.transport.close()

    def answer(self, raw: bytes) -> bytes | None:
        word = struct.unpack_from(">I", raw, 4)[0]
        header_bytes = raw[8 : 8 + (word & 0xFFFFFF)]
        nesting = header_bytes.count(b"[") + header_bytes.count(b"{")
        if self.bad.lose_answers_on_deep_nesting and nesting >= 64:
            return b"lose"
        try:
            if word >> 24 == 0:
                header = json.loads(header_bytes)
            elif word >> 24 == 1:
                header = decode_rocketmq_header(header_bytes)
            else:
                return b"close"
            code, opaque, flag = (header.get(k, 0) for k in ("code", "opaque", "flag"))
            if not all(type(v) is int and v in INT32 for v in (code, opaque, flag)):
                return b"close"
            ext = header.get("extFields") or {}
            if not isinstance(ext, dict):
                return b"close"
        except (ValueError, TypeError, AttributeError, IndexError, RecursionError, struct.error):
            return b"close"
        if code == self.bad.freeze_on_code:
            self.state["frozen"] = True
        if flag & FLAG_RESPONSE or (flag & FLAG_ONEWAY and not self.bad.answer_oneway):
            return None
        if code == 9999 and self.bad.garble_unknown_codes:
            return frame(0, b'{"code":3,"opaque":')
        body = b""
        if code == 105 and ext.get("topic") == CHECK_TOPIC:
            body = ROUTE_BODY + (b" " if self.state.get("routed") and self.bad.wrong_route else b"")
            self.state["routed"] = True
        result = {"code": 0, "flag": FLAG_RESPONSE, "language": "JAVA", "opaque": opaque}
        return frame(0, dump_json(result).encode(), body)


@pytest.fixture
async def fake_namesrv() -> AsyncIterator[
    tuple[Misbehaviour, asyncio.AbstractServer, dict[str, bool]]
]:
    bad, state = Misbehaviour(), {}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FakeNamesrv(bad, state), "127.0.0.1", 0)
    yield bad, server, state
    server.close()


async def fuzz(server: asyncio.AbstractServer, frames: int, **options: float) -> FuzzRun:
    forge = make_forge(FuzzConfig(seed=4, limits=LIMITS, corpus_dirs=GOLDEN))
    port = server.sockets[0].getsockname()[1]
    run = FuzzRun(forge, "127.0.0.1", port, RunOptions(frames=frames, batch=250, **options))
    await run.run()
    return run


async def test_a_well_behaved_peer_gets_no_findings(fake_namesrv) -> None:
    _, server, _ = fake_namesrv
    stats = (await fuzz(server, 1500)).stats
    assert stats.finding_counts == {}, stats.findings[:3]
    assert stats.checks == stats.checks_ok == 6 and stats.hangs == 0
    assert stats.canaries == stats.canaries_ok > 50 and stats.silence_probes > 50
    assert stats.answers > 300 and stats.closed_by_server > 300
    assert not stats.failed


async def test_answers_to_oneway_requests_are_found_with_their_frame(fake_namesrv) -> None:
    bad, server, _ = fake_namesrv
    bad.answer_oneway = True
    stats = (await fuzz(server, 1000)).stats
    assert stats.finding_counts["silent_answered"] > 10
    finding = next(f for f in stats.findings if f.kind == "silent_answered")
    assert finding.mutator in ("oneway", "response_flag") and finding.frame_b64
    assert stats.failed


async def test_answers_lost_to_a_later_frame_of_the_same_read_are_found(fake_namesrv) -> None:
    bad, server, _ = fake_namesrv
    bad.lose_answers_on_deep_nesting = True
    stats = (await fuzz(server, 2000)).stats
    lost = [f for f in stats.findings if f.kind == "lost_answer"]
    assert lost and all(f.mutator in ("deep_nesting", "many_fields") for f in lost)
    assert stats.canaries_ok == stats.canaries - stats.finding_counts["lost_answer"]


async def test_a_server_that_stops_answering_is_a_hang_and_ends_the_run(fake_namesrv) -> None:
    bad, server, _ = fake_namesrv
    bad.freeze_on_code = 9999
    run = await fuzz(server, 5000, check_timeout_s=1.0)
    assert run.stats.hangs == 1 and run.stats.finding_counts["hang"] == 1
    assert run.stats.frames < 5000  # it stopped at the first hang
    assert run.stats.failed


async def test_a_changed_route_fails_the_check(fake_namesrv) -> None:
    bad, server, _ = fake_namesrv
    bad.wrong_route = True
    stats = (await fuzz(server, 500, canary_every=0)).stats
    assert stats.checks == 2 and stats.checks_ok == 0
    assert stats.finding_counts["check_failed"] == 2


async def test_answers_no_client_can_read_are_found(fake_namesrv) -> None:
    bad, server, _ = fake_namesrv
    bad.garble_unknown_codes = True
    stats = (await fuzz(server, 1000)).stats
    assert stats.unreadable_answers > 0
    assert stats.finding_counts["unreadable_answer"] > 0 and stats.failed


def test_log_tally_groups_tracebacks_by_their_exception_and_counts_fatal_errors() -> None:
    tally = LogTally()
    text = """\
2026-01-01 00:00:00,001 INFO  pynamesrv - The Name Server boot success.
2026-01-01 00:00:01,002 ERROR asyncio - Fatal error on transport TCPTransport
protocol: <Connection 127.0.0.1:4711>
Traceback (most recent call last):
  File "server.py", line 149, in data_received
TypeError: Integer exceeds 64-bit range
2026-01-01 00:00:02,003 ERROR asyncio - Fatal error on transport TCPTransport
protocol: <Connection 127.0.0.1:4712>
Traceback (most recent call last):
  File "server.py", line 149, in data_received
TypeError: Integer exceeds 64-bit range
2026-01-01 00:00:03,004 WARNING pynamesrv.namesrv.processor - request code 103 failed
2026-01-01 00:00:04,005 INFO  pynamesrv.remoting.server - closing 127.0.0.1:4713: bad
2026-01-01 00:00:05,006 WARNING pynamesrv.remoting.server - closing 127.0.0.1:4714 (malformed_frame)
2026-01-01 00:00:06,007 WARNING pynamesrv.audit - admin write PUT_KV_CONFIG refused"""
    for line in text.splitlines():
        tally.take(line)
    tally.flush()
    assert tally.levels == {"INFO": 2, "ERROR": 2, "WARNING": 3}
    # the documented answers to hostile frames are counted, not findings
    assert tally.refusals == 2
    assert (tally.tracebacks, tally.fatal_errors, tally.bad_events) == (2, 2, 3)
    fatal = (
        "ERROR asyncio - Fatal error on transport TCPTransport"
        " | TypeError: Integer exceeds #-bit range"
    )
    warning = "WARNING pynamesrv.namesrv.processor - request code # failed"
    assert tally.signatures == {fatal: 2, warning: 1}
    assert tally.serious == {fatal}
    assert tally.samples[fatal][-1] == "TypeError: Integer exceeds 64-bit range"


def test_the_oracle_tests_mutate_the_recorded_frames() -> None:
    """These tests count findings in frames mutated from both golden corpora (the built-in
    seeds, the default, are a few frames per request code: tests/unit/test_fuzz_builtin.py)."""
    assert len(make_forge(FuzzConfig(corpus_dirs=GOLDEN)).context.seeds) > 1000
