"""``pynamesrv simulate`` end to end: the installed command against in-process name servers.

The name servers run in the test's event loop (``start_namesrv``) with a 200 ms expiry scan;
the simulator runs as the operator runs it, a subprocess of the installed entry point, and
the assertions read its ``--json`` summary next to what the name servers reported (their
events, stamped by their clock). Besides checking the simulator, these runs check the name
server's liveness: graceful stops and dropped connections leave the routes by unregister and
connection close (not by expiry), silent brokers by expiry after their deadline and never
before, and a broker cut off from one name server stays routed by the others. The clients'
view is checked for what it saw and in which order; how many milliseconds it took is the
simulator's measurement, not a pass mark (machines slow down 2x). The last tests pin the
simulator's own pure parts (fleet shape, chaos plan, detection bookkeeping) in milliseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import BrokerHeartbeat, BrokerRegistered, BrokerRemoved
from pynamesrv.simulate.detection import ChaosEvent, DetectionTracker
from pynamesrv.simulate.scenario import (
    PartitionSpec,
    SimConfig,
    build_fleet,
    chaos_window,
    plan_chaos,
    topic_universe,
)
from waiting import EventLog, Stamped

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
PERIOD_S = 1
HEARTBEAT_TIMEOUT_MS = 1500
SCAN_MS = 200


async def run_simulate(*args: str, timeout_s: float = 60) -> tuple[int, str, str]:
    """Run ``pynamesrv simulate`` (stdout is a pipe, so progress comes as plain lines)."""
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT,
        "simulate",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), stderr.decode()


async def simulate_json(tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    out = tmp_path / "summary.json"
    code, stdout, stderr = await run_simulate(*args, "--json", str(out))
    assert code == 0, f"simulate failed ({code}):\n{stdout}\n{stderr}"
    return json.loads(out.read_text()), stdout


def addr(ns: NamesrvController) -> str:
    return f"127.0.0.1:{ns.port}"


def events_of(summary: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in summary["chaos"]["events"] if e["kind"] == kind]


def only_watch(event: dict[str, Any]) -> dict[str, Any]:
    [watch] = event["detection"]
    return watch


def removals(log: EventLog, addr: str) -> list[Stamped[BrokerRemoved]]:
    """The server's removals of the broker at ``addr``, in order (the run ends with the
    simulator's exit, which closes the connections of the brokers still up)."""
    return log.of(BrokerRemoved, broker_addr=addr)


def assert_expired_after_deadline(log: EventLog, addr: str) -> None:
    removed = removals(log, addr)[0]
    assert removed.event.reason == "expired"
    assert removed.event.last_heartbeat_ts is not None
    assert removed.ts_ms > removed.event.last_heartbeat_ts + HEARTBEAT_TIMEOUT_MS


async def test_kill_stop_drop_and_flap_are_detected_as_expected(start_namesrv, tmp_path) -> None:
    ns = await start_namesrv(scanNotActiveBrokerInterval=SCAN_MS)
    log = EventLog(ns)
    summary, stdout = await simulate_json(
        tmp_path,
        *f"-n {addr(ns)} --brokers 20 --slaves 1 --topics 10 --register-period {PERIOD_S} "
        f"--heartbeat-timeout {HEARTBEAT_TIMEOUT_MS} --query-rate 200 --query-clients 2 "
        "--duration 8 --seed 11 --kill 1 --stop 1 --drop 1 --flap 1 --flap-interval 1".split(),
    )
    # Not a terminal: plain progress lines, then the tables.
    assert "reg ok=" in stdout and "Detection delays" in stdout

    regs = summary["registrations"]
    assert summary["fleet"] == {"groups": 20, "brokers": 40, "topics": 67, "topics_per_group": 10}
    assert regs["failed"] == 0 and summary["errors"] == {}
    # Each acknowledged registration is one the server reported, as a change or a heartbeat
    # (the exit may cut a round short after the server handled it: at most one per broker).
    reported = log.of(BrokerRegistered) + log.of(BrokerHeartbeat)
    assert regs["ok"] <= len(reported) <= regs["ok"] + 40
    assert len({s.event.broker_addr for s in reported}) == 40
    assert log.of(BrokerHeartbeat), "no broker registered twice"
    answers = summary["route_answers"]
    assert answers["errors"] == 0 and answers["ok"] > 0
    assert summary["routed_brokers_seen"] == 40
    assert not summary["chaos"]["skipped"]
    assert summary["chaos"]["fired"] == 3 + len(events_of(summary, "flap"))
    assert len({e["broker"] for e in summary["chaos"]["events"]}) == 4  # one per group

    [stop] = events_of(summary, "stop")
    assert [r.event.reason for r in removals(log, stop["addr"])] == ["unregister"]
    assert only_watch(stop)["gone_ms"] is not None  # the clients saw it leave

    [drop] = events_of(summary, "drop")
    # The server drops the broker when its connection closes; it registers again next period.
    assert removals(log, drop["addr"])[0].event.reason == "channel_closed"
    watch = only_watch(drop)
    assert watch["gone_ms"] is not None and watch["restored_ms"] is not None
    assert watch["back_ms"] is not None  # and the clients saw it back

    [kill] = events_of(summary, "kill")
    assert_expired_after_deadline(log, kill["addr"])
    assert kill["last_registration_s"][addr(ns)] <= kill["at_s"]
    assert only_watch(kill)["gone_ms"] is not None

    # A flapping broker goes down (its connections close) and comes back, cycle after cycle.
    flaps = events_of(summary, "flap")
    assert len(flaps) >= 2 and [e["cycle"] for e in flaps] == list(range(len(flaps)))
    flap_removals = [r.event.reason for r in removals(log, flaps[0]["addr"])]
    assert flap_removals[: len(flaps)] == ["channel_closed"] * len(flaps)
    for flap in flaps:
        watch = only_watch(flap)
        assert flap["addr"] == flaps[0]["addr"] and flap["restore_s"] > flap["at_s"]
        assert watch["gone_ms"] is not None and watch["back_ms"] is not None

    kinds = {row["kind"]: row for row in summary["detection"]}
    assert {k: r["gone_detected"] for k, r in kinds.items()} == {
        "kill": 1,
        "stop": 1,
        "drop": 1,
        "flap": len(flaps),
    }


async def test_partition_hides_broker_on_one_namesrv_only(start_namesrv, tmp_path) -> None:
    ns1 = await start_namesrv(scanNotActiveBrokerInterval=SCAN_MS)
    ns2 = await start_namesrv(scanNotActiveBrokerInterval=SCAN_MS)
    log1, log2 = EventLog(ns1), EventLog(ns2)
    summary, _ = await simulate_json(
        tmp_path,
        *f"-n {addr(ns1)};{addr(ns2)} --brokers 10 --topics 5 --register-period {PERIOD_S} "
        f"--heartbeat-timeout {HEARTBEAT_TIMEOUT_MS} --query-rate 200 --duration 9 --seed 5 "
        f"--compressed --partition sim-broker-0002@{addr(ns2)}:3".split(),
    )
    assert summary["registrations"]["failed"] == 0 and summary["errors"] == {}
    by_ns = summary["registrations"]["by_namesrv"]
    assert by_ns[addr(ns2)]["ok"] < by_ns[addr(ns1)]["ok"]  # ns2 skipped for 3 periods

    [event] = events_of(summary, "partition")
    assert event["broker"] == "sim-broker-0002" and event["partition_namesrv"] == addr(ns2)
    watches = {w["namesrv"]: w for w in event["detection"]}
    cut = watches[addr(ns2)]
    assert cut["expect"] == "gone"
    assert cut["gone_ms"] is not None and cut["back_ms"] is not None
    assert_expired_after_deadline(log2, event["addr"])  # missed heartbeats on ns2 only
    # ns1 kept it the whole run: the only removal there is the simulator's exit.
    assert [r.event.reason for r in removals(log1, event["addr"])] == ["channel_closed"]
    kept = watches[addr(ns1)]
    assert kept == {
        "namesrv": addr(ns1),
        "expect": "kept",
        "missing_ms": None,
        "missing_answers": 0,
    }


async def test_bad_options_and_an_unreachable_namesrv(tmp_path) -> None:
    code, _, stderr = await run_simulate("--partition", "nonsense", "--duration", "1")
    assert code == 2 and "brokerName@host:port:seconds" in stderr
    code, _, stderr = await run_simulate("--brokers", "2", "--kill", "3", "--duration", "1")
    assert code == 2 and "3 chaos victims" in stderr

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    code, stdout, stderr = await run_simulate(
        *f"-n 127.0.0.1:{port} --brokers 3 --register-period 0.5 --duration 1.2".split(),
        "--no-progress",
    )
    assert code == 1 and "no registration succeeded" in stderr
    assert "register: connection refused" in stdout


def test_fleet_shares_topics_and_spreads_first_registrations() -> None:
    config = SimConfig(namesrv=["ns:1"], brokers=20, slaves=1, topics=10, seed=3)
    universe = topic_universe(config)
    fleet = build_fleet(config, universe)
    assert len(universe) == 67 and len(fleet) == 40
    assert len({b.addr for b in fleet}) == 40  # fake but distinct addresses
    assert [b.broker_id for b in fleet[:4]] == [0, 1, 0, 1]
    groups_per_topic: dict[str, set[int]] = {}
    for broker in fleet:
        assert len(set(broker.topics)) == 10
        for topic in broker.topics:
            groups_per_topic.setdefault(topic, set()).add(broker.group)
    assert set(groups_per_topic) == set(universe)
    assert {len(g) for g in groups_per_topic.values()} <= {2, 3}
    phases = sorted(b.phase_s for b in fleet)
    assert 0 <= phases[0] < phases[-1] < config.register_period_s
    assert max(b - a for a, b in itertools.pairwise(phases)) < 2.5  # no bursts
    assert build_fleet(config, universe) == fleet  # seeded


def test_chaos_plan_is_seeded_and_leaves_time_to_detect() -> None:
    config = SimConfig(
        namesrv=["a:1", "b:2"],
        brokers=20,
        register_period_s=1,
        heartbeat_timeout_ms=1500,
        duration_s=8,
        seed=9,
        kills=2,
        stops=1,
        drops=1,
        flaps=1,
        partitions=[PartitionSpec.parse("sim-broker-0004@b:2:2.5")],
    )
    config.validate()
    start, end = chaos_window(config)
    assert (start, end) == (1.1, 4.5)  # kills need heartbeat timeout + a period to show
    plan = plan_chaos(config)
    assert plan == plan_chaos(config)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)
    assert all(start <= p.at_s <= end for p in plan)
    assert sorted(p.kind for p in plan) == ["drop", "flap", "kill", "kill", "partition", "stop"]
    with pytest.raises(ValueError, match="not in --namesrv"):
        SimConfig(namesrv=["a:1"], partitions=[PartitionSpec.parse("1@b:2:1")]).validate()
    with pytest.raises(ValueError, match="expected brokerName@host:port:seconds"):
        PartitionSpec.parse("sim-broker-0001:3")


def test_detection_counts_from_the_event_to_what_clients_see() -> None:
    tracker = DetectionTracker(["a:1", "b:2"])
    event = ChaosEvent(
        id=1,
        kind="drop",
        at_s=10.0,
        broker="sim-broker-0001",
        broker_id=0,
        addr="X:1",
        topics=("T1", "T2"),
        last_registration_s={"a:1": 9.5},
        expect_back=True,
    )
    tracker.open(event, {"a:1": "gone", "b:2": "gone"})
    rng = random.Random(1)
    assert tracker.probe_topic("a:1", rng) in ("T1", "T2")
    tracker.on_answer("a:1", "T1", 9.9, 10.1, set())  # sent before the event: ignored
    tracker.on_answer("a:1", "OTHER", 10.0, 10.1, set())  # not one of its topics
    tracker.on_answer("a:1", "T1", 10.0, 10.2, {"X:1"})  # still routed
    tracker.on_answer("a:1", "T2", 10.2, 10.3, {"Y:1"})  # gone
    tracker.registered("X:1", "a:1", 10.8)  # the reconnect's registration leaves
    tracker.on_answer("a:1", "T1", 10.81, 10.85, {"X:1", "Y:1"})  # back
    [a, b] = (w.to_json() for w in event.watches)
    assert a == {
        "namesrv": "a:1",
        "expect": "gone",
        "gone_ms": 300.0,
        "gone_after_last_registration_ms": 800.0,
        "restored_ms": 800.0,
        "back_ms": 850.0,
        "back_after_restore_ms": 50.0,
    }
    assert b["gone_ms"] is None and b["back_ms"] is None  # b's clients saw nothing yet
    assert tracker.open_watches() == 1 and tracker.probe_topic("a:1", rng) is None
