"""A registration's topics into the tables, its event and its journal line, against the plain
forms they stand for.

The registry applies a body's routed rows with shortcuts (a topic new to the table, QueueData
equality without building one), keeps the event's topic configs as the applied rows
(``QueueConfigs``), drops cached answers in bulk, and the journal encodes a registration's
line on its writer thread. Each must come to what the plain loop, a dict, a per-topic drop
and an encode at record time come to.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv.events import BrokerRegistered, QueueConfigs
from pynamesrv.namesrv.journal import Journal, encode_line, journal_files, read_records
from pynamesrv.namesrv.model import DataVersion, QueueData, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.routes import RouteInfoManager

CLUSTER = "C"

_configs = st.builds(
    TopicConfig,
    st.sampled_from(["A", "B", "C", "D", "E"]),  # few names: repeats, overlaps, duplicates
    st.integers(0, 1),  # few values: a re-registration often repeats, or changes one field
    st.integers(0, 1),
    st.sampled_from([6, 7]),
    st.integers(0, 1),
)
# A registration: which group sends it, its topics (a list may name a topic twice), and
# whether its data version is new.
_registrations = st.lists(
    st.tuples(st.sampled_from(["g1", "g2"]), st.lists(_configs, max_size=6), st.booleans()),
    min_size=1,
    max_size=8,
)


def _reference_apply(
    table: dict[str, dict[str, QueueData]],
    configs: list[TopicConfig],
    group: str,
    take_all: bool,
) -> tuple[list[str], list[str], dict[str, dict[str, int]]]:
    """The registry's loop as it was written before the shortcuts: a QueueData per topic,
    compared whole, and a dict per applied topic."""
    added: list[str] = []
    changed: list[str] = []
    applied: dict[str, dict[str, int]] = {}
    for config in configs:
        queues = table.get(config.topic_name)
        present = queues.get(group) if queues is not None else None
        if not take_all and present is not None:
            continue
        queue_data = QueueData(
            group, config.read_queue_nums, config.write_queue_nums, config.perm,
            config.topic_sys_flag,
        )  # fmt: skip
        if present is None:
            added.append(config.topic_name)
        elif present == queue_data:
            continue
        else:
            changed.append(config.topic_name)
        table.setdefault(config.topic_name, {})[group] = queue_data
        applied[config.topic_name] = {
            "read": config.read_queue_nums, "write": config.write_queue_nums,
            "perm": config.perm, "sys_flag": config.topic_sys_flag,
        }  # fmt: skip
    return added, changed, applied


@settings(max_examples=200, deadline=None)
@given(registrations=_registrations)
def test_registrations_change_tables_and_events_as_the_plain_loop_does(
    registrations: list[tuple[str, list[TopicConfig], bool]],
) -> None:
    routes = RouteInfoManager()
    reference: dict[str, dict[str, QueueData]] = {}
    versions = {"g1": 0, "g2": 0}
    channel = object()
    for group, configs, new_version in registrations:
        first = versions[group] == 0
        if new_version or first:
            versions[group] += 1
        body = RegisterBrokerBody(DataVersion(1, versions[group]), configs, [])
        raw = body.encode(compressed=False)
        result = routes.register_broker(
            cluster=CLUSTER,
            broker_addr=f"{group}:1",
            broker_name=group,
            broker_id=0,
            ha_server_addr=None,
            body_digest=None,
            load_body=lambda raw=raw: RegisterBrokerBody.decode(raw, compressed=False, version=401),
            channel=channel,
            now_ms=0,
        )
        # A JSON body lists each topic once: its table keeps the last entry of a name.
        listed = list({c.topic_name: c for c in configs}.values())
        added, changed, applied = _reference_apply(
            reference, listed, group, take_all=first or new_version
        )
        assert routes.topic_queue_table == reference
        events = [e for e in result.events if isinstance(e, BrokerRegistered)]
        if events:
            (event,) = events
            assert (event.topics_added, event.topics_changed) == (added, changed)
            assert dict(event.topic_configs) == applied
            assert event.to_record()["topic_configs"] == applied
            assert type(event.to_record()["topic_configs"]) is dict
        else:
            assert (added, changed) == ([], [])


def test_a_topic_listed_twice_keeps_its_first_place_and_last_values() -> None:
    """A compressed body can name a topic twice; a dict filled row by row keeps the key where
    it first went and the value it last got."""
    configs = QueueConfigs([("A", 1, 1, 6, 0), ("B", 2, 2, 6, 0), ("A", 3, 3, 7, 1)])
    assert list(configs) == ["A", "B"]
    assert configs["A"] == {"read": 3, "write": 3, "perm": 7, "sys_flag": 1}
    assert configs == {"A": {"read": 3, "write": 3, "perm": 7, "sys_flag": 1},
                       "B": {"read": 2, "write": 2, "perm": 6, "sys_flag": 0}}  # fmt: skip
    assert len(configs) == 2


def test_queue_configs_show_the_perm_the_registry_applied() -> None:
    configs = QueueConfigs([("A", 1, 1, 6, 0)], perm_mask=~2)  # a prime slave: no write bit
    assert configs["A"]["perm"] == 4


_rows = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "C", "D"]),  # a name listed twice in one registration too
        st.integers(1, 2),
        st.integers(1, 2),
        st.sampled_from([2, 4, 6]),
        st.integers(0, 1),
    ),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    applies=st.lists(
        st.tuples(st.sampled_from(["g1", "g2"]), _rows, st.sampled_from([-1, ~2]), st.booleans()),
        min_size=1,
        max_size=6,
    )
)
def test_rows_applied_a_column_at_a_time_fill_the_table_as_row_by_row(
    applies: list[tuple[str, list[tuple[str, int, int, int, int]], int, bool]],
) -> None:
    """A registration read back (a journal line, a worker's stream) is applied from its
    columns (``QueueConfigs.columns``, ``from_columns`` as the stream carries them): the
    table must be what the plain loop makes, key order and shared queue data included."""
    routes = RouteInfoManager()
    reference: dict[str, dict[str, QueueData]] = {}
    for group, rows, mask, as_columns in applies:
        configs = QueueConfigs(rows, mask)  # type: ignore[arg-type]
        if as_columns:
            configs = QueueConfigs.from_columns(*configs.columns(), mask)
            assert configs.rows == rows
        routes._write_configs(group, configs)
        for topic, read, write, perm, flag in rows:
            queues = reference.setdefault(topic, {})
            queues[group] = QueueData(group, read, write, perm & mask, flag)
        assert routes.topic_queue_table == reference
        assert list(routes.topic_queue_table) == list(reference)
        for topic, queues in reference.items():
            assert list(routes.topic_queue_table[topic]) == list(queues)
            for group_name, queue_data in queues.items():  # one object per group and values
                shared = routes.queue_datas_of(group_name)[
                    (queue_data.read_queue_nums, queue_data.write_queue_nums,
                     queue_data.perm, queue_data.topic_sys_flag)
                ]  # fmt: skip
                assert routes.topic_queue_table[topic][group_name] is shared


def _cached_routes(topics: int) -> RouteInfoManager:
    routes = RouteInfoManager()
    body = RegisterBrokerBody(
        DataVersion(1, 1), [TopicConfig(f"T{i}", 2, 2, 6) for i in range(topics)], []
    )
    routes.register_broker(
        cluster=CLUSTER, broker_addr="a:1", broker_name="a", broker_id=0, ha_server_addr=None,
        body_digest=None, load_body=lambda: body, channel=object(), now_ms=0,
    )  # fmt: skip
    for i in range(0, topics, 3):
        routes.route_body(f"T{i}", True, None)
        routes.route_body(f"T{i}", i % 2 == 0, None)
        routes.route_body(f"T{i}", True, None, zone="z1")
    return routes


def test_many_topics_drop_the_same_cached_answers_as_one_by_one() -> None:
    bulk, one_by_one = _cached_routes(60), _cached_routes(60)
    gone = {f"T{i}" for i in range(0, 60, 2)} | {f"X{i}" for i in range(100)}
    bulk.answers.invalidate(gone)  # more topics than cached answers: matched against them
    one_by_one.answers.invalidate(list(gone))  # a list: topic by topic
    assert list(bulk.answers._route_cache) == list(one_by_one.answers._route_cache)
    assert list(bulk.answers.zone_route_cache) == list(one_by_one.answers.zone_route_cache)
    assert bulk.answers.route_generation == one_by_one.answers.route_generation
    remaining = {topic for topic, _ in bulk.answers._route_cache}
    assert remaining and not remaining & gone


def test_a_registration_line_encoded_by_the_writer_is_the_line_of_its_event(
    tmp_path: Path,
) -> None:
    event = BrokerRegistered(
        "C", "a", 0, "a:1", None, True, {"counter": 1, "timestamp": 2}, ["A", "B"],
        topic_count=2, topic_configs=QueueConfigs([("A", 1, 1, 6, 0), ("B", 2, 2, 6, 1)]),
    )  # fmt: skip
    ts = 1_795_000_000_000

    async def run() -> None:
        journal = Journal(tmp_path, "h:1", clock_ms=lambda: ts, flush_interval_s=3600)
        await journal.start()
        journal.record("kv_changed", namespace="n", key="k", op="put")
        journal.on_events([event])
        journal.record("kv_changed", namespace="n", key="k2", op="put")
        await journal.stop()

    asyncio.run(run())
    (file,) = journal_files(tmp_path)
    lines = file.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    payload = event.to_record()
    assert lines[1] == encode_line(ts, "h:1", 2, payload.pop("type"), payload)
    records = list(read_records([file]))
    assert [r["seq"] for r in records] == [1, 2, 3], "in the order recorded"
    assert records[1]["topic_configs"] == {
        "A": {"read": 1, "write": 1, "perm": 6, "sys_flag": 0},
        "B": {"read": 2, "write": 2, "perm": 6, "sys_flag": 1},
    }
    assert orjson.loads(lines[1])["topics_added"] == ["A", "B"]


def test_events_are_journaled_at_the_millisecond_the_tables_applied_them(tmp_path: Path) -> None:
    """A line read back is applied as of its ``ts``: it must be the apply's time, not the
    moment the journal got the event (the clock may have ticked in between), or a warm
    restart rebuilds a broker with another last-heartbeat time than the live one had."""
    applied_at, journal_clock = 1_795_000_000_000, 1_795_000_000_007
    registry = RouteInfoManager()
    body = RegisterBrokerBody(DataVersion(1, 1), [TopicConfig("A", 1, 1, 6, 0)], [])
    events = registry.register_broker(
        cluster=CLUSTER, broker_addr="a:1", broker_name="a", broker_id=0, ha_server_addr=None,
        body_digest=None, load_body=lambda: body, channel=object(), now_ms=applied_at,
    ).events  # fmt: skip
    events += registry.broker_heartbeat(CLUSTER, "a:1", applied_at + 30_000)

    async def run() -> None:
        journal = Journal(tmp_path, "h:1", clock_ms=lambda: journal_clock, flush_interval_s=3600)
        await journal.start()
        journal.on_events(events)
        await journal.stop()

    asyncio.run(run())
    records = list(read_records(journal_files(tmp_path)))
    assert [(r["type"], r["ts"]) for r in records] == [
        ("broker_registered", applied_at),
        ("broker_heartbeat", applied_at + 30_000),
    ]
