"""Brokers leave the routes: expiry, unregister, connection close, idle, and the stale race."""

from __future__ import annotations

import asyncio
import time

from helpers import query_route, wait_until_unrouted
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import BrokerRemoved, Event
from pynamesrv.remoting.codes import ResponseCode


def make_broker(ns: NamesrvController, name: str = "broker-a", **kwargs: object) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="DefaultCluster",
        broker_name=name,
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        ha_server_addr="127.0.0.1:10912",
        topics={"LiveTopic": TopicConfig("LiveTopic", 4, 4, 6)},
        **kwargs,  # type: ignore[arg-type]
    )


def removals(ns: NamesrvController) -> list[BrokerRemoved]:
    seen: list[BrokerRemoved] = []

    def listen(events: list[Event]) -> None:
        seen.extend(e for e in events if isinstance(e, BrokerRemoved))

    ns.add_listener(listen)
    return seen


async def test_silent_broker_expires_after_its_heartbeat_timeout(start_namesrv) -> None:
    ns = await start_namesrv(scanNotActiveBrokerInterval=100)
    removed = removals(ns)
    broker = make_broker(ns, heartbeat_timeout_ms=400, register_period_s=0.1)
    await broker.start()
    await asyncio.sleep(0.6)  # heartbeats keep it alive past its timeout
    assert (await query_route(ns.port, "LiveTopic")).code == ResponseCode.SUCCESS
    await broker.die_silently()  # connection stays open, heartbeats stop
    took = await wait_until_unrouted(ns.port, "LiveTopic", timeout_s=3)
    assert took < 1.5
    assert [r.reason for r in removed] == ["expired"]
    # Java closes the channel of an expired broker; so do we.
    client = broker._clients[f"127.0.0.1:{ns.port}"]
    await asyncio.wait_for(client.closed.wait(), 2)
    await broker.stop(unregister=False)


async def test_graceful_stop_unregisters_at_once(namesrv: NamesrvController) -> None:
    removed = removals(namesrv)
    broker = make_broker(namesrv)
    [outcome] = await broker.start()
    assert outcome.ok
    await broker.stop()
    assert (await query_route(namesrv.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    assert [r.reason for r in removed] == ["unregister"]


async def test_closed_connection_removes_broker_immediately(namesrv: NamesrvController) -> None:
    removed = removals(namesrv)
    broker = make_broker(namesrv)
    await broker.start()
    await broker.die_silently()
    await broker.close_connections()
    took = await wait_until_unrouted(namesrv.port, "LiveTopic", timeout_s=2)
    assert took < 0.5
    assert [r.reason for r in removed] == ["channel_closed"]


async def test_idle_connection_is_closed_and_its_broker_removed(start_namesrv) -> None:
    ns = await start_namesrv(serverChannelMaxIdleTimeSeconds=1)
    removed = removals(ns)
    broker = make_broker(ns)
    await broker.start()
    await broker.die_silently()
    await wait_until_unrouted(ns.port, "LiveTopic", timeout_s=4)
    assert [r.reason for r in removed] == ["channel_idle"]
    await broker.stop(unregister=False)


async def test_old_connection_closing_after_reregistration_keeps_broker(
    namesrv: NamesrvController,
) -> None:
    """RocketMQ #11043: a removal decided for an old connection must spare the new one."""
    removed = removals(namesrv)
    first = make_broker(namesrv)
    await first.start()
    await first.die_silently()
    second = make_broker(namesrv)  # the same broker, reconnected on a new connection
    await second.start()
    await first.close_connections()  # the old connection's close arrives late
    await asyncio.sleep(0.2)
    answer = await query_route(namesrv.port, "LiveTopic")
    assert answer.code == ResponseCode.SUCCESS
    assert removed == []
    await second.stop()
    assert (await query_route(namesrv.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_broker_registers_with_every_name_server(start_namesrv) -> None:
    servers = [await start_namesrv(), await start_namesrv()]
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{s.port}" for s in servers] + ["127.0.0.1:1"],
        cluster="DefaultCluster",
        broker_name="broker-a",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"T": TopicConfig("T", 2, 2, 6)},
        compressed=True,
        timeout_s=1.0,
    )
    outcomes = await broker.start()
    assert [o.ok for o in outcomes] == [True, True, False]  # the unreachable one fails alone
    for server in servers:
        assert (await query_route(server.port, "T")).code == ResponseCode.SUCCESS
    await broker.stop()
    for server in servers:
        assert (await query_route(server.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_expired_broker_leaves_within_a_second_of_its_deadline(
    namesrv: NamesrvController,
) -> None:
    """The default 10 s scan period is only an upper bound: the deadline heap wakes us."""
    others = [
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{namesrv.port}"],
            cluster="DefaultCluster",
            broker_name=f"other-{i}",
            broker_id=0,
            broker_addr=f"127.0.0.2:{20000 + i}",
            topics={f"Other{i}": TopicConfig(f"Other{i}", 4, 4, 6)},
        )
        for i in range(100)
    ]
    await asyncio.gather(*(b.register_all() for b in others))
    victim = make_broker(namesrv, heartbeat_timeout_ms=6_000)
    await victim.start()
    await victim.die_silently()
    deadline = namesrv.routes.broker_live_table[("DefaultCluster", victim.broker_addr)]
    deadline_ms = deadline.last_update_ms + deadline.timeout_ms
    await wait_until_unrouted(namesrv.port, "LiveTopic", timeout_s=10)
    late_ms = time.time_ns() // 1_000_000 - deadline_ms
    assert late_ms <= 1_100, f"removed {late_ms} ms after its deadline"
    assert len(namesrv.routes.broker_live_table) == 100
    await victim.stop(unregister=False)
    await asyncio.gather(*(b.stop() for b in others))
