"""Small clients for end-to-end tests: route queries and raw frames."""

from __future__ import annotations

import asyncio

from pynamesrv.namesrv import requests
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import GUARD_S, wait_for


async def query_route(port: int, topic: str, version: int = 401) -> RemotingCommand:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(requests.get_routeinfo_by_topic(topic, version=version))
    finally:
        await client.close()


async def wait_until_unrouted(port: int, topic: str) -> None:
    """Ask for the topic's route until the server says it has none (a client's view)."""

    async def unrouted() -> bool:
        return (await query_route(port, topic)).code == ResponseCode.TOPIC_NOT_EXIST

    await wait_for(unrouted, f"{topic} unrouted on port {port}")


async def read_until_eof(reader: asyncio.StreamReader, timeout_s: float = GUARD_S) -> bytes:
    """Everything the server sends before it closes; the timeout only guards against a hang."""
    return await asyncio.wait_for(reader.read(), timeout_s)
