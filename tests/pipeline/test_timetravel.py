"""routes-at: the route table an instance held at T, rebuilt from snapshots and events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.cli.pipeline import parse_time, pipeline
from pynamesrv.namesrv.events import BrokerHeartbeat
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.timetravel import route_digest, routes_at, table_digest
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import Version
from waiting import EventLog, wait_until

from .journals import (
    broker_recovered,
    heartbeat,
    ms,
    perm_changed,
    registered,
    removed,
    snapshot,
    started,
    topic_removed,
    warm_started,
    write_journal,
)
from .test_real_server import now_ms, query_route

A1, A2, A3 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("timetravel")
    write_journal(
        root,
        "r:1",
        [
            started(0),
            snapshot(0, {"T": [("bA", 4, 4, 6)]}, brokers=[("C", "bA", 0, A1)]),
            registered(10, "C", "bB", A2, added={"T": (8, 8, 6), "V": (2, 2, 6)}),
            registered(20, "C", "bB", A3, broker_id=1),  # bB's slave
            heartbeat(25, "C", "bA", A1),
            perm_changed(30, "bA", "wipe"),
            removed(40, "C", "bB", A2, "unregister", 25),  # the slave keeps bB's queues
            removed(50, "C", "bB", A3, "expired", 20, broker_id=1),
            topic_removed(50, "V"),
            snapshot(100, {"T": [("bA", 4, 4, 4)]}, brokers=[("C", "bA", 0, A1)]),
            started(200),  # a restart: the table starts empty
            registered(210, "C", "bA", A1, added={"T": (4, 4, 6)}),
        ],
    )
    write_journal(root, "s:1", [started(0), registered(5, "D", "bD", A1, added={"W": (1, 1, 6)})])
    return root


def route(brokers: list[tuple[str, str, dict[str, str]]], queues: list[tuple]) -> dict:
    return {
        "brokerDatas": [
            {"brokerAddrs": addrs, "brokerName": name, "cluster": cluster}
            for cluster, name, addrs in brokers
        ],
        "queueDatas": [
            {"brokerName": n, "perm": p, "readQueueNums": r, "writeQueueNums": w}
            for n, r, w, p in queues
        ],
    }


def test_routes_at_replays_events_after_the_last_snapshot(
    spark: SparkSession, journal: Path
) -> None:
    at = {
        t: routes_at(spark, [str(journal)], ms(t), instance="r:1")["r:1"] for t in (15, 35, 45, 50)
    }
    assert at[15] == {
        "T": route(
            [("C", "bA", {"0": A1}), ("C", "bB", {"0": A2})],
            [("bA", 4, 4, 6), ("bB", 8, 8, 6)],
        ),
        "V": route([("C", "bB", {"0": A2})], [("bB", 2, 2, 6)]),
    }
    assert at[35]["T"] == route(
        [("C", "bA", {"0": A1}), ("C", "bB", {"0": A2, "1": A3})],
        [("bA", 4, 4, 4), ("bB", 8, 8, 6)],  # bA's write perm wiped at 30
    )
    assert at[45]["V"] == route([("C", "bB", {"1": A3})], [("bB", 2, 2, 6)])
    assert at[50] == {"T": route([("C", "bA", {"0": A1})], [("bA", 4, 4, 4)])}  # T inclusive


def test_routes_at_starts_empty_after_a_restart_and_covers_every_instance(
    spark: SparkSession, journal: Path
) -> None:
    assert routes_at(spark, [str(journal)], ms(205), instance="r:1") == {"r:1": {}}
    both = routes_at(spark, [str(journal)], ms(300))
    assert both["r:1"] == {"T": route([("C", "bA", {"0": A1})], [("bA", 4, 4, 6)])}
    assert both["s:1"] == {"W": route([("D", "bD", {"0": A1})], [("bD", 1, 1, 6)])}


def test_routes_at_reads_the_lines_of_a_warm_restart(spark: SparkSession, tmp_path: Path) -> None:
    """routes-at selects only the columns routes need; a warm start's broker_recovered lines
    (which lack them: they restate what the start kept) must not stop it. Here the start's
    snapshot is missing (lines dropped at journalMaxBytes), so they follow the base."""
    write_journal(
        tmp_path,
        "w:1",
        [
            started(0),
            registered(10, "C", "bA", A1, added={"T": (4, 4, 6)}),
            warm_started(60, brokers=1),
            broker_recovered(60, "C", "bA", A1, last_heartbeat=10),
            registered(70, "C", "bA", A1, added={"U": (2, 2, 6)}),
        ],
    )
    after = routes_at(spark, [str(tmp_path)], ms(80))["w:1"]
    assert after["U"]["queueDatas"] == [
        {"brokerName": "bA", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2}
    ]


def test_route_digest_of_a_live_answer_equals_the_rebuilt_route() -> None:
    live = (
        b'{"brokerDatas":[{"brokerAddrs":{1:"10.0.0.3:10911",0:"10.0.0.2:10911"},'
        b'"brokerName":"bB","cluster":"C"},{"brokerAddrs":{0:"10.0.0.1:10911"},'
        b'"brokerName":"bA","cluster":"C"}],"filterServerTable":{},"orderTopicConf":null,'
        b'"queueDatas":[{"brokerName":"bB","perm":6,"readQueueNums":8,"topicSysFlag":0,'
        b'"writeQueueNums":8},{"brokerName":"bA","perm":4,"readQueueNums":4,'
        b'"topicSysFlag":0,"writeQueueNums":4}]}'
    )  # the legacy dialect: unquoted numeric keys, unsorted groups
    rebuilt = route(
        [("C", "bA", {"0": A1}), ("C", "bB", {"0": A2, "1": A3})],
        [("bA", 4, 4, 4), ("bB", 8, 8, 6)],
    )
    assert route_digest(live) == route_digest(fastjson.loads(live)) == route_digest(rebuilt)
    assert route_digest(rebuilt) != route_digest({**rebuilt, "queueDatas": []})
    assert len(table_digest({"T": rebuilt})) == 64


def test_routes_at_command_prints_routes_and_digests(spark: SparkSession, journal: Path) -> None:
    result = CliRunner().invoke(
        pipeline,
        ["routes-at", "--journal", str(journal), "--time", "2026-01-01T00:00:15Z",
         "--instance", "r:1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert set(answer) == {"r:1"}
    table = answer["r:1"]
    assert table["time"] == ms(15)
    assert set(table["topics"]) == {"T", "V"}
    for entry in table["topics"].values():
        assert entry["digest"] == route_digest(entry["body"])
    assert table["digest"] == table_digest({t: e["body"] for t, e in table["topics"].items()})
    assert json.loads(table["topics"]["V"]["body"])["brokerDatas"] == [
        {"brokerAddrs": {"0": A2}, "brokerName": "bB", "cluster": "C", "enableActingMaster": False}
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time", "2025-12-31T23:59:59Z"],
         "2025-12-31T23:59:59Z is before the journals: they cover 2026-01-01T00:00:00Z to "
         "2026-01-01T01:00:00Z"),
        (["--time", "2026-01-01T01:00:00Z", "--instance", "s:1"],
         "2026-01-01T01:00:00Z is after the journals of s:1: they cover 2026-01-01T00:00:00Z to "
         "2026-01-01T01:00:00Z"),
        (["--time", "1767225600000", "--instance", "nobody:1"],
         "no journal lines of nobody:1 at or before 2026-01-01T00:00:00Z"),
        (["--time", "0", "--raw"], "--raw prints one route body: give --topic"),
    ],
)  # fmt: skip
def test_routes_at_refuses_a_time_the_journals_do_not_cover(
    spark: SparkSession, journal: Path, args: list[str], message: str
) -> None:
    """Input mistakes are one line and exit code 2: a time before the first hour file or
    after the last (the server may have changed anything since, or stopped), an instance
    without lines, a --raw that would print several bodies."""
    result = CliRunner().invoke(pipeline, ["routes-at", "--journal", str(journal), *args])
    assert (result.exit_code, result.stderr) == (2, f"Error: {message}\n"), result.output


def test_routes_at_raw_wants_one_instance_when_several_route_the_topic(
    spark: SparkSession, tmp_path: Path
) -> None:
    for ns in ("a:1", "b:1"):
        write_journal(
            tmp_path, ns, [started(0), registered(5, "C", "bA", A1, added={"T": (1, 1, 6)})]
        )
    command = [
        "routes-at",
        "--journal",
        str(tmp_path),
        "--time",
        str(ms(10)),
        "--topic",
        "T",
        "--raw",
    ]
    result = CliRunner().invoke(pipeline, command)
    assert (result.exit_code, result.stderr) == (
        2, "Error: --raw prints one route body: T has one on a:1, b:1 (give --instance)\n"
    )  # fmt: skip
    one = CliRunner().invoke(pipeline, [*command, "--instance", "b:1"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout_bytes)["queueDatas"][0]["readQueueNums"] == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1767225600000", 1_767_225_600_000),
        ("2026-01-01T00:00:00Z", 1_767_225_600_000),
        ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
        ("2026-01-01 00:00:15.5", 1_767_225_615_500),
        ("2026-01-01", 1_767_225_600_000),
    ],
)
def test_times_are_epoch_ms_or_iso8601_in_utc(text: str, expected: int) -> None:
    assert parse_time(text) == expected


def test_replay_from_each_snapshot_reaches_the_next_one(tmp_path: Path) -> None:
    """The generator runs the real RouteInfoManager; every snapshot it journals must equal
    the previous snapshot (or start) plus the events in between, replayed."""
    from pynamesrv.namesrv.journal import journal_files, read_records
    from pynamesrv.pipeline.timetravel import replay
    from pynamesrv.testing import generate

    generate(tmp_path, brokers=12, instances=2, hours=2, seed=5)
    by_ns: dict[str, list[dict]] = {}
    for record in read_records(journal_files(tmp_path)):
        by_ns.setdefault(record["ns"], []).append(record)
    checked = 0
    for rows in by_ns.values():
        rows.sort(key=lambda r: (r["ts"], r["seq"]))
        base = None
        for i, row in enumerate(rows):
            if row["type"] == "server_started" and row.get("recovered") is None:
                base = i  # a run that began empty; a warm start goes on from the base before
            elif row["type"] == "snapshot" and base is not None:
                assert replay(rows[base:i]) == replay([row])
                base, checked = i, checked + 1
    assert checked >= 20


def test_replay_follows_admin_changes_of_topic_queues() -> None:
    """REGISTER_TOPIC_IN_NAMESRV and a one-cluster DELETE_TOPIC change routes without a
    registration; their journal events replay to the registry's own snapshot."""
    from pynamesrv.namesrv.model import DataVersion, QueueData, RegisterBrokerBody, TopicConfig
    from pynamesrv.namesrv.routes import RouteInfoManager
    from pynamesrv.pipeline.timetravel import replay, routes_of

    routes = RouteInfoManager()
    rows: list[dict] = [{"type": "server_started", "ts": 0, "seq": 0}]

    def journal(events: list) -> None:
        rows.extend({**event.to_record(), "ts": len(rows), "seq": len(rows)} for event in events)

    for name, cluster, addr in (("a", "C1", "10.0.0.1:1"), ("b", "C2", "10.0.0.2:1")):
        body = RegisterBrokerBody(DataVersion(1, 1), [TopicConfig("T", 4, 4, 6)], [])
        journal(
            routes.register_broker(
                cluster=cluster,
                broker_addr=addr,
                broker_name=name,
                broker_id=0,
                ha_server_addr=None,
                body_digest=1,
                load_body=lambda body=body: body,
                channel=name,
                now_ms=0,
            ).events
        )
    journal(
        routes.register_topic("Admin", [QueueData("a", 2, 2, 6, 0), QueueData("b", 1, 1, 6, 0)])
    )
    journal(routes.delete_topic("T", "C2"))
    journal(routes.delete_topic("Admin", "C1"))
    assert [r["type"] for r in rows].count("topic_queues_changed") == 3
    assert replay(rows) == routes_of(routes)
    assert replay(rows) == replay([{"type": "snapshot", "ts": 0, **routes.snapshot()}])


def test_admin_events_naming_their_caller_read_as_before(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Admin-write events gained ``caller`` and ``access_key`` (audit trail): readers that
    predate them must rebuild the same routes from journals that carry them."""
    events = [
        started(0),
        snapshot(0, {"T": [("bA", 4, 4, 6)], "U": [("bA", 1, 1, 6)]}, brokers=[("C", "bA", 0, A1)]),
        perm_changed(30, "bA", "wipe", count=2),
        topic_removed(40, "U", reason="deleted"),
    ]
    audit = {"caller": "10.9.9.9:50000", "access_key": "rocketmq2"}
    plain, stamped = tmp_path / "plain", tmp_path / "stamped"
    write_journal(plain, "r:1", events)
    write_journal(stamped, "r:1", [e | audit if "topic_count" in e or "reason" in e else e
                                   for e in events])  # fmt: skip
    assert '"access_key":"rocketmq2"' in next(stamped.rglob("events-*.jsonl")).read_text()
    assert read_journal(spark, [str(stamped)]).count() == len(events)
    for t in (20, 35, 45):
        rebuilt = routes_at(spark, [str(stamped)], ms(t))
        assert rebuilt == routes_at(spark, [str(plain)], ms(t))
        assert rebuilt["r:1"]["T"]["queueDatas"][0]["perm"] == (6 if t < 30 else 4)


def test_replay_drops_the_topics_a_registration_no_longer_lists() -> None:
    """deleteTopicWithBrokerRegistration: a registration that stops listing a topic takes the
    group out of its route (``topics_removed``); time travel applies it as the registry does,
    while another group keeps serving the topic."""
    from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
    from pynamesrv.namesrv.routes import RouteInfoManager
    from pynamesrv.pipeline.timetravel import replay, routes_of

    routes = RouteInfoManager()
    rows: list[dict] = [{"type": "server_started", "ts": 0, "seq": 0}]

    def register(name: str, addr: str, version: int, topics: list[str]) -> None:
        body = RegisterBrokerBody(
            DataVersion(version, version), [TopicConfig(t, 4, 4, 6) for t in topics], []
        )
        result = routes.register_broker(
            cluster="C", broker_addr=addr, broker_name=name, broker_id=0, ha_server_addr=None,
            body_digest=version, load_body=lambda: body, channel=name, now_ms=version,
            delete_missing_topics=True,
        )  # fmt: skip
        rows.extend({**e.to_record(), "ts": len(rows), "seq": len(rows)} for e in result.events)

    register("a", A1, 1, ["T", "U"])
    register("b", A2, 2, ["U"])
    register("a", A1, 3, ["T"])
    assert any(r.get("topics_removed") == ["U"] for r in rows)
    rebuilt = replay(rows)
    assert [q["brokerName"] for q in rebuilt["U"]["queueDatas"]] == ["b"]
    assert rebuilt == routes_of(routes)


async def test_routes_at_prints_the_body_a_live_server_answered(
    start_namesrv, spark: SparkSession, tmp_path: Path
) -> None:
    """The body routes-at prints for a topic at T is, byte for byte, the GET_ROUTEINFO_BY_TOPIC
    answer the server gave at T, in either dialect; the digest it shows is that body's."""
    root = tmp_path / "journal"
    server = await start_namesrv(
        instanceName="tt:9876", journalEnable=True, journalDir=root, journalFlushIntervalMs=100
    )
    log = EventLog(server)
    brokers = [
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{server.port}"], cluster="C", broker_name=name,
            broker_id=broker_id, broker_addr=addr, register_period_s=0.2,
            heartbeat_timeout_ms=5000,
            topics={t: TopicConfig(t, queues, queues, 6) for t in topics} if broker_id == 0 else {},
        )
        for name, broker_id, addr, topics, queues in (
            ("bB", 0, A2, ("T", "Ü/x"), 8),
            ("bA", 0, A1, ("T",), 4),
            ("bB", 1, A3, (), 0),
        )
    ]  # fmt: skip
    for broker in brokers:
        assert all(outcome.ok for outcome in await broker.start())
        await log.wait(BrokerHeartbeat, broker_addr=broker.broker_addr)
    live = {
        (topic, dialect): await query_route(server.port, topic, version)
        for topic in ("T", "Ü/x")
        for dialect, version in (("standard", Version.V4_9_4), ("legacy", Version.V4_6_0))
    }
    at = now_ms()
    wait_until(lambda: now_ms() > at, "the clock past T")  # what follows is after T
    assert b'{0:"' in live[("T", "legacy")].body and b'"0":"' in live[("T", "standard")].body
    for broker in brokers:
        await broker.stop()
    await server.stop()

    for (topic, dialect), answer in live.items():
        result = CliRunner().invoke(
            pipeline,
            ["routes-at", "--journal", str(root), "--time", str(at), "--topic", topic,
             "--dialect", dialect, "--raw"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert result.stdout_bytes == answer.body, (topic, dialect)
        assert result.stderr == f"digest: {route_digest(answer.body)}\n"
    shown = CliRunner().invoke(
        pipeline, ["routes-at", "--journal", str(root), "--time", str(at), "--dialect", "legacy"]
    )
    assert shown.exit_code == 0, shown.output
    topics = json.loads(shown.stdout)["tt:9876"]["topics"]
    assert {t: e["body"].encode() for t, e in topics.items()} == {
        t: answer.body for (t, dialect), answer in live.items() if dialect == "legacy"
    }
    assert all(e["digest"] == route_digest(e["body"]) for e in topics.values())


def _routes_at_output(journal: Path, at: int, *extra: str) -> bytes:
    result = CliRunner().invoke(
        pipeline, ["routes-at", "--journal", str(journal), "--time", str(at), *extra]
    )
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


def test_routes_at_reads_local_journals_as_spark_does(spark: SparkSession, tmp_path: Path) -> None:
    """Journals on this machine are read without Spark; through Spark (--master, as for
    journals on cluster storage) the bodies and digests are the same bytes: at restarts cold
    and warm (a warm start goes on from the base before it, even without the snapshot that
    follows it), a snapshot in pieces, a base three hour files back."""
    from pynamesrv.namesrv.journal import journal_files, read_records
    from pynamesrv.testing import generate

    generated = tmp_path / "generated"
    generate(generated, brokers=12, instances=2, hours=3, seed=5)
    starts = [r for r in read_records(journal_files(generated)) if r["type"] == "server_started"]
    warm = next(r["ts"] for r in starts if r.get("recovered") is not None)
    cold = max(r["ts"] for r in starts)
    instants = {generated: [warm, warm + 1, cold + 1, cold + 1_800_000]}

    made = tmp_path / "made"
    pieces = snapshot(1, {"T": [("bA", 4, 4, 6)], "U": [("bB", 2, 2, 6)]},
                      brokers=[("C", "bA", 0, A1), ("C", "bB", 0, A2)])  # fmt: skip
    topics = pieces["topics"]
    first = {**pieces, "part": 1, "parts": 2, "topics": {"T": topics["T"]}}
    second = {**pieces, "part": 2, "parts": 2, "brokers": [], "topics": {"U": topics["U"]}}
    write_journal(
        made,
        "h:1",
        [
            started(0),
            first,
            second,
            registered(100, "C", "bC", A3, added={"V": (8, 8, 6)}),
            *(heartbeat(3690, "C", name, addr) for name, addr in (("bA", A1), ("bC", A3))),
            warm_started(3700, brokers=3),  # no snapshot after it (lines dropped)
            broker_recovered(3700, "C", "bA", A1, last_heartbeat=3690),
            registered(3800, "C", "bC", A3, first=False, added={"W": (1, 1, 6)}),
            perm_changed(7300, "bA", "wipe"),
            removed(10900, "C", "bB", A2, "expired", 10700),
        ],
    )
    instants[made] = [ms(50), ms(3750), ms(11000)]
    # bB's last word is the snapshot: its deadline passed while the server was down

    for journal, times in instants.items():
        for at in times:
            local = _routes_at_output(journal, at)
            assert local == _routes_at_output(journal, at, "--master", "local[2]"), at
            assert json.loads(local)  # a table per instance
    legacy = ("--dialect", "legacy", "--instance", "h:1")
    local = _routes_at_output(made, ms(11000), *legacy)
    assert local == _routes_at_output(made, ms(11000), *legacy, "--master", "local[2]")
    after = json.loads(local)["h:1"]["topics"]
    assert set(after) == {"T", "V", "W"}  # U left with bB at the warm start, T and V stayed
