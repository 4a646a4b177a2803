"""A real third-party producer against ``serve --workers 2`` (issue 33): rocketmq-client-cpp
(PyPI ``rocketmq`` 0.4.4, the cheapest real client here) must find the broker double through
a route a *worker* answered, from its replica of the writer's stream.

The client's connection lands where the kernel puts it (SO_REUSEPORT); a run that the writer
answered any part of is repeated (each run is checked all the same), until one the worker
answered alone: the writer's own request count (``worker="0"``) did not move during it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fake_broker import SEND_MESSAGE, FakeBroker
from peer_helpers import fetch_route, run_client
from pynamesrv.broker.client import BrokerClient, TopicConfig
from workers_served import WorkersServed

pytestmark = pytest.mark.peers

TOPIC = "Peer_workers_cpp"
HARD_TIMEOUT = 30.0
MAX_RUNS = 12  # runs until one lands on the worker alone (2^-12 to miss with 2 processes)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[WorkersServed]:
    server = WorkersServed(tmp_path / "ns")
    server.home.mkdir()
    try:
        await server.start()
        yield server
    finally:
        server.kill()
        if server.proc is not None:
            await server.proc.wait()


async def test_rocketmq_client_cpp_sends_through_a_route_a_worker_answered(
    cpp_client: list[str], served: WorkersServed, tmp_path: Path
) -> None:
    broker = FakeBroker(write_queue_nums={TOPIC: 4})
    await broker.start()
    namesrv = f"127.0.0.1:{served.port}"
    registrar = BrokerClient(
        namesrv_addrs=[namesrv], cluster="DefaultCluster", broker_name="broker-peer",
        broker_id=0, broker_addr=broker.addr, ha_server_addr=f"{broker.host}:{broker.port + 1}",
        topics={TOPIC: TopicConfig(TOPIC, read_queue_nums=4, write_queue_nums=4, perm=6)},
        register_period_s=30.0, compressed=False,
    )  # fmt: skip
    outcomes = await registrar.start()
    try:
        assert outcomes and all(o.ok for o in outcomes), outcomes
        _, route = await fetch_route(namesrv, TOPIC, version=63)
        assert any(b["brokerAddrs"].get("0") == broker.addr for b in route["brokerDatas"])
        for attempt in range(MAX_RUNS):
            home = tmp_path / f"cpp-home-{attempt}"
            home.mkdir()
            body = f"hello {attempt} via a pynamesrv worker"
            before = await served.writer_requests()
            run = await run_client(
                [*cpp_client, "--namesrv", namesrv, "--topic", TOPIC, "--body", body,
                 "--group", "PeerCppProducer", "--hard-timeout", str(HARD_TIMEOUT)],
                timeout=HARD_TIMEOUT + 15,
                env={**os.environ, "HOME": str(home)},
            )  # fmt: skip
            assert run.returncode == 0 and (run.result or {}).get("ok"), run.describe()
            assert broker.messages[-1].body == body.encode()
            assert broker.messages[-1].request_code == SEND_MESSAGE
            if await served.writer_requests() == before:
                return  # every name-server request of this run was answered by the worker
        pytest.fail(f"in {MAX_RUNS} runs the client never talked to the worker alone")
    finally:
        await registrar.stop()
        await broker.stop()
