"""Budgets for the whole remoting port, not one connection (issue 32, findings 2 and 5).

Real sockets against an in-process server with small budgets. Slow readers send requests
with large answers and never read; an idle flood fills every slot or every slot one address
may hold. Each test checks that the server sheds the right peers, counts it, and keeps
answering brokers and well-behaved clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.server import Connection
from waiting import GUARD_S, wait_for

StartNamesrv = Callable[..., Awaitable[NamesrvController]]
MIB = 1024 * 1024
Peer = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int, source: str = "127.0.0.1", rcvbuf: int = 0) -> Peer:
    """A connection from ``source`` (any 127.x.y.z is this host); ``rcvbuf``: a small
    receive buffer, so that what the peer does not read stays on the server's side."""
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (EOF or reset), reading what it sent."""
    try:
        async with asyncio.timeout(GUARD_S):
            while await reader.read(1 << 20):
                pass
    except ConnectionResetError:
        pass
    return True


async def ask(peer: Peer, request: RemotingCommand) -> RemotingCommand:
    reader, writer = peer
    writer.write(encode(request))
    decoder = FrameDecoder()
    async with asyncio.timeout(GUARD_S):
        while True:
            chunk = await reader.read(1 << 20)
            assert chunk, "closed by the server"
            frames = decoder.feed(chunk)
            if frames:
                return frames[0]


def server_side(ns: NamesrvController, peer: Peer) -> Connection:
    """The server's connection for a client socket (matched by the client's port)."""
    host, port = peer[1].get_extra_info("sockname")[:2]
    return next(c for c in ns.server.connections if c.peer == f"{host}:{port}")


@contextlib.asynccontextmanager
async def peers_closed_after(ns: NamesrvController) -> AsyncIterator[list[Peer]]:
    """The peers a test opens, closed at the end; then nothing may be left counted."""
    opened: list[Peer] = []
    try:
        yield opened
    finally:
        for _, writer in opened:
            writer.close()
        await wait_for(lambda: not ns.server.connections, "every connection closed")
    assert ns.server.sources == {} and ns.server.pending_answer_bytes == 0
    assert ns.server.buffered_bytes == 0


# ---------------------------------------------------------------- finding 2: slow readers


async def test_slow_readers_together_are_held_to_one_budget(start_namesrv: StartNamesrv) -> None:
    """Twelve peers each send 20 requests with 600 KB answers and read nothing: each is
    under its own high-water mark (1 MiB), together over the server's 8 MiB of unwritten
    answers. The biggest holders are aborted until the total fits; a client that reads and
    a broker are served all along."""
    budget = 8 * MIB
    ns = await start_namesrv(
        writeBufferHighWaterMark=MIB,
        writeBufferLowWaterMark=256 * 1024,
        maxPendingAnswerBytes=budget,
        serverSocketSndBufSize=65536,
    )
    value = "v" * 30_000
    for index in range(20):
        ns.kv.apply(ns.kv.plan_put("ns", f"k{index}", value))
    kv_list = requests.get_kvlist_by_namespace("ns")
    flood = b"".join(encode(kv_list) for _ in range(20))
    async with peers_closed_after(ns) as opened:
        for _ in range(12):
            opened.append(await connect(ns.port, rcvbuf=4096))
            opened[-1][1].write(flood)
        shed = await wait_for(
            lambda: ns.server.budget_shed["pending_answer_bytes"], "slow readers shed"
        )
        assert ns.server.refused["answer_budget"] == shed
        assert ns.server.pending_answer_bytes <= budget
        held = sum(c.transport.get_write_buffer_size() for c in ns.server.connections if c.is_open)
        assert held <= ns.server.pending_answer_bytes  # the figure is never below the truth
        # A well-behaved client gets its large answer and a route; a broker registers.
        opened.append(await connect(ns.port))
        answer = await ask(opened[-1], kv_list)
        assert answer.code == ResponseCode.SUCCESS and len(answer.body) > 20 * 30_000
        assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST
        broker = BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{ns.port}"],
            cluster="C",
            broker_name="b",
            broker_id=0,
            broker_addr="127.0.0.1:10911",
            topics={"T": TopicConfig("T", 4, 4, 6)},
        )
        [outcome] = await broker.start()
        assert outcome.ok, outcome.error
        assert (await query_route(ns.port, "T")).code == ResponseCode.SUCCESS
        await broker.stop()
        assert ns.server.pending_answer_bytes <= budget


# ---------------------------------------------------------------- finding 5: slots


async def test_a_full_server_sheds_its_idlest_connection_not_the_new_one(
    start_namesrv: StartNamesrv,
) -> None:
    """All maxConnections slots taken: a new client is served and the connection longest
    without a read is closed for it, unless a broker is registered on it."""
    ns = await start_namesrv(maxConnections=3)
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="C",
        broker_name="b",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"T": TopicConfig("T", 4, 4, 6)},
    )
    await broker.start()  # the oldest and now the idlest connection: kept, a broker is on it
    async with peers_closed_after(ns) as opened:
        idle = await connect(ns.port)
        opened.append(idle)
        busy = await connect(ns.port)
        opened.append(busy)
        assert (await ask(busy, requests.get_routeinfo_by_topic("T"))).code == ResponseCode.SUCCESS
        await wait_for(lambda: len(ns.server.connections) == 3, "three connections held")

        assert (await query_route(ns.port, "T")).code == ResponseCode.SUCCESS  # the new one
        assert await closed_by_server(idle[0])
        assert ns.server.budget_shed["connections"] == 1
        assert ns.server.refused["max_connections"] == 1
        assert (await ask(busy, requests.get_routeinfo_by_topic("T"))).code == ResponseCode.SUCCESS
        assert ns.routes.live_entry("C", "127.0.0.1:10911") is not None
        await broker.stop()


async def test_a_new_connection_is_refused_only_when_every_slot_holds_a_broker(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv(maxConnections=1)
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="C",
        broker_name="b",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
    )
    await broker.start()
    async with peers_closed_after(ns) as opened:
        opened.append(await connect(ns.port))
        assert await closed_by_server(opened[-1][0])
        assert ns.server.budget_shed["connections"] == 1
        assert ns.routes.live_entry("C", "127.0.0.1:10911") is not None
        await broker.stop()


async def test_one_address_cannot_take_every_slot(start_namesrv: StartNamesrv) -> None:
    """maxConnectionsPerSource caps each address, loopback included; other addresses (here
    127.0.0.2, the same host by another address) still get in."""
    ns = await start_namesrv(maxConnectionsPerSource=3)
    async with peers_closed_after(ns) as opened:
        for _ in range(3):
            opened.append(await connect(ns.port))
        await wait_for(lambda: ns.server.sources == {"127.0.0.1": 3}, "three counted")
        opened.append(await connect(ns.port))
        assert await closed_by_server(opened[-1][0])
        assert ns.server.budget_shed["connections_per_source"] == 1
        assert ns.server.refused["max_connections_per_source"] == 1
        other = await connect(ns.port, source="127.0.0.2")
        opened.append(other)
        assert (await ask(other, requests.get_routeinfo_by_topic("T"))).code == (
            ResponseCode.TOPIC_NOT_EXIST
        )
        assert ns.server.sources == {"127.0.0.1": 3, "127.0.0.2": 1}
        opened.pop(0)[1].close()  # a slot of 127.0.0.1 is free again
        await wait_for(lambda: ns.server.sources["127.0.0.1"] == 2, "one closed")
        opened.append(await connect(ns.port))
        assert (await ask(opened[-1], requests.get_routeinfo_by_topic("T"))).code == (
            ResponseCode.TOPIC_NOT_EXIST
        )


def v1(source: str) -> bytes:
    return f"PROXY TCP4 {source} 127.0.0.1 40000 9876\r\n".encode()


@pytest.mark.parametrize("trusted", ["127.0.0.1", ""], ids=["named-balancer", "anyone"])
async def test_behind_a_balancer_each_client_address_is_capped(
    start_namesrv: StartNamesrv, trusted: str
) -> None:
    """Through PROXY headers the client address counts, once the header is read; a balancer
    named in proxyProtocolTrustedAddresses is not capped itself (it carries everyone), one
    that is not named counts as the address it is until its header says otherwise."""
    ns = await start_namesrv(
        maxConnectionsPerSource=2, proxyProtocol="auto", proxyProtocolTrustedAddresses=trusted
    )
    query = requests.get_routeinfo_by_topic("T")
    async with peers_closed_after(ns) as opened:
        for client in ("192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.3"):
            opened.append(await connect(ns.port))
            opened[-1][1].write(v1(client))
            assert (await ask(opened[-1], query)).code == ResponseCode.TOPIC_NOT_EXIST
        assert ns.server.sources == {"192.0.2.1": 2, "192.0.2.2": 1, "192.0.2.3": 1}
        third = await connect(ns.port)
        opened.append(third)
        third[1].write(v1("192.0.2.1") + encode(query))
        assert await closed_by_server(third[0])
        assert ns.server.budget_shed["connections_per_source"] == 1
        assert not ns.server.budget_shed["connections"]
