"""The journal records exactly what happened, in order, with the contract's fields."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from helpers import query_route, wait_until_unrouted
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.journal import Journal, hour_file_name, journal_files, read_records
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import wait_for

INSTANCE = "127.0.0.1:19876"
ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")


def broker(port: int, name: str, addr: str, **kwargs: object) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{port}"],
        cluster="JournalCluster",
        broker_name=name,
        broker_id=0,
        broker_addr=addr,
        ha_server_addr="127.0.0.1:1",
        topics={f"{name}-T": TopicConfig(f"{name}-T", 2, 2, 6)},
        **kwargs,  # type: ignore[arg-type]
    )


def essentials(record: dict) -> tuple:
    """What identifies an event in the expected sequence."""
    kind = record["type"]
    if kind == "broker_registered":
        return (kind, record["broker_name"], record["first"], tuple(record["topics_added"]),
                tuple(record["topics_changed"]), record["topic_count"])  # fmt: skip
    if kind in ("broker_heartbeat",):
        return (kind, record["broker_name"])
    if kind == "broker_removed":
        return (kind, record["broker_name"], record["reason"], record["group_gone"],
                record["topics_gone"])  # fmt: skip
    if kind == "topic_removed":
        return (kind, record["topic"], record["reason"])
    if kind == "kv_changed":
        return (kind, record["namespace"], record["key"], record["op"])
    if kind == "config_changed":
        return (kind, record["key"], record["value"])
    return (kind,)


async def test_scripted_sequence_produces_exactly_the_expected_journal(
    start_namesrv, tmp_path: Path
) -> None:
    root = tmp_path / "journal"
    ns = await start_namesrv(
        journalEnable=True,
        journalDir=root,
        instanceName=INSTANCE,
        scanNotActiveBrokerInterval=100,
        journalFlushIntervalMs=100,
    )
    port = ns.port
    a = broker(port, "a", "127.0.0.1:10911")
    await a.start()  # first registration
    await a.register_all()  # nothing changed: a heartbeat
    a.update_topics(TopicConfig("a-U", 4, 4, 6))
    await a.register_all()  # a topic added
    for _ in range(3):
        assert (await query_route(port, "a-T")).code == ResponseCode.SUCCESS
    assert (await query_route(port, "nope")).code == ResponseCode.TOPIC_NOT_EXIST
    await a.stop()  # graceful: unregister

    b = broker(port, "b", "127.0.0.1:10921", heartbeat_timeout_ms=300)
    await b.start()
    await b.die_silently()
    await wait_until_unrouted(port, "b-T")  # expired
    await b.stop(unregister=False)

    c = broker(port, "c", "127.0.0.1:10931")
    await c.start()
    await c.die_silently()
    await c.close_connections()
    await wait_until_unrouted(port, "c-T")  # connection closed

    client = await RemotingClient.connect("127.0.0.1", port)
    for code, ext, body in (
        (RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k", "value": "v"}, b""),
        (RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k"}, b""),
        (RequestCode.UPDATE_NAMESRV_CONFIG, None, b"orderMessageEnable=true\n"),
    ):
        answer = await client.request(RemotingCommand(code=code, ext_fields=ext, body=body))
        assert answer.code == ResponseCode.SUCCESS
    await client.close()

    def flushed_through_the_config_change() -> bool:
        return any(r["type"] == "config_changed" for r in read_records(journal_files(root)))

    # Written by the periodic flush alone, while the server runs (nothing here flushes).
    await wait_for(flushed_through_the_config_change, "the journal flushed mid-run")
    await ns.stop()

    files = journal_files(root)
    assert [f.parent.name for f in files] == ["127.0.0.1_19876"] * len(files)
    records = list(read_records(files))
    assert {r["ns"] for r in records} == {INSTANCE}
    assert all(isinstance(r["ts"], int) for r in records)
    assert [r["ts"] for r in records if r["type"] != "route_queries"] == sorted(
        r["ts"] for r in records if r["type"] != "route_queries"
    )
    sequence = [essentials(r) for r in records if r["type"] != "route_queries"]
    assert sequence == [
        ("server_started",),
        ("snapshot",),
        ("broker_registered", "a", True, ("a-T",), (), 1),
        ("broker_heartbeat", "a"),
        ("broker_registered", "a", False, ("a-U",), (), 2),
        ("broker_removed", "a", "unregister", True, 2),  # one line takes both topics
        ("broker_registered", "b", True, ("b-T",), (), 1),
        ("broker_removed", "b", "expired", True, 1),
        ("broker_registered", "c", True, ("c-T",), (), 1),
        ("broker_removed", "c", "channel_closed", True, 1),
        ("kv_changed", "NS", "k", "put"),
        ("kv_changed", "NS", "k", "delete"),
        ("config_changed", "orderMessageEnable", "true"),
        ("snapshot",),
        ("server_stopped",),
    ]
    registered = next(r for r in records if r["type"] == "broker_registered")
    assert registered["cluster"] == "JournalCluster" and registered["ha_addr"] == "127.0.0.1:1"
    assert set(registered["data_version"]) == {"counter", "timestamp"}
    assert registered["topic_configs"] == {"a-T": {"read": 2, "write": 2, "perm": 6, "sys_flag": 0}}
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
    removed = [r for r in records if r["type"] == "broker_removed"]
    assert all(r["last_heartbeat_ts"] <= r["ts"] for r in removed)
    expired = next(r for r in removed if r["reason"] == "expired")
    assert expired["ts"] > expired["last_heartbeat_ts"] + 300  # after its deadline, not before
    started = records[0]
    assert started["config"]["journalDir"] == str(root) and "version" in started
    windows = [r for r in records if r["type"] == "route_queries"]
    assert windows and all(w["window_ms"] > 0 for w in windows)
    assert sum(w["counts"].get("a-T", 0) for w in windows) == 3
    assert sum(w["misses"].get("nope", 0) for w in windows) == 1
    first_snapshot = records[1]
    assert first_snapshot["brokers"] == [] and first_snapshot["topics"] == {}


def test_torn_last_line_is_skipped_by_readers(tmp_path: Path) -> None:
    instance = tmp_path / "journal" / "h_1"
    instance.mkdir(parents=True)
    good = [
        {"ts": 1, "ns": "h:1", "type": "server_started", "version": "x", "config": {}},
        {"ts": 2, "ns": "h:1", "type": "topic_removed", "topic": "T", "reason": "deleted"},
    ]
    data = b"".join(orjson.dumps(r) + b"\n" for r in good)
    (instance / "events-20261122-10.jsonl").write_bytes(data + b'{"ts":3,"ns":"h:1","ty')
    assert list(read_records(journal_files(tmp_path / "journal"))) == good
    out = subprocess.run(
        [ENTRY_POINT, "journal", "tail", str(tmp_path / "journal")],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    assert "server_started" in out and "T reason=deleted" in out
    assert out.count("\n") == 2


async def test_lines_appended_after_a_torn_line_are_not_lost(tmp_path: Path) -> None:
    """A crash mid-line, then a restart appending to the same hour file."""
    journal = Journal(tmp_path, "h:1", clock_ms=lambda: 1_795_000_000_000)
    journal.directory.mkdir(parents=True)
    hour_file = journal.directory / hour_file_name(1_795_000_000_000)
    hour_file.write_bytes(b'{"ts":1,"ns":"h:1","type":"server_started"}\n{"ts":2,"ns":"h:1","ty')
    await journal.start()
    journal.record("server_started", version="x", config={})
    await journal.stop()
    records = list(read_records([hour_file]))
    assert [r["ts"] for r in records] == [1, 1_795_000_000_000]
    assert records[1]["version"] == "x"


class ScriptedClock:
    def __init__(self, start_ms: int) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now


HOUR = 3_600_000
T0 = 1_795_000_000_000 // HOUR * HOUR  # an hour boundary in 2026


async def test_closed_hours_are_compressed_and_still_read_in_order(tmp_path: Path) -> None:
    clock = ScriptedClock(T0)
    journal = Journal(tmp_path, INSTANCE, clock_ms=clock)
    await journal.start()
    for hour in range(3):
        clock.now = T0 + hour * HOUR
        journal.record("kv_changed", namespace="ns", key=f"k{hour}", op="put")
        await journal.flush()
    await journal.stop()  # waits for the compression of the closed hours
    names = sorted(p.name for p in journal.directory.iterdir())
    assert names == [
        hour_file_name(T0) + ".gz",
        hour_file_name(T0 + HOUR) + ".gz",
        hour_file_name(T0 + 2 * HOUR),  # the open hour stays plain
    ]
    keys = [r["key"] for r in read_records(journal_files(tmp_path))]
    assert keys == ["k0", "k1", "k2"]


async def test_hours_older_than_the_retention_are_deleted(tmp_path: Path) -> None:
    clock = ScriptedClock(T0)
    journal = Journal(tmp_path, INSTANCE, clock_ms=clock, retention_hours=2)
    await journal.start()
    for hour in range(4):
        clock.now = T0 + hour * HOUR
        journal.record("kv_changed", namespace="ns", key=f"k{hour}", op="put")
        await journal.flush()
    await journal.stop()
    keys = [r["key"] for r in read_records(journal_files(tmp_path))]
    assert keys == ["k1", "k2", "k3"]  # hour 0 is older than now - 2 h


async def test_a_flood_of_distinct_junk_stays_under_the_size_cap(
    tmp_path: Path, caplog: Any
) -> None:
    cap = 1024 * 1024
    journal = Journal(tmp_path, INSTANCE, max_bytes=cap)
    await journal.start()
    for batch in range(30):  # ~3 MB of distinct KV keys, the kind a hostile client can send
        for i in range(1000):
            journal.record("kv_changed", namespace="junk", key=f"{batch}-{i}-" + "x" * 60, op="put")
        await journal.flush()
    await journal.stop()
    size = sum(p.stat().st_size for p in journal.directory.iterdir())
    assert size <= cap
    assert journal.dropped_lines > 0
    assert caplog.text.count("over its size cap") == 1


async def test_leftovers_of_a_crash_are_compressed_at_start(tmp_path: Path) -> None:
    directory = tmp_path / INSTANCE.replace(":", "_")
    directory.mkdir(parents=True)
    past = directory / hour_file_name(T0)
    past.write_bytes(b'{"ts":1,"ns":"x","type":"kv_changed"}\n{"ts":2,"ns":"x","ty')  # torn
    (directory / (past.name + ".gz.tmp")).write_bytes(b"partial")
    journal = Journal(tmp_path, INSTANCE, clock_ms=ScriptedClock(T0 + 5 * HOUR))
    await journal.start()
    await journal.stop()
    assert sorted(p.name for p in directory.iterdir()) == [past.name + ".gz"]
    assert [r["ts"] for r in read_records(journal_files(tmp_path))] == [1]


async def test_acting_master_and_static_topics_are_journaled(start_namesrv, tmp_path: Path) -> None:
    """5.x additions (docs/journal.md): a registration's static-topic mappings, the write
    permission an acting-master group loses with its master, the lowest id changing, the
    mappings in snapshots; and the journal still rebuilds the routes the server answers."""
    from pynamesrv.namesrv.model import TopicQueueMappingInfo
    from pynamesrv.pipeline.timetravel import canonical_route, replay
    from pynamesrv.remoting import fastjson

    root = tmp_path / "journal"
    ns = await start_namesrv(journalEnable=True, journalDir=root, instanceName=INSTANCE)
    info = TopicQueueMappingInfo("S", "a", total_queues=2, epoch=7, curr_id_map=((0, 0),))
    master = broker(ns.port, "a", "127.0.0.1:10911", enable_acting_master=True, version=453)
    master.topics = {"S": TopicConfig("S", 2, 2, 6)}
    master.mappings = {"S": info}
    slave = broker(ns.port, "a", "127.0.0.1:10921", enable_acting_master=True, version=453)
    slave.broker_id, slave.topics = 1, dict(master.topics)
    await master.register_all()
    await slave.register_all()
    await master.stop()
    answer = await query_route(ns.port, "S", version=453)
    live = fastjson.loads(answer.body)
    assert live["queueDatas"][0]["perm"] == 4
    assert live["topicQueueMappingByBroker"]["a"]["epoch"] == 7
    ns.record_snapshot()
    await ns.stop()

    records = list(read_records(journal_files(root)))
    registered = next(r for r in records if r["type"] == "broker_registered")
    assert registered["topic_mappings"]["S"] == {
        "bname": "a", "currIdMap": {"0": 0}, "dirty": False, "epoch": 7,
        "scope": "__global__", "topic": "S", "totalQueues": 2,
    }  # fmt: skip
    [wiped] = [r for r in records if r["type"] == "perm_changed"]
    assert (wiped["broker_name"], wiped["op"], wiped["reason"]) == ("a", "wipe", "master_gone")
    [changed] = [r for r in records if r["type"] == "min_broker_id_changed"]
    assert (changed["min_broker_id"], changed["notify"]) == (1, ["127.0.0.1:10921"])
    snapshot = [r for r in records if r["type"] == "snapshot"][-1]
    assert snapshot["mappings"]["S"]["a"]["epoch"] == 7
    rebuilt = replay(r for r in records if r["type"] != "snapshot")
    assert rebuilt["S"] == canonical_route(live)


async def test_route_queries_never_journal_an_over_long_topic_name(start_namesrv) -> None:
    """A miss for a 200 KB name (anyone may ask) is counted under ``misses_too_long``."""
    ctrl = await start_namesrv(journalEnable=True)
    huge = "h" * 200_000
    client = await RemotingClient.connect("127.0.0.1", ctrl.port)
    try:
        for topic in (huge, huge + "2", "short-miss"):
            answer = await client.request(requests.get_routeinfo_by_topic(topic))
            assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await client.close()
    ctrl.record_route_queries(ctrl.clock_ms())
    assert ctrl.journal is not None
    await ctrl.journal.flush()
    [window] = [
        r for r in read_records(journal_files(ctrl.journal_root)) if r["type"] == "route_queries"
    ]
    assert window["misses"] == {"short-miss": 1}
    assert window["misses_too_long"] == 2
    assert "counts_other" not in window and "misses_other" not in window


async def test_no_route_queries_window_is_empty_or_repeats_the_last_one(start_namesrv) -> None:
    """A window closed at ``end`` and a stop (or an early timer) at ``end`` again: no line with
    ``window_ms: 0`` and the last line's ts; queries counted meanwhile get a 1 ms window
    after it (issue 26, finding 7)."""
    ctrl = await start_namesrv(journalEnable=True)
    end = ctrl.clock_ms() + 60_000  # a window that closed later than any stop below
    ctrl.record_route_queries(end)
    ctrl.record_route_queries(end)  # nothing counted since: nothing to write
    assert (await query_route(ctrl.port, "no-such-topic")).code == ResponseCode.TOPIC_NOT_EXIST
    ctrl.record_route_queries(end)  # counted since: its own window after the last one
    await ctrl.stop()  # its clock is before the last window's end: nothing to add
    windows = [
        r for r in read_records(journal_files(ctrl.journal_root)) if r["type"] == "route_queries"
    ]
    assert [(w["ts"] - end, w["misses"]) for w in windows] == [(0, {}), (1, {"no-such-topic": 1})]
    assert windows[1]["window_ms"] == 1 and windows[0]["window_ms"] > 0
