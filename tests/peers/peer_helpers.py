"""Shared helpers of the peer tests: the registered route and running a client subprocess.

Kept out of conftest.py because test modules import these names, and importing a conftest
module by name is ambiguous when several test folders have one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_broker import FakeBroker
from pynamesrv.namesrv import requests
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient
from waiting import GUARD_S

PEERS_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class PeerRoute:
    """What the tests registered: the name server, the topic and where its route points."""

    namesrv_addr: str
    topic: str
    broker: FakeBroker
    broker_name: str
    write_queue_nums: int
    route: dict[str, Any]
    route_body: bytes


async def fetch_route(
    namesrv_addr: str, topic: str, *, version: int
) -> tuple[bytes, dict[str, Any]]:
    """GET_ROUTEINFO_BY_TOPIC as a client of ``version`` asks it: raw body and lenient parse."""
    host, port = namesrv_addr.rsplit(":", 1)
    client = await RemotingClient.connect(host, int(port))
    try:
        request = requests.get_routeinfo_by_topic(topic, language="CPP", version=version)
        response = await client.request(request, timeout=GUARD_S)
    finally:
        await client.close()
    assert response.code == 0, f"route for {topic}: code {response.code} {response.remark!r}"
    route: dict[str, Any] = fastjson.loads(response.body)
    return response.body, route


@dataclass(frozen=True)
class ClientRun:
    """How a client subprocess ended and what it printed."""

    argv: Sequence[str]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def result(self) -> dict[str, Any] | None:
        """The JSON line the send script printed last, if any."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
        return None

    def describe(self, extra: str = "") -> str:
        tail = "\n".join(self.stderr.strip().splitlines()[-40:])
        return (
            f"client {' '.join(self.argv)}\n exit={self.returncode} timed_out={self.timed_out}\n"
            f" stdout: {self.stdout.strip()}\n stderr (tail):\n{tail}\n{extra}"
        )


async def run_client(
    argv: Sequence[str], *, timeout: float, env: dict[str, str] | None = None
) -> ClientRun:
    """Run a client script without blocking the event loop our servers run on."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=PEERS_DIR,
    )
    timed_out = False
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        timed_out = True
        proc.kill()  # our own child, by its handle
        out, err = await proc.communicate()
    return ClientRun(
        argv=list(argv),
        returncode=proc.returncode,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        timed_out=timed_out,
    )


class SteppedClient:
    """A client script sending one message per topic, each after the first on a line sent
    to its stdin: the same producer process, e.g. across a name-server restart. Each result
    line is awaited as it comes (an event), the hard timeout only guards against a hang."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.results: list[dict[str, Any]] = []

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
            cwd=PEERS_DIR,
        )

    async def next_result(self, timeout: float) -> dict[str, Any]:
        """The next JSON line the script prints (its result for one send)."""
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            if not line:
                raise AssertionError(f"client ended early\n{await self.finish(timeout)}")
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                self.results.append(value)
                return value

    def step(self) -> None:
        """Cue the next send."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"next\n")

    async def finish(self, timeout: float) -> str:
        """Wait for the exit (killing a hung client) and describe the run for messages."""
        assert self.proc is not None
        try:
            _, err = await asyncio.wait_for(self.proc.communicate(), timeout)
        except TimeoutError:
            self.proc.kill()  # our own child, by its handle
            _, err = await self.proc.communicate()
        tail = "\n".join(err.decode("utf-8", "replace").strip().splitlines()[-40:])
        return (
            f"client {' '.join(self.argv)}\n exit={self.proc.returncode}\n"
            f" results: {self.results}\n stderr (tail):\n{tail}"
        )
