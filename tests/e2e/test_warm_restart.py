"""Warm restart end to end: ``pynamesrv serve`` restarted with SIGTERM and with SIGKILL under
real traffic (brokers registered with the project's broker client, a client querying routes
in a loop), every answer a client can read compared byte for byte across the restart, the
bounds (a broker gone while the server was down leaves at its deadline; a state older than
the brokers' timeouts is not used) and what /healthz and the metrics say meanwhile.

The brokers keep the default 30 s re-registration period, so none registers again within a
test's restart window: what the server answers after the restart comes from the journal.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController, now_ms
from pynamesrv.namesrv.model import QueueData, TopicQueueMappingInfo
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codes import ResponseCode, TopicSysFlag, Version
from pynamesrv.remoting.command import RemotingCommand
from served import Served, free_port, journal
from waiting import GUARD_S, wait_for

DOOMED_TIMEOUT_MS = 15_000  # longer than a restart takes, so the broker comes back first
PACE_S = 0.05  # between rounds of route queries: about 20 per topic and second
ANSWERS_EACH_SIDE = 20  # per topic, before and after the restart


def started_lines(root: Path, count: int) -> Callable[[], list[dict[str, Any]]]:
    """A condition: the journal holds ``count`` server_started lines (they are flushed
    within journalFlushIntervalMs); returns them."""

    def found() -> list[dict[str, Any]]:
        lines = [r for r in journal(root) if r["type"] == "server_started"]
        return lines if len(lines) >= count else []

    return found


def last_run(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    starts = [i for i, line in enumerate(lines) if line["type"] == "server_started"]
    return lines[starts[-1] :]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    server = Served(free_port(), tmp_path / "journal", tmp_path / "serve.log",
                    tmp_path / "namesrv.properties")  # fmt: skip
    yield server
    server.kill()
    if server.proc is not None:
        await server.proc.wait()


@dataclass
class Querier:
    """A client asking for its topics' routes in a loop on one connection, reconnecting
    when the server is gone: every answer is kept with its time and code."""

    port: int
    topics: tuple[str, ...]
    answers: list[tuple[int, str, int]] = field(default_factory=list)
    unreachable: list[int] = field(default_factory=list)  # times a connect or request failed

    async def run(self) -> None:
        client: RemotingClient | None = None
        try:
            while True:
                try:
                    if client is None or not client.is_open:
                        client = await RemotingClient.connect("127.0.0.1", self.port, timeout=2)
                    for topic in self.topics:
                        request = requests.get_routeinfo_by_topic(topic)
                        answer = await client.request(request, timeout=5)
                        self.answers.append((now_ms(), topic, answer.code))
                except RemotingError:
                    self.unreachable.append(now_ms())
                    client = None
                await asyncio.sleep(PACE_S)  # pacing the loop, not waiting for anything
        finally:
            if client is not None:
                await client.close()

    def answered(self, after_ms: int = 0) -> Counter[str]:
        return Counter(t for ts, t, code in self.answers if ts > after_ms and code == 0)

    def each_topic_answered(self, count: int, after_ms: int = 0) -> bool:
        answered = self.answered(after_ms)
        return all(answered[topic] >= count for topic in self.topics)


def broker(
    namesrv: str, name: str, port: int, topics: dict[str, TopicConfig], **options: Any
) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[namesrv],
        cluster=options.pop("cluster", "WarmCluster"),
        broker_name=name,
        broker_id=options.pop("broker_id", 0),
        broker_addr=f"127.0.0.1:{port}",
        ha_server_addr=f"127.0.0.1:{port + 1}",
        topics=topics,
        **options,
    )


def topics(*names: str, queues: int = 4, **options: Any) -> dict[str, TopicConfig]:
    return {n: TopicConfig(n, queues, queues, 6, **options) for n in names}


# ---------------------------------------------------------------------------- real traffic


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_clients_get_routes_across_a_restart_and_a_broker_gone_meanwhile_expires(
    served: Served, sig: signal.Signals
) -> None:
    await served.start()
    addr = f"127.0.0.1:{served.port}"
    staying = [broker(addr, f"warm-{i}", 10911 + 10 * i, topics(f"Warm{i}", "WarmShared"))
               for i in range(3)]  # fmt: skip
    doomed = broker(addr, "warm-doomed", 10991, topics("WarmDoomed", "WarmShared"),
                    heartbeat_timeout_ms=DOOMED_TIMEOUT_MS)  # fmt: skip
    for each in (*staying, doomed):
        assert all(outcome.ok for outcome in await each.start())
    querier = Querier(served.port, ("Warm0", "Warm1", "Warm2", "WarmShared"))
    task = asyncio.create_task(querier.run())
    try:
        await wait_for(lambda: querier.each_topic_answered(ANSWERS_EACH_SIDE), "answers before")
        if sig == signal.SIGKILL:  # what a kill -9 can recover is what was flushed
            await wait_for(
                lambda: sum(r["type"] == "broker_registered" for r in journal(served.journal)) >= 4,
                "the registrations written to the journal",
            )
        await served.stop(sig)
        await doomed.stop(unregister=False)  # gone while the server is down
        await served.start()
        await wait_for(lambda: querier.unreachable, "the querier saw the server down")
        down_until = querier.unreachable[-1]
        await wait_for(
            lambda: querier.each_topic_answered(ANSWERS_EACH_SIDE, down_until), "answers after"
        )

        async def doomed_gone() -> bool:
            client = await RemotingClient.connect("127.0.0.1", served.port)
            try:
                answer = await client.request(requests.get_routeinfo_by_topic("WarmDoomed"))
            finally:
                await client.close()
            return answer.code == ResponseCode.TOPIC_NOT_EXIST

        await wait_for(
            doomed_gone, "the doomed broker expired", timeout_s=DOOMED_TIMEOUT_MS / 1000 + GUARD_S
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for each in staying:
            await each.stop()

    # Zero error answers across the restart, and answers on both sides of it.
    assert [a for a in querier.answers if a[2] != ResponseCode.SUCCESS] == []
    assert min(querier.answered(down_until).values()) >= ANSWERS_EACH_SIDE
    gap = min(ts for ts, _, _ in querier.answers if ts > down_until) - max(
        ts for ts, _, _ in querier.answers if ts < querier.unreachable[0]
    )
    print(f"route answers paused {gap} ms across the {sig.name} restart")

    def doomed_removal() -> list[dict[str, Any]]:
        return [r for r in last_run(journal(served.journal))
                if r["type"] == "broker_removed" and r["broker_name"] == "warm-doomed"]  # fmt: skip

    [removed] = await wait_for(doomed_removal, "the expiry written to the journal")
    lines = journal(served.journal)
    run = last_run(lines)
    started = run[0]
    assert started["recovered"]["brokers"] == 4 and started["recovered"]["expired_on_load"] == 0
    # The answers after the restart came from the journal: no broker had registered again.
    registered_again = [
        r["ts"] for r in run if r["type"] in ("broker_registered", "broker_heartbeat")
    ]
    assert not registered_again or min(registered_again) > down_until
    # The broker that died meanwhile left by its own deadline, from the last heartbeat the
    # journal recorded for it before the restart (a snapshot entry, or a registration line).
    last_seen = None
    for line in lines[: lines.index(started)]:
        if line["type"] == "snapshot":
            last_seen = next((b["last_heartbeat_ts"] for b in line["brokers"]
                              if b["broker_name"] == "warm-doomed"), last_seen)  # fmt: skip
        elif line["type"] == "broker_registered" and line["broker_name"] == "warm-doomed":
            last_seen = line["ts"]
    assert last_seen is not None
    assert removed["reason"] == "expired"
    assert removed["last_heartbeat_ts"] == last_seen
    assert removed["ts"] > last_seen + DOOMED_TIMEOUT_MS  # never before its deadline


# ---------------------------------------------------------------------------- consistency


async def admin(client: RemotingClient, request: RemotingCommand) -> None:
    answer = await client.request(request)
    assert answer.code == ResponseCode.SUCCESS, (request.code, answer.remark)


READ_TOPICS = ("WarmOrder", "WarmUnit", "WarmShared", "WarmStatic", "WarmB", "WarmC",
               "WarmWiped", "WarmDeleted", "WarmAdmin", "NoSuchWarmTopic")  # fmt: skip


async def everything_a_client_reads(port: int) -> dict[str, tuple[Any, ...]]:
    """Every read answer (code, remark, header fields, body bytes) clients, brokers and
    mqadmin get, for every topic, in both JSON dialects and in zone mode."""
    reads: dict[str, RemotingCommand] = {}
    for topic in READ_TOPICS:
        for version in (63, Version.V4_9_4, Version.V5_2_0):
            reads[f"{topic} v{version}"] = requests.get_routeinfo_by_topic(topic, version=version)
        reads[f"{topic} zone"] = requests.get_routeinfo_by_topic(
            topic, zone_mode=True, zone_name="zone-a", version=Version.V5_2_0
        )
    reads |= {
        "cluster info": requests.get_broker_cluster_info(),
        "topic list": requests.get_all_topic_list_from_nameserver(),
        "by cluster": requests.get_topics_by_cluster("WarmCluster"),
        "unit topics": requests.get_unit_topic_list(),
        "system topics": requests.get_system_topic_list_from_ns(),
        "order configs": requests.get_kvlist_by_namespace("ORDER_TOPIC_CONFIG"),
        "member group": requests.get_broker_member_group(cluster="WarmCluster",
                                                          broker_name="warm-b"),
    }  # fmt: skip
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        answers = {}
        for name, request in reads.items():
            answer = await client.request(request)
            answers[name] = (answer.code, answer.remark, answer.ext_fields, answer.body)
    finally:
        await client.close()
    return answers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_every_answer_is_the_same_after_a_restart(
    served: Served, sig: signal.Signals
) -> None:
    """Routes (order configs, sys flags, zones, static topics, acting master), perms wiped
    by admin and by a master's departure, topics registered and deleted by admin."""
    await served.start()
    addr = f"127.0.0.1:{served.port}"
    static = TopicQueueMappingInfo("WarmStatic", "warm-a", "__global__", 2, 3, False,
                                   ((0, 0), (1, 1)))  # fmt: skip
    brokers = [
        broker(addr, "warm-a", 10911, {
            **topics("WarmOrder", "WarmShared", "WarmStatic"),
            **topics("WarmUnit", queues=2, topic_sys_flag=TopicSysFlag.UNIT),
        }, zone_name="zone-a", enable_acting_master=False, mappings={"WarmStatic": static},
           version=Version.V5_2_0),
        broker(addr, "warm-b", 10921, topics("WarmB", "WarmShared"), enable_acting_master=True,
               version=Version.V5_2_0, zone_name="zone-b"),
        broker(addr, "warm-b", 10923, topics("WarmB", "WarmShared"), enable_acting_master=True,
               version=Version.V5_2_0, zone_name="zone-b", broker_id=1),
        broker(addr, "warm-c", 10931, topics("WarmShared", "WarmC", "WarmWiped", "WarmDeleted"),
               cluster="OtherCluster"),
    ]  # fmt: skip
    for each in brokers:
        assert all(outcome.ok for outcome in await each.start())
    await brokers[1].stop()  # warm-b's master leaves: its slave's topics lose the write bit
    client = await RemotingClient.connect("127.0.0.1", served.port)
    try:
        for request in (
            requests.update_namesrv_config(
                {"orderMessageEnable": "true", "supportActingMaster": "true"}
            ),
            requests.put_kv_config("ORDER_TOPIC_CONFIG", "WarmOrder", "warm-a:4"),
            requests.wipe_write_perm_of_broker("warm-c"),
            requests.register_topic_in_namesrv("WarmAdmin", [QueueData("warm-a", 3, 3, 6, 0)]),
            requests.delete_topic_in_namesrv("WarmDeleted"),
            requests.delete_topic_in_namesrv("WarmShared", "OtherCluster"),
            requests.put_kv_config("WARM", "marker", "last change"),
        ):
            await admin(client, request)
    finally:
        await client.close()
    before = await everything_a_client_reads(served.port)
    assert (
        before["WarmB v401"][0] == ResponseCode.SUCCESS and b'"perm":4' in before["WarmB v401"][3]
    )
    assert before["WarmDeleted v401"][0] == ResponseCode.TOPIC_NOT_EXIST

    if sig == signal.SIGKILL:  # lines are written in order: the marker last
        await wait_for(
            lambda: any(r.get("key") == "marker" for r in journal(served.journal)),
            "the admin changes written to the journal",
        )
    await served.stop(sig)
    for each in brokers:
        await each.stop(unregister=False)
    await served.start()
    after = await everything_a_client_reads(served.port)

    assert after.keys() == before.keys()
    for name, answer in before.items():
        assert after[name] == answer, name
    [_, started] = await wait_for(started_lines(served.journal, 2), "the restart journaled")
    assert started["recovered"]["brokers"] == 3  # warm-a, warm-b's slave, warm-c


# ---------------------------------------------------------------------------- the bounds


def controller(tmp_path: Path, **overrides: str) -> NamesrvController:
    """An in-process server whose journal directory is named before it binds (instanceName)."""
    home = tmp_path / "home-ns"
    config = NamesrvConfig(
        listen_port=0,
        state_dir=str(home),
        kv_config_path=str(home / "kvConfig.json"),
        config_store_path=str(home / "namesrv.properties"),
    )
    settings = {"httpPort": "0", "instanceName": "warm-ns", "journalDir": str(tmp_path / "j"),
                "journalFlushIntervalMs": "100", **overrides}  # fmt: skip
    for key, value in settings.items():
        config.set(key, value)
    return NamesrvController(config, host="127.0.0.1")


async def route_code(port: int, topic: str) -> int:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return (await client.request(requests.get_routeinfo_by_topic(topic))).code
    finally:
        await client.close()


async def test_a_recovered_state_older_than_the_broker_timeout_is_not_used(tmp_path: Path) -> None:
    ns = controller(tmp_path)
    await ns.start()
    addr = f"127.0.0.1:{ns.port}"
    brief = broker(addr, "warm-brief", 10911, topics("WarmBrief"), heartbeat_timeout_ms=1500)
    lasting = broker(addr, "warm-lasting", 10921, topics("WarmLasting"))
    for each in (brief, lasting):
        assert all(outcome.ok for outcome in await each.start())
    await ns.stop()
    for each in (brief, lasting):
        await each.stop(unregister=False)
    [snapshot] = [r for r in last_run(journal(tmp_path / "j")) if r["type"] == "snapshot"][-1:]
    deadline = next(b["last_heartbeat_ts"] + b["timeout_ms"] for b in snapshot["brokers"]
                    if b["broker_name"] == "warm-brief")  # fmt: skip
    await wait_for(lambda: now_ms() > deadline, "the server down past warm-brief's deadline")

    ns = controller(tmp_path)
    await ns.start()
    try:
        assert ns.recovered is not None
        assert (ns.recovered.brokers, ns.recovered.expired_on_load) == (1, 1)
        assert await route_code(ns.port, "WarmBrief") == ResponseCode.TOPIC_NOT_EXIST
        assert await route_code(ns.port, "WarmLasting") == ResponseCode.SUCCESS
    finally:
        await ns.stop()


async def test_a_server_down_longer_than_every_broker_timeout_starts_empty(
    tmp_path: Path,
) -> None:
    ns = controller(tmp_path)
    await ns.start()
    brief = broker(f"127.0.0.1:{ns.port}", "warm-brief", 10911, topics("WarmBrief"),
                   heartbeat_timeout_ms=1000)  # fmt: skip
    assert all(outcome.ok for outcome in await brief.start())
    registered = now_ms()
    await ns.stop()
    await brief.stop(unregister=False)
    await wait_for(lambda: now_ms() > registered + 1000, "the server down past every deadline")

    ns = controller(tmp_path)
    await ns.start()
    try:
        assert ns.recovered is not None and ns.recovered.to_record()["brokers"] == 0
        assert ns.recovered.expired_on_load == 1
        assert ns.routes.topic_queue_table == {} and ns.routes.broker_addr_table == {}
        assert await route_code(ns.port, "WarmBrief") == ResponseCode.TOPIC_NOT_EXIST
        await ns.stop()
        started = last_run(journal(tmp_path / "j"))[0]
        assert started["recovered"] == ns.recovered.to_record()
    finally:
        await ns.stop()


async def test_nothing_is_recovered_when_warm_restart_is_off(tmp_path: Path) -> None:
    ns = controller(tmp_path)
    await ns.start()
    kept = broker(f"127.0.0.1:{ns.port}", "warm-kept", 10911, topics("WarmKept"))
    assert all(outcome.ok for outcome in await kept.start())
    await ns.stop()
    await kept.stop(unregister=False)
    ns = controller(tmp_path, warmRestart="false")
    await ns.start()
    try:
        assert ns.recovered is None
        assert await route_code(ns.port, "WarmKept") == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await ns.stop()
    assert last_run(journal(tmp_path / "j"))[0]["recovered"] is None


# ---------------------------------------------------------------------------- readiness


async def http_get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.text()


async def test_healthz_status_page_and_metrics_follow_the_recovery(tmp_path: Path) -> None:
    ns = controller(tmp_path)
    await ns.start()
    addr = f"127.0.0.1:{ns.port}"
    pair = [broker(addr, f"warm-{i}", 10911 + 10 * i, topics(f"Warm{i}")) for i in range(2)]
    for each in pair:
        assert all(outcome.ok for outcome in await each.start())
    port = ns.port
    await ns.stop()

    ns = controller(tmp_path, listenPort=str(port))  # the brokers' name server address again
    await ns.start()
    http = HttpServer(ns.view)
    await http.start("127.0.0.1", 0)
    try:
        assert await http_get(http.port, "/healthz") == (200, "recovering: 2 provisional brokers")
        assert await http_get(http.port, "/healthz/live") == (200, "live")
        metrics = (await http_get(http.port, "/metrics"))[1]
        assert "pynamesrv_brokers_provisional 2.0" in metrics
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{http.port}/api/status") as response:
                shown = await response.json()
            assert shown["provisionalBrokers"] == 2 and shown["recovered"]["brokers"] == 2
            assert shown["health"] == "recovering: 2 provisional brokers"
            assert all(outcome.ok for outcome in await pair[0].register_all())  # registers again
            async with session.get(f"http://127.0.0.1:{http.port}/api/clusters") as response:
                groups = (await response.json())["clusters"][0]["brokerGroups"]
        assert {g["brokerName"]: g["brokers"][0]["provisional"] for g in groups} == {
            "warm-0": False, "warm-1": True,
        }  # fmt: skip
        assert await http_get(http.port, "/healthz") == (200, "recovering: 1 provisional broker")
        assert all(outcome.ok for outcome in await pair[1].register_all())
        assert await http_get(http.port, "/healthz") == (200, "ok")
        metrics = (await http_get(http.port, "/metrics"))[1]
        assert "pynamesrv_brokers_provisional 0.0" in metrics
    finally:
        await http.stop()
        await ns.stop()
        for each in pair:
            await each.stop(unregister=False)


async def test_the_5x_start_up_wait_is_not_ready_but_live(tmp_path: Path) -> None:
    ns = controller(tmp_path, needWaitForService="true", waitSecondsForService="3600")
    await ns.start()
    http = HttpServer(ns.view)
    await http.start("127.0.0.1", 0)
    try:
        assert await http_get(http.port, "/healthz") == (503, "waiting for service")
        assert await http_get(http.port, "/healthz/live") == (200, "live")
    finally:
        await http.stop()
        await ns.stop()
