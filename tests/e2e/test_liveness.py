"""Brokers leave the routes: expiry, unregister, connection close, idle, and the stale race."""

from __future__ import annotations

import asyncio

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import BrokerHeartbeat, BrokerRegistered, BrokerRemoved
from pynamesrv.remoting.codes import ResponseCode
from waiting import GUARD_S, EventLog, wait_for


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


async def test_silent_broker_expires_after_its_heartbeat_timeout(start_namesrv) -> None:
    ns = await start_namesrv(scanNotActiveBrokerInterval=100)
    log = EventLog(ns)
    timeout_ms = 600
    broker = make_broker(ns, heartbeat_timeout_ms=timeout_ms, register_period_s=0.1)
    await broker.start()
    [registered] = log.of(BrokerRegistered)
    # Heartbeats keep it alive past its timeout: a heartbeat comes (a refresh, not a new
    # registration) well after the deadline the first registration set.
    past_two_timeouts = registered.ts_ms + 2 * timeout_ms
    await log.until(
        lambda: any(beat.ts_ms > past_two_timeouts for beat in log.of(BrokerHeartbeat)),
        "a heartbeat past two timeouts",
    )
    assert log.of(BrokerRemoved) == []
    assert (await query_route(ns.port, "LiveTopic")).code == ResponseCode.SUCCESS

    await broker.die_silently()  # connection stays open, heartbeats stop
    [removed] = await log.wait(BrokerRemoved)
    assert removed.event.reason == "expired"
    assert removed.event.last_heartbeat_ts is not None
    assert removed.ts_ms > removed.event.last_heartbeat_ts + timeout_ms  # not before its deadline
    assert (await query_route(ns.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    # Java closes the channel of an expired broker; so do we.
    client = broker.connection(f"127.0.0.1:{ns.port}")
    assert client is not None
    await asyncio.wait_for(client.closed.wait(), GUARD_S)
    await broker.stop(unregister=False)


async def test_graceful_stop_unregisters_at_once(namesrv: NamesrvController) -> None:
    log = EventLog(namesrv)
    broker = make_broker(namesrv)
    [outcome] = await broker.start()
    assert outcome.ok
    await broker.stop()  # returns once the name server answered the unregister
    assert (await query_route(namesrv.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    assert [r.reason for r in log.events(BrokerRemoved)] == ["unregister"]


async def test_closed_connection_removes_broker_without_waiting_for_expiry(
    namesrv: NamesrvController,
) -> None:
    log = EventLog(namesrv)
    broker = make_broker(namesrv)  # the default 120 s heartbeat timeout
    await broker.start()
    await broker.die_silently()
    await broker.close_connections()
    [removed] = await log.wait(BrokerRemoved)
    assert removed.event.reason == "channel_closed"
    assert (await query_route(namesrv.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_idle_connection_is_closed_and_its_broker_removed(start_namesrv) -> None:
    ns = await start_namesrv(serverChannelMaxIdleTimeSeconds=1)
    log = EventLog(ns)
    broker = make_broker(ns)
    await broker.start()
    await broker.die_silently()
    [removed] = await log.wait(BrokerRemoved)
    assert removed.event.reason == "channel_idle"
    assert (await query_route(ns.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    await broker.stop(unregister=False)


async def test_old_connection_closing_after_reregistration_keeps_broker(
    namesrv: NamesrvController,
) -> None:
    """RocketMQ #11043: a removal decided for an old connection must spare the new one."""
    log = EventLog(namesrv)
    first = make_broker(namesrv)
    await first.start()
    await first.die_silently()
    second = make_broker(namesrv)  # the same broker, reconnected on a new connection
    await second.start()
    assert len(namesrv.server.connections) == 2
    await first.close_connections()  # the old connection's close arrives late
    # The server has handled that close once the old connection left its table.
    await wait_for(lambda: len(namesrv.server.connections) == 1, "the old connection's close")
    answer = await query_route(namesrv.port, "LiveTopic")
    assert answer.code == ResponseCode.SUCCESS
    assert log.of(BrokerRemoved) == []
    await second.stop()
    assert (await query_route(namesrv.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    assert [r.reason for r in log.events(BrokerRemoved)] == ["unregister"]


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


async def test_expired_broker_leaves_at_its_deadline_not_at_the_next_scan(
    start_namesrv,
) -> None:
    """The scan period is only an upper bound: the deadline heap wakes the server for the
    broker's own deadline (among 100 later ones), never before it. With a minute between
    scans, a removal inside the guard (half that) can only come from the deadline."""
    ns = await start_namesrv(scanNotActiveBrokerInterval=2 * int(GUARD_S * 1000))
    log = EventLog(ns)
    others = [
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{ns.port}"],
            cluster="DefaultCluster",
            broker_name=f"other-{i}",
            broker_id=0,
            broker_addr=f"127.0.0.2:{20000 + i}",
            topics={f"Other{i}": TopicConfig(f"Other{i}", 4, 4, 6)},
        )
        for i in range(100)
    ]
    await asyncio.gather(*(b.register_all() for b in others))
    timeout_ms = 3_000
    victim = make_broker(ns, heartbeat_timeout_ms=timeout_ms)
    await victim.start()
    await victim.die_silently()
    [removed] = await log.wait(BrokerRemoved)
    assert (removed.event.broker_addr, removed.event.reason) == (victim.broker_addr, "expired")
    assert removed.event.last_heartbeat_ts is not None
    assert removed.ts_ms > removed.event.last_heartbeat_ts + timeout_ms  # not before its deadline
    assert (await query_route(ns.port, "LiveTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    assert (await query_route(ns.port, "Other99")).code == ResponseCode.SUCCESS
    assert len(ns.routes.broker_live_table) == 100
    await victim.stop(unregister=False)
    await asyncio.gather(*(b.stop() for b in others))
