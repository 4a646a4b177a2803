"""Small clients for end-to-end tests: route queries and raw frames."""

from __future__ import annotations

import asyncio

from pynamesrv.namesrv import requests
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import GUARD_S, wait_for


async def request_once(port: int, request: RemotingCommand) -> RemotingCommand:
    """``request``'s answer over a connection of its own to the server on ``port``."""
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(request)
    finally:
        await client.close()


async def query_route(port: int, topic: str, version: int = 401) -> RemotingCommand:
    return await request_once(port, requests.get_routeinfo_by_topic(topic, version=version))


async def wait_until_unrouted(port: int, topic: str) -> None:
    """Ask for the topic's route until the server says it has none (a client's view)."""

    async def unrouted() -> bool:
        return (await query_route(port, topic)).code == ResponseCode.TOPIC_NOT_EXIST

    await wait_for(unrouted, f"{topic} unrouted on port {port}")


async def read_until_eof(reader: asyncio.StreamReader, timeout_s: float = GUARD_S) -> bytes:
    """Everything the server sends before it closes; the timeout only guards against a hang."""
    return await asyncio.wait_for(reader.read(), timeout_s)
