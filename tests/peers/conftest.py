"""Fixtures for the real-client tests: a broker double and a route that points at it.

The name server is the shared ``namesrv`` fixture of tests/conftest.py (in-process, uvloop,
127.0.0.1, free port, scratch storage). The clients themselves (rocketmq-client-cpp via PyPI
``rocketmq``, Node ``ali-ons``) always run in a subprocess with a hard timeout: native or Node
code that hangs or crashes must fail one test, not the pytest process. A missing client is a
failure, never a skip: ``make test`` installs both, and a green run must have run them. To
leave them out on purpose, deselect the marker: ``pytest -m "not peers"``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import NoReturn

import pytest

from fake_broker import FakeBroker
from peer_helpers import PEERS_DIR, PeerRoute, fetch_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController

NODE_DIR = PEERS_DIR / "node"
CPP_SEND = PEERS_DIR / "cpp_send.py"
ALI_ONS_VERSION = "3.12.0"
ROCKETMQ_PYPI_VERSION = "0.4.4"

BROKER_NAME = "broker-peer"
CLUSTER = "DefaultCluster"
WRITE_QUEUE_NUMS = 4
READ_QUEUE_NUMS = 4


def missing_prerequisite(what: str, fix: str) -> NoReturn:
    """Fail with the fix: a green run must have run the real clients."""
    pytest.fail(
        f"{what} is not available; install it with: {fix} "
        '(or leave the real-client tests out on purpose: -m "not peers")',
        pytrace=False,
    )


@pytest.fixture(scope="session")
def node_client() -> list[str]:
    """The command prefix that runs node/send.js, after checking node and ali-ons are there."""
    node = shutil.which("node")
    if node is None:
        missing_prerequisite("node (Node.js)", "apt-get install -y nodejs npm")
    manifest = NODE_DIR / "node_modules" / "ali-ons" / "package.json"
    if not manifest.is_file():
        missing_prerequisite(
            f"npm package ali-ons {ALI_ONS_VERSION}", "npm ci --prefix tests/peers/node"
        )
    version = json.loads(manifest.read_text(encoding="utf-8")).get("version")
    if version != ALI_ONS_VERSION:
        missing_prerequisite(
            f"ali-ons {ALI_ONS_VERSION} (found {version})", "npm ci --prefix tests/peers/node"
        )
    return [str(node), str(NODE_DIR / "send.js")]


@pytest.fixture(scope="session")
def cpp_client() -> list[str]:
    """The command prefix that runs cpp_send.py, after checking librocketmq.so loads.

    The check imports the binding in a child process: that both finds the package and
    proves the bundled shared library's dependencies resolve (ldd-level failures show here).
    """
    probe = subprocess.run(
        [sys.executable, "-c", "import rocketmq, rocketmq.client"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        missing_prerequisite(
            f"PyPI rocketmq=={ROCKETMQ_PYPI_VERSION} for {sys.executable} ({last})",
            f"{sys.executable} -m pip install -e '.[peers]'",
        )
    return [sys.executable, str(CPP_SEND)]


@pytest.fixture
async def fake_broker(request: pytest.FixtureRequest) -> AsyncIterator[FakeBroker]:
    """A broker double that owns the test's topic with WRITE_QUEUE_NUMS write queues."""
    topic = peer_topic(request)
    broker = FakeBroker(write_queue_nums={topic: WRITE_QUEUE_NUMS})
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


@pytest.fixture
async def peer_route(
    request: pytest.FixtureRequest, namesrv: NamesrvController, fake_broker: FakeBroker
) -> AsyncIterator[PeerRoute]:
    """Register the test's topic (4 write queues) for a master at the broker double's address.

    Before handing over, the route is read back as rocketmq-client-cpp asks for it
    (version 63, dialect A body) and checked to point at the double, so a broken route fails
    here with the body in the message rather than later as a client timeout.
    """
    topic = peer_topic(request)
    namesrv_addr = f"127.0.0.1:{namesrv.port}"
    client = BrokerClient(
        namesrv_addrs=[namesrv_addr],
        cluster=CLUSTER,
        broker_name=BROKER_NAME,
        broker_id=0,
        broker_addr=fake_broker.addr,
        ha_server_addr=f"{fake_broker.host}:{fake_broker.port + 1}",
        topics={
            topic: TopicConfig(
                topic,
                read_queue_nums=READ_QUEUE_NUMS,
                write_queue_nums=WRITE_QUEUE_NUMS,
                perm=6,
            )
        },
        register_period_s=30.0,
        compressed=False,
    )
    outcomes = await client.start()
    try:
        assert outcomes and all(o.ok for o in outcomes), f"REGISTER_BROKER failed: {outcomes}"
        route_body, route = await fetch_route(namesrv_addr, topic, version=63)
        addrs = [bd.get("brokerAddrs", {}) for bd in route.get("brokerDatas") or []]
        assert any(a.get("0") == fake_broker.addr for a in addrs), (
            f"route of {topic} does not name master {fake_broker.addr}: {route_body!r}"
        )
        yield PeerRoute(
            namesrv_addr=namesrv_addr,
            topic=topic,
            broker=fake_broker,
            broker_name=BROKER_NAME,
            write_queue_nums=WRITE_QUEUE_NUMS,
            route=route,
            route_body=route_body,
        )
    finally:
        await client.stop()


def peer_topic(request: pytest.FixtureRequest) -> str:
    """One topic per test (from its name) so a stray client of another test cannot match."""
    name = request.node.name.replace("test_", "", 1)
    return "Peer_" + "".join(c if c.isalnum() else "_" for c in name)
