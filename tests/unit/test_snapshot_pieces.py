"""Snapshots written in pieces under the journal's one line limit, and recovery that streams.

Finding 6 of issue 32: a snapshot of 100 brokers x 10,000 topics was one 87 MiB line, over
the 64 MiB readers take, so every snapshot was skipped as damage and recovery started from
the journal's first empty start. The writer now never writes a line over the limit readers
use (``journal.MAX_LINE_BYTES``, one constant); here the limit is lowered so that the same
shapes are small. Finding 1 (restart half): recovery held every line after the snapshot;
it now applies them as it reads them.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest

from pynamesrv.namesrv import journal as journal_module
from pynamesrv.namesrv.events import Event
from pynamesrv.namesrv.journal import Journal, JournalDamage, complete_lines, journal_files
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.recovery import read_tail, recover, replay
from pynamesrv.namesrv.routes import RouteInfoManager

T0 = 1_700_000_000_000
NS = "10.0.0.1:9876"


def register(
    routes: RouteInfoManager, name: str, addr: str, topics: list[str], now_ms: int = T0
) -> list[Event]:
    body = RegisterBrokerBody(DataVersion(1, now_ms), [TopicConfig(t, 4, 4, 6) for t in topics], [])
    raw = body.encode(compressed=False)
    return routes.register_broker(
        cluster="C1",
        broker_addr=addr,
        broker_name=name,
        broker_id=0,
        ha_server_addr=None,
        body_digest=hash(raw),
        load_body=lambda: RegisterBrokerBody.decode(raw, compressed=False, version=401),
        channel=object(),
        now_ms=now_ms,
        heartbeat_timeout_ms=None,
    ).events


def write_journal(tmp_path: Path, record: Any) -> Path:
    """Run ``record(journal)`` on a started journal, then stop it; its instance directory."""

    async def run() -> Path:
        journal = Journal(tmp_path, NS, clock_ms=lambda: T0)
        await journal.start()
        record(journal)
        await journal.stop()
        return journal.directory

    return asyncio.run(run())


def lines_of(directory: Path) -> list[bytes]:
    return [raw for file in journal_files(directory) for raw in complete_lines(file)]


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    """The line limit at 256 KiB (pieces aim at 32 KiB): 64 MiB and 8 MiB, scaled down."""
    limit = 256 * 1024
    monkeypatch.setattr(journal_module, "MAX_LINE_BYTES", limit)
    monkeypatch.setattr(journal_module, "SNAPSHOT_PIECE_BYTES", 32 * 1024, raising=False)
    return limit


def test_a_snapshot_over_the_line_limit_is_written_in_pieces_and_recovered(
    tmp_path: Path, small_limit: int
) -> None:
    """Many brokers x many topics: a snapshot several times the limit, every line under it,
    and the routes it recovers are those it was taken of."""
    routes = RouteInfoManager()
    for b in range(20):
        register(routes, f"broker-{b}", f"10.0.0.{b}:10911", [f"T{b}-{i}" for i in range(600)])
    whole = len(orjson.dumps(routes.snapshot()))
    assert whole > 2 * small_limit

    directory = write_journal(
        tmp_path,
        lambda j: (
            j.record("server_started", version="t", config={}, recovered=None),
            j.record_snapshot(routes.snapshot()),
        ),
    )
    lines = lines_of(directory)
    assert max(map(len, lines)) <= small_limit
    pieces = [orjson.loads(raw) for raw in lines if b'"type":"snapshot"' in raw[:200]]
    assert len(pieces) > 2
    assert [p["part"] for p in pieces] == list(range(1, len(pieces) + 1))
    assert {p["parts"] for p in pieces} == {len(pieces)} and {p["ts"] for p in pieces} == {T0}
    assert [p["seq"] for p in pieces] == list(range(2, len(pieces) + 2))

    damage = JournalDamage()
    rebuilt = RouteInfoManager()
    found = recover(directory, rebuilt, T0, NS, damage)
    assert not damage, damage.summary()
    assert found is not None and found.snapshot_ts == T0
    assert rebuilt.snapshot() == routes.snapshot()


def test_ten_huge_topic_names_leave_the_snapshot_readable(tmp_path: Path, small_limit: int) -> None:
    """Finding 6 on purpose: ten names each near the limit's tenth make one line over it; as
    pieces, each name goes alone and the snapshot stays a base."""
    routes = RouteInfoManager()
    names = [f"{i}" + "x" * (small_limit // 8) for i in range(10)]
    register(routes, "broker-a", "10.0.0.1:10911", names)
    directory = write_journal(tmp_path, lambda j: j.record_snapshot(routes.snapshot()))
    assert max(map(len, lines_of(directory))) <= small_limit
    rebuilt = RouteInfoManager()
    damage = JournalDamage()
    assert recover(directory, rebuilt, T0, NS, damage) is not None
    assert not damage, damage.summary()
    assert sorted(rebuilt.topic_queue_table) == sorted(names)


def test_an_entry_larger_than_any_line_is_left_out_not_the_snapshot(
    tmp_path: Path, small_limit: int, caplog: pytest.LogCaptureFixture
) -> None:
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", ["small", "y" * (2 * small_limit)])
    directory = write_journal(tmp_path, lambda j: j.record_snapshot(routes.snapshot()))
    assert max(map(len, lines_of(directory))) <= small_limit
    assert "left out of the snapshot" in caplog.text
    rebuilt = RouteInfoManager()
    assert recover(directory, rebuilt, T0, NS) is not None
    assert list(rebuilt.topic_queue_table) == ["small"]


def test_no_line_over_the_limit_is_written_and_a_snapshot_follows(
    tmp_path: Path, small_limit: int
) -> None:
    """A line the writer cannot keep under the limit (a huge kv key) is not written: counted
    as ``too_long``, and the journal asks for a snapshot."""
    asked: list[int] = []

    def record(journal: Journal) -> None:
        journal.on_snapshot_wanted = lambda: asked.append(1)
        journal.record("kv_changed", namespace="n", key="k" * small_limit, op="put")
        assert journal.dropped["too_long"] == 1

    directory = write_journal(tmp_path, record)
    assert all(len(raw) <= small_limit for raw in lines_of(directory))


def pieces_of(routes: RouteInfoManager, ts: int, first_seq: int) -> list[dict[str, Any]]:
    lines, left_out = journal_module.snapshot_lines(ts, NS, first_seq, routes.snapshot(), 4096)
    assert not left_out
    return [orjson.loads(line) for line in lines]


def test_a_snapshot_cut_by_a_crash_falls_back_to_the_one_before(tmp_path: Path) -> None:
    """The pieces of the newest snapshot stop short (a kill -9 mid-write): recovery starts
    from the complete one before it and applies the lines after it; the cut set is damage."""
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", [f"A{i}" for i in range(200)], T0)
    records = [{"ts": T0, "ns": NS, "seq": 1, "type": "server_started", "recovered": None}]
    records += pieces_of(routes, T0, 2)
    seq = records[-1]["seq"]
    for event in register(routes, "broker-b", "10.0.0.2:10911", ["B0", "B1"], T0 + 1):
        seq += 1
        records.append({"ts": T0 + 1, "ns": NS, "seq": seq, **event.to_record()})
    later = pieces_of(routes, T0 + 2, seq + 1)
    assert len(later) > 2
    records += later[:-1]  # the last piece never reached the file
    (tmp_path / "events-20231114-22.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in records)
    )
    damage = JournalDamage()
    rebuilt = RouteInfoManager()
    found = recover(tmp_path, rebuilt, T0 + 3, NS, damage)
    assert found is not None and found.snapshot_ts == T0
    assert damage.snapshots_incomplete == 1
    assert sorted(rebuilt.topic_queue_table) == sorted(routes.topic_queue_table)
    assert found.events >= 1  # the registration after the complete snapshot


def test_replay_applies_a_set_of_pieces_only_once_complete() -> None:
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", [f"A{i}" for i in range(300)])
    pieces = pieces_of(routes, T0, 10)
    assert len(pieces) > 2
    rebuilt = RouteInfoManager()
    replay(pieces, rebuilt)
    assert rebuilt.snapshot() == routes.snapshot()

    damage = JournalDamage()
    partial = RouteInfoManager()
    replay([pieces[0], pieces[2]], partial, damage)  # a piece missing in the middle
    assert partial.topic_queue_table == {} and damage.snapshots_incomplete >= 1


def test_read_tail_starts_at_the_first_piece_of_the_last_complete_snapshot(
    tmp_path: Path,
) -> None:
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", [f"A{i}" for i in range(300)])
    records = pieces_of(routes, T0, 1)
    records.append({"ts": T0 + 5, "ns": NS, "seq": len(records) + 1, "type": "route_queries"})
    (tmp_path / "events-20231114-22.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in records)
    )
    tail = read_tail(tmp_path, NS)
    assert tail is not None and [r.get("part") for r in tail] == [p["part"] for p in records[:-1]]


def _heartbeat(seq: int) -> bytes:
    return orjson.dumps(
        {
            "ts": T0 + seq,
            "ns": NS,
            "seq": seq,
            "type": "broker_heartbeat",
            "cluster": "C1",
            "broker_name": "broker-a",
            "broker_id": 0,
            "broker_addr": "10.0.0.1:10911",
            "data_version": {"counter": 1, "timestamp": T0},
        }
    )


def _recovery_peak(tmp_path: Path, lines_after: int) -> int:
    """tracemalloc's peak while recovering a journal of one snapshot and ``lines_after``
    heartbeats after it."""
    routes = RouteInfoManager()
    register(routes, "broker-a", "10.0.0.1:10911", [f"T{i}" for i in range(100)])
    directory = tmp_path / str(lines_after)
    directory.mkdir()
    with (directory / "events-20231114-22.jsonl").open("wb") as out:
        out.write(orjson.dumps({"ts": T0, "ns": NS, "seq": 1, "type": "snapshot",
                                **routes.snapshot()}) + b"\n")  # fmt: skip
        batch = []
        for seq in range(2, lines_after + 2):
            batch.append(_heartbeat(seq))
            if len(batch) == 10_000:
                out.write(b"\n".join(batch) + b"\n")
                batch = []
        if batch:
            out.write(b"\n".join(batch) + b"\n")
    rebuilt = RouteInfoManager()
    tracemalloc.start()
    try:
        found = recover(directory, rebuilt, T0 + lines_after, NS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found is not None and found.events == lines_after
    return peak


def test_recovery_memory_does_not_grow_with_the_lines_after_the_snapshot(tmp_path: Path) -> None:
    """Finding 1's restart: recovery held every line after the snapshot (bytes, then dicts),
    1.36 GB after a flood. Streaming, its peak is the routes plus one line: the same for
    10,000 lines after the snapshot as for 200,000 (which held ~100 MB before)."""
    few = _recovery_peak(tmp_path, 10_000)
    many = _recovery_peak(tmp_path, 200_000)
    assert many < few + 2 * 1024 * 1024, (few, many)
