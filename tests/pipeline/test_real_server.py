"""End to end: real name servers write journals, the pipeline reads back what the test did.

Two in-process ``NamesrvController`` instances journal to one directory while Python brokers
(``BrokerClient``) register, die silently, stop gracefully and drop their connections. After
the servers stop, the tables must say exactly that, and routes-at must rebuild the very route
the live server answered at a recorded moment (compared by digest).

Brokers that must stay registered heartbeat every 0.2 s with a 2 s timeout; only the broker
meant to expire uses the short 300 ms one, so a busy machine cannot expire the others.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import SparkSession

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import BrokerHeartbeat, BrokerRemoved
from pynamesrv.pipeline.job import Derived
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.timetravel import registries_at, route_bodies, route_digest, routes_at
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand
from waiting import EventLog

NS_A, NS_B = "e2e-a:9876", "e2e-b:9876"
CLUSTER, DIV = "E2E", "DIV"
ADDR = {
    "dead": "127.0.0.1:20911",
    "stop": "127.0.0.1:20921",
    "drop": "127.0.0.1:20931",
    "keep": "127.0.0.1:20941",
    "keep-slave": "127.0.0.1:20942",
    "shared": "127.0.0.1:20951",
    "onlya": "127.0.0.1:20961",
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def query_route(port: int, topic: str, version: int = Version.V4_9_4) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC as a client of ``version`` asks it (4.9.4 and later: answered
    in standard JSON, older: in fastjson's legacy dialect)."""
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(
            RemotingCommand(
                code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                version=version,
                ext_fields={"topic": topic},
            )
        )
    finally:
        await client.close()


def broker(
    servers: list[NamesrvController],
    name: str,
    *,
    cluster: str = CLUSTER,
    broker_id: int = 0,
    group: str | None = None,
    timeout_ms: int = 2000,
    period_s: float = 0.2,
) -> BrokerClient:
    group = group or name
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{s.port}" for s in servers],
        cluster=cluster,
        broker_name=group,
        broker_id=broker_id,
        broker_addr=ADDR[name],
        topics={f"{group}-T": TopicConfig(f"{group}-T", 4, 4, 6)} if broker_id == 0 else {},
        register_period_s=period_s,
        heartbeat_timeout_ms=timeout_ms,
        timeout_s=2.0,
    )


async def test_pipeline_reports_what_real_servers_saw(
    start_namesrv, spark: SparkSession, tmp_path: Path
) -> None:
    root = tmp_path / "journal"
    common = {
        "journalEnable": True,
        "journalDir": root,
        "scanNotActiveBrokerInterval": 100,
        "journalFlushIntervalMs": 100,
    }
    ns_a = await start_namesrv(instanceName=NS_A, **common)
    ns_b = await start_namesrv(instanceName=NS_B, **common)
    both = [ns_a, ns_b]
    ports = [ns_a.port, ns_b.port]
    logs = {NS_A: EventLog(ns_a), NS_B: EventLog(ns_b)}

    dead = broker(both, "dead", timeout_ms=300, period_s=0.1)
    stop = broker(both, "stop")
    drop = broker(both, "drop")
    keep = broker(both, "keep")
    keep_slave = broker(both, "keep-slave", group="keep", broker_id=1)
    shared = broker(both, "shared", cluster=DIV)
    onlya = broker([ns_a], "onlya", cluster=DIV)
    started = (dead, stop, drop, keep, keep_slave, shared)
    for b in started:
        assert all(o.ok for o in await b.start())
    for log in logs.values():  # every session outlives its registration
        for b in started:
            await log.wait(BrokerHeartbeat, broker_addr=b.broker_addr)

    # The live answers at t1, every topic on both servers.
    topics = ["dead-T", "stop-T", "drop-T", "keep-T", "shared-T"]
    live = {(p, t): await query_route(p, t) for p in ports for t in topics}
    t1 = now_ms()
    assert all(answer.code == ResponseCode.SUCCESS for answer in live.values())

    await dead.die_silently()  # expired on both
    for log in logs.values():
        await log.wait(BrokerRemoved, broker_addr=ADDR["dead"])
    await stop.stop()  # unregister on both
    await drop.die_silently()
    await drop.close_connections()  # channel_closed on both
    for log in logs.values():
        await log.wait(BrokerRemoved, broker_addr=ADDR["drop"])
    assert all(o.ok for o in await onlya.start())  # ns_a only: the divergence we cause
    await logs[NS_A].wait(BrokerHeartbeat, broker_addr=ADDR["onlya"])  # a session that lasts
    await onlya.stop()
    after_stop = await query_route(ns_a.port, "stop-T")
    keep_live = await query_route(ns_a.port, "keep-T")
    t2 = now_ms()
    assert after_stop.code == ResponseCode.TOPIC_NOT_EXIST

    for b in (keep, keep_slave, shared, dead):
        await b.die_silently()
    await ns_a.stop()
    await ns_b.stop()
    for b in (keep, keep_slave, shared, dead, drop):
        await b.close_connections()

    derived = Derived.of(read_journal(spark, [str(root)]))
    try:
        sessions = derived.table("broker_sessions").collect()
        latency = derived.table("detection_latency").collect()
        divergence = derived.table("namesrv_divergence").collect()
    finally:
        derived.release()

    ended = sorted((s["ns"], s["cluster"], s["broker_addr"], s["end_reason"]) for s in sessions)
    expected = []
    for ns in (NS_A, NS_B):
        expected += [
            (ns, CLUSTER, ADDR["dead"], "expired"),
            (ns, CLUSTER, ADDR["stop"], "unregister"),
            (ns, CLUSTER, ADDR["drop"], "channel_closed"),
            (ns, CLUSTER, ADDR["keep"], "server_stopped"),
            (ns, CLUSTER, ADDR["keep-slave"], "server_stopped"),
            (ns, DIV, ADDR["shared"], "server_stopped"),
        ]
    expected.append((NS_A, DIV, ADDR["onlya"], "unregister"))
    assert ended == sorted(expected)
    assert all(s["duration_s"] > 0 for s in sessions)

    reasons = sorted((r["ns"], r["broker_addr"], r["reason"]) for r in latency)
    assert reasons == sorted(
        [(ns, ADDR[n], reason) for ns in (NS_A, NS_B)
         for n, reason in (("dead", "expired"), ("stop", "unregister"), ("drop", "channel_closed"))]
        + [(NS_A, ADDR["onlya"], "unregister")]
    )  # fmt: skip
    for r in latency:  # the servers' own removal records, as the journal carried them
        [removed] = logs[r["ns"]].events(BrokerRemoved, broker_addr=r["broker_addr"])
        assert (r["reason"], r["last_heartbeat_ts"]) == (removed.reason, removed.last_heartbeat_ts)
        assert r["latency_s"] == (r["removed_ts"] - r["last_heartbeat_ts"]) / 1000
    expired = [r for r in latency if r["reason"] == "expired"]
    assert all(r["removed_ts"] > r["last_heartbeat_ts"] + 300 for r in expired)  # not early

    # The divergence the test caused: onlya live on ns_a only, for its whole session there.
    onlya_session = next(s for s in sessions if s["broker_addr"] == ADDR["onlya"])
    caused = [r for r in divergence if ADDR["onlya"] in r["only_in_a"]]
    assert [(r["cluster"], r["ns_a"], r["ns_b"], r["only_in_b"]) for r in caused] == [
        (DIV, NS_A, NS_B, [])
    ]
    assert caused[0]["start_ts"] == onlya_session["start_ts"]
    assert caused[0]["end_ts"] == onlya_session["end_ts"]
    assert caused[0]["only_in_a"] == [ADDR["onlya"]]
    # Anything else in DIV is the moment between the two servers seeing the same broker.
    shared_starts = sorted(s["start_ts"] for s in sessions if s["broker_addr"] == ADDR["shared"])
    others = [r for r in divergence if r["cluster"] == DIV and r not in caused]
    for r in others:
        assert r["only_in_a"] + r["only_in_b"] == [ADDR["shared"]], r
        assert shared_starts[0] <= r["start_ts"] <= r["end_ts"] <= shared_starts[-1], r

    # routes-at t1 equals what each server answered then, topic by topic: the same body,
    # byte for byte (so the same digest).
    at_t1 = routes_at(spark, [str(root)], t1)
    bodies_t1 = {
        ns: route_bodies(r, True) for ns, r in registries_at(spark, [str(root)], t1).items()
    }
    for (port, topic), answer in live.items():
        ns = NS_A if port == ns_a.port else NS_B
        assert route_digest(at_t1[ns][topic]) == route_digest(answer.body), (ns, topic)
        assert bodies_t1[ns][topic] == answer.body, (ns, topic)
    assert set(at_t1[NS_A]) == set(topics)
    keep_route = at_t1[NS_A]["keep-T"]
    assert keep_route["brokerDatas"][0]["brokerAddrs"] == {
        "0": ADDR["keep"],
        "1": ADDR["keep-slave"],
    }
    at_t2 = routes_at(spark, [str(root)], t2, instance=NS_A)[NS_A]
    assert "stop-T" not in at_t2 and "dead-T" not in at_t2
    assert route_digest(at_t2["keep-T"]) == route_digest(keep_live.body)
