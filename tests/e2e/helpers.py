"""Small clients for end-to-end tests: route queries and raw frames."""

from __future__ import annotations

import asyncio
import time

from pynamesrv.namesrv import requests
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand


async def query_route(port: int, topic: str, version: int = 401) -> RemotingCommand:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(requests.get_routeinfo_by_topic(topic, version=version))
    finally:
        await client.close()


async def wait_until_unrouted(port: int, topic: str, timeout_s: float) -> float:
    """Poll until the topic has no route; returns the seconds it took."""
    start = time.monotonic()
    while True:
        answer = await query_route(port, topic)
        if answer.code == ResponseCode.TOPIC_NOT_EXIST:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{topic} still routed after {timeout_s}s")
        await asyncio.sleep(0.02)


async def read_until_eof(reader: asyncio.StreamReader, timeout_s: float = 2.0) -> bytes:
    """Everything the server sends before it closes; fails if it does not close in time."""
    return await asyncio.wait_for(reader.read(), timeout_s)
