"""GO_AWAY during a graceful shutdown (issue 24, finding 6), with a client that reconnects.

Java 5.2.0+ answers every request of a client newer than 5.3.1 with GO_AWAY (1500) while it
shuts down; such a client drops the connection and sends the request again on a new one,
which a load balancer hands to another name server. Older clients are served until the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand
from waiting import wait_for

StartNamesrv = Callable[..., Awaitable[NamesrvController]]
NEW = Version.V5_3_1 + 1  # the first version that understands GO_AWAY
OLD = Version.V5_3_1


class ReconnectingClient:
    """The other side: a client newer than 5.3.1. On GO_AWAY it closes the connection and
    sends the request again on a new one, to the next name server of its list (behind a
    load balancer the same address reaches another one)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.index = 0
        self.go_aways = 0
        self._client: RemotingClient | None = None

    async def request(self, make: Callable[[], RemotingCommand]) -> RemotingCommand:
        while True:
            if self._client is None:
                self._client = await RemotingClient.connect("127.0.0.1", self.ports[self.index])
            answer = await self._client.request(make(), timeout=10)
            if answer.code != ResponseCode.GO_AWAY:
                return answer
            self.go_aways += 1
            await self._client.close()
            self._client = None
            self.index += 1

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


async def read_frames(port: int, data: bytes, count: int) -> list[RemotingCommand]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    decoder, got = FrameDecoder(), []
    try:
        while len(got) < count:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, f"closed after {len(got)} answers"
            got += decoder.feed(chunk)
    finally:
        writer.close()
    return got


async def test_graceful_shutdown_sends_new_clients_to_another_name_server(
    start_namesrv: StartNamesrv,
) -> None:
    leaving = await start_namesrv(enableShutdownGracefully=True, shutdownWaitTimeSeconds=600)
    staying = await start_namesrv()
    setup = await RemotingClient.connect("127.0.0.1", staying.port)
    assert (await setup.request(requests.put_kv_config("ns", "k", "on-staying"))).code == 0
    await setup.close()

    def get_value() -> RemotingCommand:
        return requests.get_kv_config("ns", "k", version=NEW)

    client = ReconnectingClient([leaving.port, staying.port])
    try:
        before = await client.request(get_value)
        assert (before.code, client.go_aways) == (ResponseCode.QUERY_NOT_FOUND, 0)  # leaving's

        second_signal = asyncio.Event()
        draining = asyncio.create_task(leaving.drain(second_signal))
        await wait_for(lambda: leaving.going_away, "the drain to begin")

        after = await client.request(get_value)
        assert after.code == ResponseCode.SUCCESS
        assert after.ext_fields is not None and after.ext_fields["value"] == "on-staying"
        assert (client.go_aways, client.index) == (1, 1)

        # An older client does not know GO_AWAY: it is served until the end.
        assert (await query_route(leaving.port, "T", version=OLD)).code == (
            ResponseCode.TOPIC_NOT_EXIST
        )
        assert not draining.done()
        second_signal.set()
        await asyncio.wait_for(draining, 10)
    finally:
        await client.close()


async def test_go_away_answer_is_javas_and_oneway_requests_are_dropped(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv(enableShutdownGracefully=True, shutdownWaitTimeSeconds=600)
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="C",
        broker_name="b",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"Routed": TopicConfig("Routed", 4, 4, 6)},
    )
    [outcome] = await broker.register_all()
    assert outcome.ok, outcome.error
    assert (await query_route(ns.port, "Routed", version=NEW)).code == ResponseCode.SUCCESS
    second_signal = asyncio.Event()
    draining = asyncio.create_task(ns.drain(second_signal))
    await wait_for(lambda: ns.going_away, "the drain to begin")

    # A route query the fast path would answer unread gets GO_AWAY too.
    query = requests.get_routeinfo_by_topic("Routed", version=NEW)
    query.opaque = 41
    (answer,) = await read_frames(ns.port, encode(query), 1)
    assert (answer.code, answer.remark, answer.opaque) == (
        ResponseCode.GO_AWAY,
        "please go away",
        41,
    )
    assert answer.flag & FLAG_RESPONSE

    # A oneway write of a new client is neither answered nor applied (as in Java); the
    # request after it, from an old client, is answered.
    oneway = requests.put_kv_config("ns", "k", "v", version=NEW)
    oneway.opaque, oneway.flag = 7, FLAG_ONEWAY
    read = requests.get_kv_config("ns", "k", version=OLD)
    read.opaque = 8
    (answer,) = await read_frames(ns.port, encode(oneway) + encode(read), 1)
    assert (answer.opaque, answer.code) == (8, ResponseCode.QUERY_NOT_FOUND)
    assert ns.stats.error_answers[query.code, ResponseCode.GO_AWAY] == 1
    second_signal.set()
    await asyncio.wait_for(draining, 10)
    await broker.stop()


async def test_without_graceful_shutdown_nothing_says_go_away(start_namesrv: StartNamesrv) -> None:
    ns = await start_namesrv()
    await asyncio.wait_for(ns.drain(asyncio.Event()), 10)  # returns at once
    assert not ns.going_away
    assert (await query_route(ns.port, "T", version=NEW)).code == ResponseCode.TOPIC_NOT_EXIST


async def test_shutdown_wait_cannot_be_changed_remotely(start_namesrv: StartNamesrv) -> None:
    """A remote writer could otherwise hold every restart for an hour."""
    ns = await start_namesrv()
    client = await RemotingClient.connect("127.0.0.1", ns.port)
    try:
        answer = await client.request(
            requests.update_namesrv_config({"shutdownWaitTimeSeconds": "3600"})
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark is not None and "shutdownWaitTimeSeconds" in answer.remark
    assert ns.config.shutdown_wait_time_seconds == 30


async def test_graceful_shutdown_cannot_be_switched_on_remotely(
    start_namesrv: StartNamesrv,
) -> None:
    """Issue 32 finding 9: the switch changes what every restart does (it held brokers'
    heartbeats off and let the draining server expire them): only the -c file sets it."""
    ns = await start_namesrv()
    client = await RemotingClient.connect("127.0.0.1", ns.port)
    try:
        answer = await client.request(
            requests.update_namesrv_config({"enableShutdownGracefully": "true"})
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark is not None and "enableShutdownGracefully" in answer.remark
    assert not ns.config.enable_shutdown_gracefully


async def test_a_drain_neither_expires_nor_removes_the_brokers_it_sent_away(
    start_namesrv: StartNamesrv, tmp_path: Path
) -> None:
    """Issue 32 finding 9: a 5.3.2+ broker with a 10 s timeout gets GO_AWAY on its
    heartbeats during the drain; the draining server must not expire it or journal its
    removal when it drops the connection, so the warm restart keeps its routes as a plain
    SIGTERM restart does."""
    journal = {
        "journalEnable": True,
        "instanceName": "drain",
        "journalDir": str(tmp_path / "journal"),
    }
    ns = await start_namesrv(enableShutdownGracefully=True, shutdownWaitTimeSeconds=600, **journal)
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="C",
        broker_name="b",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"Routed": TopicConfig("Routed", 4, 4, 6)},
        heartbeat_timeout_ms=10_000,
        version=NEW,
        register_period_s=3600.0,
    )
    [outcome] = await broker.register_all()
    assert outcome.ok, outcome.error
    second_signal = asyncio.Event()
    draining = asyncio.create_task(ns.drain(second_signal))
    try:
        await wait_for(lambda: ns.going_away, "the drain to begin")
        live = ns.routes.live_entry("C", "127.0.0.1:10911")
        assert live is not None
        live.last_update_ms -= 60_000  # its heartbeats were sent away for a minute
        [sent_away] = await broker.register_all()
        assert sent_away.error is not None and "1500" in sent_away.error
        assert ns.clock_ms() - live.last_update_ms < 10_000  # a sign of life all the same
        ns.scan_expired(ns.clock_ms() + 60_000)  # past its deadline: the drain keeps it
        await broker.close_connections()  # as a client told GO_AWAY does
        await wait_for(lambda: not ns.server.connections, "the broker's connection to close")
        assert ns.routes.live_entry("C", "127.0.0.1:10911") is not None
    finally:
        second_signal.set()
        await asyncio.wait_for(draining, 10)
        await broker.close_connections()
    await ns.stop()
    restarted = await start_namesrv(**journal)
    assert restarted.routes.is_provisional("C", "127.0.0.1:10911")
    assert (await query_route(restarted.port, "Routed")).code == ResponseCode.SUCCESS
