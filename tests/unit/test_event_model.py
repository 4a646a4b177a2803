"""One event model (issue 23): every journal line type is an event class, every reader derives
its list from them, lines read back are checked, a broker's timeout is bounded, and a damaged
journal is recovered from, never a crash."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pynamesrv.cli import journal as journal_cli
from pynamesrv.namesrv import events, journal, recovery
from pynamesrv.namesrv.events import BrokerRegistered, RecordError
from pynamesrv.namesrv.journal import JournalDamage, encode_line, instance_dir_name
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.routes.tables import MAX_BROKER_TIMEOUT_MS

T0 = 1_700_000_000_000
NS = "10.0.0.1:9876"
LONG_MAX = 2**63 - 1
TYPES = [cls.TYPE for cls in events.event_classes()]


def test_every_reader_lists_the_line_types_of_the_event_classes() -> None:
    assert len(set(TYPES)) == len(TYPES)
    assert list(journal.LINE_TYPES) == TYPES
    assert set(journal_cli._SHOWN) == set(TYPES)  # journal tail shows every type
    assert set(TYPES) >= recovery.REPLAYED
    assert {"broker_registered", "broker_recovered", "snapshot"} <= recovery.REPLAYED


def register(
    routes: RouteInfoManager,
    now: int,
    *,
    timeout_ms: int | None = None,
    topics: tuple[str, ...] = ("T",),
    counter: int = 1,
    delete_missing: bool = False,
) -> list[Any]:
    body = RegisterBrokerBody(
        DataVersion(T0, counter), [TopicConfig(t, 4, 4, 6) for t in topics], []
    )
    raw = body.encode(compressed=False)
    return routes.register_broker(
        cluster="C",
        broker_addr="10.0.0.5:10911",
        broker_name="b",
        broker_id=0,
        ha_server_addr=None,
        body_digest=hash(raw),
        load_body=lambda: RegisterBrokerBody.decode(raw, compressed=False, version=453),
        channel=None,
        now_ms=now,
        heartbeat_timeout_ms=timeout_ms,
        delete_missing_topics=delete_missing,
    ).events


@pytest.mark.parametrize(
    ("asked", "kept"), [(LONG_MAX, MAX_BROKER_TIMEOUT_MS), (-5, 1), (0, 120_000), (30_000, 30_000)]
)
def test_a_heartbeat_timeout_is_clamped_when_registered_and_journaled_so(
    asked: int, kept: int
) -> None:
    routes = RouteInfoManager()
    (event,) = register(routes, T0, timeout_ms=asked)
    assert routes.broker_live_table[("C", "10.0.0.5:10911")].timeout_ms == kept
    assert event.to_record()["timeout_ms"] == kept


def test_a_recovered_broker_with_a_huge_timeout_still_expires() -> None:
    """Finding 6: a line recorded before the clamp, Long.MAX ms: clamped again when read back,
    so the provisional broker leaves and /healthz stops saying "recovering"."""
    routes = RouteInfoManager()
    (event,) = register(routes, T0)
    line = {"ts": T0, "ns": NS, **event.to_record(), "timeout_ms": LONG_MAX}
    rebuilt = RouteInfoManager()
    recovery.replay([{"ts": T0, "type": "server_started", "recovered": None}, line], rebuilt)
    assert rebuilt.provisional_count == 1
    rebuilt.expire(T0 + MAX_BROKER_TIMEOUT_MS + 1)
    assert rebuilt.provisional_count == 0
    assert rebuilt.pickup_route("T") is None


def test_an_event_reads_back_as_written_and_refuses_a_wrong_shape() -> None:
    routes = RouteInfoManager()
    (event,) = register(routes, T0)
    record = orjson.loads(orjson.dumps(event.to_record()))
    assert BrokerRegistered.from_record(record).to_record() == record
    bad_entries = [
        {**record, "broker_id": "0"},
        {**record, "broker_id": True},
        {**record, "broker_id": 2**64},
        {**record, "topic_configs": {"T": [1, 2]}},  # the AttributeError of finding 5
        {**record, "topic_configs": {"T": {"read": 2**40, "write": 1, "perm": 6}}},
        {**record, "data_version": {"counter": "x"}},
        {**record, "topics_added": [1]},
        {k: v for k, v in record.items() if k != "cluster"},
    ]
    for bad in bad_entries:
        with pytest.raises(RecordError):
            BrokerRegistered.from_record(bad)


# ---------------------------------------------------------------------------- damaged journals


def write_journal(directory: Path) -> None:
    """A journal as a server writes it: start, snapshot, three brokers registered and one of
    them heartbeating, in one plain hour file and one archived hour."""
    routes = RouteInfoManager()
    lines = [encode_line(T0, NS, 1, "server_started", {"version": "t", "config": {},
                                                       "recovered": None})]  # fmt: skip
    lines.append(encode_line(T0, NS, 2, "snapshot", routes.snapshot()))
    seq = 3
    for i in range(3):
        body = RegisterBrokerBody(DataVersion(T0, 1), [TopicConfig(f"T{i}", 4, 4, 6)], [])
        raw = body.encode(compressed=False)
        for event in routes.register_broker(
            cluster="C",
            broker_addr=f"10.0.0.{i}:10911",
            broker_name=f"b{i}",
            broker_id=0,
            ha_server_addr=None,
            body_digest=None,
            load_body=lambda raw=raw: RegisterBrokerBody.decode(raw, compressed=False, version=453),
            channel=object(),
            now_ms=T0 + i,
        ).events:
            payload = event.to_record()
            lines.append(encode_line(T0 + i, NS, seq, payload.pop("type"), payload))
            seq += 1
    directory.mkdir(parents=True, exist_ok=True)
    hour = journal.hour_file_name(T0)
    (directory / hour).write_bytes(b"".join(lines[:4]))
    import gzip

    next_hour = journal.hour_file_name(T0 + journal.HOUR_MS)
    (directory / (next_hour + ".gz")).write_bytes(gzip.compress(b"".join(lines[4:])))


def test_an_invalid_line_is_skipped_and_counted_and_the_rest_recovered(tmp_path: Path) -> None:
    """Finding 5: a ``topic_configs`` entry that is not an object raised AttributeError at
    every start. Now that line is skipped, counted, and the other brokers are routed."""
    directory = tmp_path / instance_dir_name(NS)
    write_journal(directory)
    plain = next(directory.glob("*.jsonl"))
    lines = plain.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[-1])
    assert record["type"] == "broker_registered"
    record["topic_configs"] = {"T1": "not an object"}  # b1's registration
    plain.write_bytes(b"".join([*lines[:-1], orjson.dumps(record) + b"\n"]))
    routes, damage = RouteInfoManager(), JournalDamage()
    found = recovery.recover(directory, routes, T0 + 10, NS, damage)
    assert found is not None and found.brokers == 2
    assert damage.to_record() == {"lines_invalid": 1}
    assert routes.pickup_route("T1") is None
    assert routes.pickup_route("T0") is not None and routes.pickup_route("T2") is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(["flip", "cut", "insert"]),
            st.integers(0, 1),  # which file: the plain hour or the archive
            st.floats(0, 1),  # where in it
            st.binary(min_size=1, max_size=8),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_journal_damaged_at_the_byte_level_is_recovered_from_never_fatal(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[str, int, float, bytes]]
) -> None:
    """Bytes flipped, cut and inserted anywhere in the plain hour and the archived one: the
    recovery returns (whatever survived), the routes it rebuilt answer, and the damage it
    met is counted rather than raised."""
    base = tmp_path_factory.mktemp("journal")
    source = base / "source"
    write_journal(source)
    directory = base / instance_dir_name(NS)
    shutil.copytree(source, directory)
    files = sorted(directory.iterdir())
    for op, which, where, data in edits:
        file = files[which % len(files)]
        content = bytearray(file.read_bytes())
        at = min(int(where * len(content)), max(len(content) - 1, 0))
        if op == "flip" and content:
            content[at] ^= data[0] or 1
        elif op == "cut":
            del content[at : at + len(data) * 16]
        else:
            content[at:at] = data
        file.write_bytes(bytes(content))
    routes, damage = RouteInfoManager(), JournalDamage()
    found = recovery.recover(directory, routes, T0 + 10, NS, damage)
    for topic in ("T0", "T1", "T2"):
        routes.pickup_route(topic)  # answers (a route or none), never raises
    if found is not None:
        assert found.brokers == len(routes.broker_live_table) <= 3


def test_a_registration_that_drops_topics_counts_what_the_group_keeps() -> None:
    """deleteTopicWithBrokerRegistration: the decision counts the group's topics as its
    apply leaves them, the dropped ones gone (its events are applied after it)."""
    routes = RouteInfoManager()

    def registration(topics: list[str], counter: int) -> list[Any]:
        return register(routes, T0, topics=tuple(topics), counter=counter, delete_missing=True)

    assert registration(["T1", "T2", "T3"], 1)[0].topic_count == 3
    registered, *drops = registration(["T1", "T4"], 2)
    assert (registered.topic_count, registered.topics_removed) == (2, ["T2", "T3"])
    assert [d.TYPE for d in drops] == ["topic_removed", "topic_removed"]
    assert sorted(routes.all_topics()) == ["T1", "T4"]


def _group(routes: RouteInfoManager, name: str, addr: str, topics: list[str]) -> None:
    body = RegisterBrokerBody(DataVersion(T0, 1), [TopicConfig(t, 4, 4, 6) for t in topics], [])
    raw = body.encode(compressed=False)
    routes.register_broker(
        cluster="C",
        broker_addr=addr,
        broker_name=name,
        broker_id=0,
        ha_server_addr=None,
        body_digest=hash(raw),
        load_body=lambda: RegisterBrokerBody.decode(raw, compressed=False, version=453),
        channel=name,
        now_ms=T0,
    )


def test_a_groups_removal_is_one_line_that_takes_its_topics_old_journals_read_alike() -> None:
    """A group's last address leaving is one ``broker_removed`` (however many topics it had):
    read back, it leaves the tables the live removal left, and so does the older shape (the
    same line followed by a ``topic_removed`` per topic that lost its last route)."""
    live = RouteInfoManager()
    _group(live, "a", "10.0.0.5:10911", [f"T{i}" for i in range(1_000)])
    _group(live, "b", "10.0.0.6:10911", ["T0", "T1", "B"])  # shares two of a's topics
    before = live.snapshot()
    events_ = live.on_channel_closed("a", "channel_closed")
    assert [e.TYPE for e in events_] == ["broker_removed"]
    [removed] = events_
    assert (removed.group_gone, removed.topics_gone) == (True, 998)
    assert sorted(live.all_topics()) == ["B", "T0", "T1"]
    assert live.pickup_route("T5") is None

    line = {"ts": T0 + 1, **removed.to_record()}
    old_shape = [
        {"ts": T0 + 1, "type": "broker_removed", "cluster": "C", "broker_name": "a",
         "broker_id": 0, "broker_addr": "10.0.0.5:10911", "reason": "channel_closed",
         "last_heartbeat_ts": T0},
        *({"ts": T0 + 1, "type": "topic_removed", "topic": f"T{i}", "reason": "no_broker"}
          for i in range(2, 1_000)),
    ]  # fmt: skip
    for lines in ([line], old_shape):
        replayed = RouteInfoManager()
        replayed.restore_snapshot({"ts": T0, "type": "snapshot", **before})
        for record in lines:
            replayed.apply_record(record)
        assert replayed.snapshot() == live.snapshot()
        assert sorted(replayed.all_topics()) == ["B", "T0", "T1"]


def test_journal_tail_says_what_a_groups_last_removal_took() -> None:
    line = {"ts": T0, "ns": "h:1", "seq": 3, "type": "broker_removed", "cluster": "C",
            "broker_name": "b", "broker_id": 0, "broker_addr": "10.0.0.5:10911",
            "reason": "channel_closed", "last_heartbeat_ts": T0}  # fmt: skip
    older = journal_cli.render(line).plain  # a journal before group_gone
    assert "reason=channel_closed" in older and "group gone" not in older
    shown = journal_cli.render(line | {"group_gone": True, "topics_gone": 110_000}).plain
    assert "group gone, topics without route=110000" in shown
