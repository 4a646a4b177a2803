"""Warm restart, unit level: the replay rules of the registry and the recovery driver.

A registry is driven as the server drives it (scripted clock and connections), its events are
written as the journal writes them (through JSON), and a second registry rebuilt from those
lines must answer every query byte for byte as the first: route bodies in both dialects,
zone-filtered and acting-master answers, cluster info, topic lists, data versions, the
brokers' deadlines. Hypothesis picks the operations.
"""

from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv.events import BrokerRemoved, Event
from pynamesrv.namesrv.journal import HEARTBEAT, HeartbeatMemory, JournalDamage, compact_heartbeat
from pynamesrv.namesrv.model import (
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicQueueMappingInfo,
)
from pynamesrv.namesrv.recovery import read_tail, recover, replay
from pynamesrv.namesrv.routes import RECOVERED, RecordError, RouteInfoManager
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import TopicSysFlag

T0 = 1_700_000_000_000
NS = "10.0.0.1:9876"


# ---------------------------------------------------------------------------- the harness


@dataclass(frozen=True)
class Member:
    """A broker address: its group, id, cluster, and what it sends (5.x headers or not)."""

    group: str
    broker_id: int
    cluster: str
    addr: str
    acting: bool | None = None
    zone: str | None = None


MEMBERS = (
    Member("g0", 0, "C1", "10.0.1.1:10911", acting=True, zone="z1"),
    Member("g0", 1, "C1", "10.0.1.2:10911", acting=True, zone="z1"),
    Member("g1", 0, "C1", "10.0.2.1:10911"),
    Member("g1", 1, "C1", "10.0.2.2:10911"),
    Member("g2", 0, "C2", "10.0.3.1:10911", acting=False, zone="z2"),
)
TOPICS = ("TopicA", "TopicB", "TopicC", "%RETRY%grp", "Static")


@dataclass
class Driven:
    """A registry, its broker connections, its clock and the journal it would write."""

    routes: RouteInfoManager = field(default_factory=RouteInfoManager)
    now: int = T0
    records: list[dict[str, Any]] = field(default_factory=list)
    channels: dict[str, object] = field(default_factory=dict)
    versions: dict[str, DataVersion] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def emit(self, events: list[Event]) -> None:
        self.events += events
        for event in events:
            self.line(**event.to_record())

    def line(self, **record: Any) -> None:
        """A journal line, through JSON as the journal writes and reads it."""
        self.records.append(orjson.loads(orjson.dumps({"ts": self.now, "ns": NS, **record})))

    def snapshot(self) -> None:
        self.line(type="snapshot", **self.routes.snapshot())

    def channel(self, member: Member) -> object:
        return self.channels.setdefault(member.addr, object())

    def register(
        self,
        member: Member,
        topics: list[TopicConfig],
        *,
        bump: bool = False,
        timeout_ms: int | None = None,
        delete_missing: bool = False,
        mappings: dict[str, TopicQueueMappingInfo] | None = None,
    ) -> None:
        version = self.versions.get(member.group, DataVersion(T0 - 1000, 1))
        if bump:
            version = DataVersion(version.timestamp + 1, version.counter + 1)
        self.versions[member.group] = version
        body = RegisterBrokerBody(version, topics, [], dict(mappings or {}))
        raw = body.encode(compressed=False)
        result = self.routes.register_broker(
            cluster=member.cluster,
            broker_addr=member.addr,
            broker_name=member.group,
            broker_id=member.broker_id,
            ha_server_addr=member.addr.replace("10911", "10912"),
            body_digest=hash(raw),
            load_body=lambda: RegisterBrokerBody.decode(raw, compressed=False, version=453),
            channel=self.channel(member),
            now_ms=self.now,
            heartbeat_timeout_ms=timeout_ms,
            enable_acting_master=member.acting,
            zone_name=member.zone,
            delete_missing_topics=delete_missing,
        )
        self.emit(result.events)


def answers(routes: RouteInfoManager) -> dict[str, Any]:
    """Everything a client, broker or mqadmin can read of a registry, as bytes or values."""
    out: dict[str, Any] = {
        "cluster": fastjson.dumps(routes.cluster_info()),
        "topics": routes.all_topics(),
        "by cluster": {c: routes.topics_by_cluster(c) for c in ("C1", "C2")},
        "system": routes.system_topics(),
        "unit": routes.unit_topics(routes.is_unit),
        "live": {
            key: (
                live.last_update_ms,
                live.timeout_ms,
                live.data_version,
                live.ha_server_addr,
                live.broker_name,
                live.broker_id,
            )
            for key, live in sorted(routes.broker_live_table.items())
        },
        "members": {g: routes.broker_member_group("C1", g) for g in ("g0", "g1", "g2")},
    }
    for support in (False, True):
        routes.set_support_acting_master(support)
        for topic in (*TOPICS, "Admin"):
            for standard in (False, True):
                out[f"{topic} {standard} {support}"] = routes.route_body(topic, standard, None)
            for zone in ("z1", "Z2", "elsewhere"):
                out[f"{topic} {zone} {support}"] = routes.route_body(topic, True, None, zone)
    routes.set_support_acting_master(False)
    return out


def compacted(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` as one hour file of the journal holds them: heartbeats that repeat the
    file's last full one of their broker in the compact form."""
    memory, out = HeartbeatMemory(), []
    for seq, record in enumerate(records, 1):
        if record["type"] == HEARTBEAT:
            fields = {k: v for k, v in record.items() if k not in ("ts", "ns", "type")}
            beat = compact_heartbeat(record["ts"], record["ns"], seq, fields)
            if beat is not None and memory.repeats(beat):
                out.append(orjson.loads(beat.line))
                continue
        out.append(record)
    return out


def test_heartbeats_of_one_broker_are_compacted_after_the_first() -> None:
    driven = Driven()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)])
    for _ in range(3):
        driven.now += 1_000
        driven.emit(driven.routes.broker_heartbeat(MEMBERS[2].cluster, MEMBERS[2].addr, driven.now))
    short = compacted(driven.records)
    assert [sorted(r) for r in short[1:]] == [sorted(short[1])] + [
        ["broker_addr", "cluster", "ns", "seq", "ts", "type"]
    ] * 2
    routes = rebuilt(short)
    assert routes.broker_live_table[("C1", MEMBERS[2].addr)].last_update_ms == driven.now


def rebuilt(records: list[dict[str, Any]]) -> RouteInfoManager:
    routes = RouteInfoManager()
    replay(records, routes)
    return routes


# ---------------------------------------------------------------------------- operations

topic_configs = st.lists(
    st.builds(
        TopicConfig,
        topic_name=st.sampled_from(TOPICS[:4]),
        read_queue_nums=st.integers(1, 8),
        write_queue_nums=st.integers(1, 8),
        perm=st.sampled_from([2, 4, 6, 7]),
        topic_sys_flag=st.sampled_from([0, TopicSysFlag.UNIT, TopicSysFlag.UNIT_SUB]),
    ),
    max_size=4,
    unique_by=lambda t: t.topic_name,
)
members = st.sampled_from(MEMBERS)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("register"),
            members,
            topic_configs,
            st.booleans(),  # data version bumped
            st.sampled_from([None, 5_000, 60_000]),  # heartbeatTimeoutMillis
            st.booleans(),  # deleteTopicWithBrokerRegistration
            st.booleans(),  # a static-topic mapping
        ),
        st.tuples(st.sampled_from(["heartbeat", "query", "unregister", "close"]), members),
        st.tuples(st.just("advance"), st.integers(0, 70_000)),
        st.tuples(st.sampled_from(["wipe", "add"]), st.sampled_from(["g0", "g1", "g2"])),
        st.tuples(
            st.just("delete_topic"),
            st.sampled_from(TOPICS),
            st.sampled_from([None, "C1", "C2"]),
        ),
        st.tuples(st.just("register_topic"), st.sampled_from(["g0", "g1", "g2", "gone"])),
        st.just(("snapshot",)),
    ),
    max_size=40,
)


def apply(driven: Driven, op: tuple[Any, ...]) -> None:
    routes, kind = driven.routes, op[0]
    if kind == "register":
        _, member, topics, bump, timeout_ms, delete_missing, mapped = op
        mappings = {}
        if mapped:
            info = TopicQueueMappingInfo("Static", member.group, "__global__", 4, 1, False,
                                         ((0, 0), (1, 1)))  # fmt: skip
            mappings = {"Static": info}
            topics = [*topics, TopicConfig("Static", 2, 2, 6)]
        driven.register(member, topics, bump=bump, timeout_ms=timeout_ms,
                        delete_missing=delete_missing, mappings=mappings)  # fmt: skip
    elif kind == "heartbeat":
        driven.emit(routes.broker_heartbeat(op[1].cluster, op[1].addr, driven.now))
    elif kind == "query":
        version = driven.versions.get(op[1].group, DataVersion())
        driven.emit(routes.query_data_version(op[1].cluster, op[1].addr, version, driven.now)[2])
    elif kind == "unregister":
        m = op[1]
        driven.emit(routes.unregister_broker(m.cluster, m.addr, m.group, m.broker_id))
    elif kind == "close":
        driven.emit(routes.on_channel_closed(driven.channel(op[1]), "channel_closed"))
    elif kind == "advance":
        driven.now += op[1]
        driven.emit(routes.expire(driven.now)[0])
    elif kind == "wipe":
        driven.emit(routes.wipe_write_perm(op[1])[1])
    elif kind == "add":
        driven.emit(routes.add_write_perm(op[1])[1])
    elif kind == "delete_topic":
        driven.emit(routes.delete_topic(op[1], op[2]))
    elif kind == "register_topic":
        driven.emit(routes.register_topic("Admin", [QueueData(op[1], 3, 3, 6, 0)]))
    else:
        driven.snapshot()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=operations, after=operations)
def test_replay_from_any_snapshot_answers_byte_for_byte_as_the_registry_did(
    before: list[tuple[Any, ...]], after: list[tuple[Any, ...]]
) -> None:
    """From each snapshot on, the lines rebuild a registry that answers exactly as the one
    that wrote them; and both keep answering alike as the same requests continue (a
    re-registration of a recovered broker changes what it would have changed)."""
    driven = Driven()
    driven.line(type="server_started", version="test", config={}, recovered=None)
    driven.snapshot()
    for member in MEMBERS:  # every group populated, so that each operation has something to do
        driven.register(member, [TopicConfig(t, 4, 4, 6) for t in TOPICS[:3]])
    for op in before:
        apply(driven, op)
    expected = answers(driven.routes)
    starts = [i for i, r in enumerate(driven.records) if r["type"] == "snapshot"]
    short = compacted(driven.records)  # as the journal writes heartbeats into one hour file
    for start in starts:
        copy = rebuilt(driven.records[start:])
        assert answers(copy) == expected, f"replayed from line {start}"
        assert answers(rebuilt(short[start:])) == expected, f"compact, from line {start}"
    # The newest base on: continue both with the same requests (connection closes aside:
    # a recovered broker has none until it registers again).
    recovered = Driven(routes=rebuilt(driven.records[starts[-1] :]), now=driven.now,
                       versions=dict(driven.versions))  # fmt: skip
    for op in after:
        if op[0] == "close":
            continue
        driven.events, recovered.events = [], []
        apply(driven, op)
        apply(recovered, op)
        assert_same_changes(recovered.events, driven.events)
    assert answers(recovered.routes) == answers(driven.routes)


def assert_same_changes(recovered: list[Any], driven: list[Any]) -> None:
    """The recovered registry's events are the driven one's, except that a provisional
    broker's first registration says so (``recovered``, docs/journal.md): it is journaled as
    a registration even where the driven registry, which kept the connection, only saw a
    heartbeat."""
    assert len(recovered) == len(driven)
    for mine, theirs in zip(
        (e.to_record() for e in recovered), (e.to_record() for e in driven), strict=True
    ):
        if mine.get("recovered"):
            assert mine["first"] is False
            assert (mine["cluster"], mine["broker_addr"]) == (
                theirs["cluster"],
                theirs["broker_addr"],
            )
            if theirs["type"] == "broker_heartbeat":
                continue
            mine = {**mine, "recovered": False}
        assert mine == theirs


def test_a_new_heartbeat_timeout_alone_is_journaled_and_replayed() -> None:
    """A broker that registers again with another heartbeatTimeoutMillis and nothing else
    changed: the journal must say so (a heartbeat line would lose it), or a recovered broker
    would expire on the old deadline."""
    driven = Driven()
    driven.snapshot()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)], timeout_ms=5_000)
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)], timeout_ms=60_000)
    assert [r["type"] for r in driven.records[-2:]] == ["broker_registered"] * 2
    assert driven.records[-1]["timeout_ms"] == 60_000
    routes = rebuilt(driven.records)
    assert routes.broker_live_table[("C1", MEMBERS[2].addr)].timeout_ms == 60_000
    assert routes.expire(T0 + 59_000) == ([], [])


# ---------------------------------------------------------------------------- provisional


def recovered_registry(timeout_ms: int = 10_000) -> tuple[Driven, RouteInfoManager]:
    driven = Driven()
    member = MEMBERS[2]
    driven.register(member, [TopicConfig("TopicA", 4, 4, 6)], timeout_ms=timeout_ms)
    driven.snapshot()
    return driven, rebuilt(driven.records)


def test_recovered_broker_is_provisional_and_no_connection_close_removes_it() -> None:
    driven, routes = recovered_registry()
    member = MEMBERS[2]
    assert routes.provisional_count == 1 and routes.is_provisional(member.cluster, member.addr)
    assert routes.broker_live_table[(member.cluster, member.addr)].channel is RECOVERED
    for channel in (object(), RECOVERED, driven.channel(member)):
        assert routes.on_channel_closed(channel, "channel_closed") == []
    assert routes.route_body("TopicA", True, None) is not None


def test_recovered_broker_expires_at_its_recorded_deadline() -> None:
    _, routes = recovered_registry(timeout_ms=10_000)
    deadline = T0 + 10_000
    assert routes.expire(deadline) == ([], [])  # at the deadline it is still live
    events, channels = routes.expire(deadline + 1)
    [removed] = [e for e in events if isinstance(e, BrokerRemoved)]
    assert (removed.reason, removed.last_heartbeat_ts) == ("expired", T0)
    assert channels == []  # no connection to close: RECOVERED is none
    assert routes.route_body("TopicA", True, None) is None
    assert routes.provisional_count == 0


def test_a_registration_makes_a_recovered_broker_normal() -> None:
    _, routes = recovered_registry()
    member, channel = MEMBERS[2], object()
    routes.register_broker(
        cluster=member.cluster, broker_addr=member.addr, broker_name=member.group,
        broker_id=0, ha_server_addr=None, body_digest=None,
        load_body=lambda: RegisterBrokerBody(DataVersion(T0 - 1000, 1),
                                             [TopicConfig("TopicA", 4, 4, 6)], []),
        channel=channel, now_ms=T0 + 5_000, heartbeat_timeout_ms=10_000,
    )  # fmt: skip
    assert routes.provisional_count == 0
    assert routes.expire(T0 + 10_001) == ([], [])  # its deadline moved with the registration
    [removed] = routes.on_channel_closed(channel, "channel_closed")[:1]
    assert isinstance(removed, BrokerRemoved) and removed.reason == "channel_closed"


def test_a_heartbeat_refreshes_a_provisional_broker_without_making_it_normal() -> None:
    _, routes = recovered_registry(timeout_ms=10_000)
    member = MEMBERS[2]
    routes.broker_heartbeat(member.cluster, member.addr, T0 + 8_000)
    assert routes.expire(T0 + 10_001) == ([], [])
    assert routes.is_provisional(member.cluster, member.addr)
    assert routes.expire(T0 + 18_001)[0]


# ---------------------------------------------------------------------------- restarts


def test_start_of_a_run_that_recovered_drops_what_expired_and_keeps_the_rest() -> None:
    driven = Driven()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)], timeout_ms=5_000)
    driven.register(MEMBERS[4], [TopicConfig("TopicB", 4, 4, 6)], timeout_ms=60_000)
    driven.snapshot()
    driven.now += 10_000
    driven.line(type="server_started", version="t", config={}, recovered={"brokers": 1})
    routes = rebuilt(driven.records)
    assert [live.broker_name for live in routes.broker_live_table.values()] == ["g2"]
    assert routes.all_topics() == ["TopicB"]
    driven.now += 60_000
    driven.line(type="server_started", version="t", config={}, recovered={"brokers": 1})
    routes = rebuilt(driven.records)
    assert routes.broker_live_table == {} and routes.all_topics() == []


def test_start_of_a_run_that_began_empty_empties_the_table() -> None:
    driven = Driven()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)])
    driven.line(type="server_started", version="t", config={}, recovered=None)
    driven.register(MEMBERS[4], [TopicConfig("TopicB", 4, 4, 6)])
    routes = rebuilt(driven.records)
    assert routes.all_topics() == ["TopicB"] and len(routes.broker_live_table) == 1


def test_lines_of_other_types_change_nothing() -> None:
    driven, _ = recovered_registry()
    expected = answers(rebuilt(driven.records))
    for extra in (
        {"type": "route_queries", "window_ms": 60000, "counts": {"TopicA": 1}, "misses": {}},
        {"type": "kv_changed", "namespace": "N", "key": "k", "op": "put"},
        {"type": "min_broker_id_changed", "cluster": "C1", "broker_name": "g1"},
        {"type": "server_stopped", "version": "t", "config": {}},
        {"type": "a_type_added_later", "brokers": "not even a list"},
    ):
        driven.line(**extra)
    assert answers(rebuilt(driven.records)) == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "broker_registered", "cluster": "C1", "broker_name": 5},
        {
            "type": "broker_removed",
            "cluster": "C1",
            "broker_name": "g1",
            "broker_id": "0",
            "broker_addr": "a:1",
        },
        {"type": "perm_changed", "broker_name": "g1", "op": "drop"},
        {"type": "topic_queues_changed", "topic": "T", "queues": [{"broker_name": "g1"}]},
        {"type": "snapshot", "brokers": {}, "topics": {}},
        {"type": "broker_heartbeat", "cluster": "C1", "broker_addr": "a:1", "ts": True},
    ],
)
def test_a_line_without_the_documented_shape_is_an_error(bad: dict[str, Any]) -> None:
    with pytest.raises(RecordError):
        replay([{"ts": T0, **bad}], RouteInfoManager())


# ---------------------------------------------------------------------------- the files


def write_hour(path: Path, records: list[dict[str, Any]], *, torn: bytes = b"") -> None:
    data = b"".join(orjson.dumps(r) + b"\n" for r in records) + torn
    if path.name.endswith(".gz"):
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)


def journal_of(driven: Driven) -> list[dict[str, Any]]:
    return [{"seq": i + 1, **r} for i, r in enumerate(driven.records)]


def test_read_tail_starts_at_the_last_snapshot_across_hour_files(tmp_path: Path) -> None:
    driven = Driven()
    driven.line(type="server_started", version="t", config={}, recovered=None)
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)])
    driven.snapshot()
    driven.register(MEMBERS[4], [TopicConfig("TopicB", 2, 2, 6)])
    driven.snapshot()
    driven.emit(driven.routes.wipe_write_perm("g1")[1])
    lines = journal_of(driven)
    split = len(lines) - 1  # the wipe lands in the next hour's file
    write_hour(tmp_path / "events-20231114-22.jsonl.gz", lines[:split])
    write_hour(tmp_path / "events-20231114-23.jsonl", lines[split:], torn=b'{"ts":1,"ns')
    tail = read_tail(tmp_path, NS)
    assert tail is not None
    assert [r["type"] for r in tail] == ["snapshot", "perm_changed"]
    assert answers(rebuilt(tail)) == answers(driven.routes)


def test_a_torn_snapshot_ended_by_the_next_start_falls_back_to_the_one_before(
    tmp_path: Path,
) -> None:
    driven = Driven()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)])
    driven.snapshot()
    driven.register(MEMBERS[4], [TopicConfig("TopicB", 2, 2, 6)])
    driven.snapshot()
    lines = [orjson.dumps(r) + b"\n" for r in journal_of(driven)]
    lines[-1] = lines[-1][: len(lines[-1]) // 2] + b"\n"  # torn, then ended by a restart
    (tmp_path / "events-20231114-22.jsonl").write_bytes(b"".join(lines))
    tail = read_tail(tmp_path)
    assert tail is not None and [r["type"] for r in tail] == ["snapshot", "broker_registered"]
    assert answers(rebuilt(tail)) == answers(driven.routes)


def test_every_snapshot_of_a_file_unusable_reads_the_file_again_whole(tmp_path: Path) -> None:
    driven = Driven()
    driven.line(type="server_started", version="t", config={}, recovered=None)
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)])
    for _ in range(3):
        driven.snapshot()
    records = journal_of(driven)
    for record in records[-3:]:
        record["ns"] = "another:9876"  # written by another instance: not ours to use
    write_hour(tmp_path / "events-20231114-22.jsonl", records)
    tail = read_tail(tmp_path, NS)
    assert tail is not None and [r["type"] for r in tail] == ["server_started", "broker_registered"]
    assert answers(rebuilt(tail)) == answers(driven.routes)


def test_no_base_left_means_nothing_to_recover(tmp_path: Path) -> None:
    driven = Driven()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)])  # its snapshot was deleted
    write_hour(tmp_path / "events-20231114-22.jsonl", journal_of(driven))
    assert read_tail(tmp_path, NS) is None
    assert read_tail(tmp_path / "missing", NS) is None
    routes = RouteInfoManager()
    assert recover(tmp_path, routes, T0, NS) is None
    assert routes.all_topics() == []


def test_recover_drops_brokers_past_their_deadline_and_counts_them(tmp_path: Path) -> None:
    driven = Driven()
    driven.register(MEMBERS[2], [TopicConfig("TopicA", 4, 4, 6)], timeout_ms=5_000)
    driven.register(MEMBERS[4], [TopicConfig("TopicB", 2, 2, 6)], timeout_ms=60_000)
    driven.snapshot()
    write_hour(tmp_path / "events-20231114-22.jsonl", journal_of(driven))

    routes = RouteInfoManager()
    found = recover(tmp_path, routes, T0 + 10_000, NS)
    assert found is not None
    assert found.to_record() | {"load_ms": 0} == {
        "from_ts": T0, "snapshot_ts": T0, "events": 0, "brokers": 1, "topics": 1,
        "expired_on_load": 1, "load_ms": 0,
    }  # fmt: skip
    assert routes.all_topics() == ["TopicB"] and routes.provisional_count == 1

    routes = RouteInfoManager()
    found = recover(tmp_path, routes, T0 + 60_001, NS)  # down longer than every timeout
    assert found is not None and (found.brokers, found.expired_on_load) == (0, 2)
    assert routes.all_topics() == [] and routes.broker_addr_table == {}


def test_recover_skips_a_malformed_line_counts_it_and_serves_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It gave up and started empty (issue 23: a damaged journal is counted, never fatal, and
    what survived is served)."""
    driven, _ = recovered_registry()
    expected = answers(driven.routes)
    driven.line(type="perm_changed", broker_name="g1", op="drop", topic_count=1)
    write_hour(tmp_path / "events-20231114-22.jsonl", journal_of(driven))
    routes, damage = RouteInfoManager(), JournalDamage()
    with caplog.at_level(logging.WARNING, logger="pynamesrv"):
        assert recover(tmp_path, routes, T0, NS, damage) is not None
    assert damage.to_record() == {"lines_invalid": 1}
    assert answers(routes) == expected
    assert "damaged" in caplog.text and "1 invalid line skipped" in caplog.text
