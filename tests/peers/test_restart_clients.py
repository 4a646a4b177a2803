"""Real third-party producers keep sending across a name-server restart (warm restart).

One producer process (rocketmq-client-cpp, ali-ons) sends to a first topic, the name server
stops and starts again on the same port with the same journal, and the same producer sends
to a second topic, whose route it has never asked for: it reconnects to the name server and
gets the route recovered from the journal. The broker that owns both topics registered once,
before the restart, with the default 30 s period: it does not register again meanwhile, so
the second route can only come from the recovered state (its broker is still provisional).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fake_broker import SEND_MESSAGE, SEND_MESSAGE_V2, FakeBroker
from peer_helpers import SteppedClient
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController

pytestmark = pytest.mark.peers

BEFORE, AFTER = "Peer_warm_before", "Peer_warm_after"
HARD_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 45.0


def namesrv(tmp_path: Path, port: int = 0) -> NamesrvController:
    """An in-process name server; instanceName names its journal before it binds."""
    home = tmp_path / "ns-home"
    config = NamesrvConfig(
        listen_port=port,
        state_dir=str(home),
        kv_config_path=str(home / "kvConfig.json"),
        config_store_path=str(home / "namesrv.properties"),
    )
    for key, value in {"httpPort": "0", "instanceName": "peer-warm",
                       "journalDir": str(tmp_path / "journal")}.items():  # fmt: skip
        config.set(key, value)
    return NamesrvController(config, host="127.0.0.1")


@pytest.fixture
async def broker_double() -> AsyncIterator[FakeBroker]:
    broker = FakeBroker(write_queue_nums={BEFORE: 4, AFTER: 4})
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def send_across_a_restart(
    tmp_path: Path, broker: FakeBroker, argv_for: object, env: dict[str, str] | None = None
) -> None:
    ns = namesrv(tmp_path)
    await ns.start()
    addr = f"127.0.0.1:{ns.port}"
    registrar = BrokerClient(
        namesrv_addrs=[addr],
        cluster="DefaultCluster",
        broker_name="broker-peer",
        broker_id=0,
        broker_addr=broker.addr,
        topics={t: TopicConfig(t, 4, 4, 6) for t in (BEFORE, AFTER)},
    )
    assert all(outcome.ok for outcome in await registrar.start())
    client = SteppedClient(argv_for(addr), env)  # type: ignore[operator]
    await client.start()
    try:
        first = await client.next_result(RESULT_TIMEOUT_S)
        assert first.get("ok") is True, await client.finish(RESULT_TIMEOUT_S)

        port = ns.port
        await ns.stop()
        ns = namesrv(tmp_path, port)
        await ns.start()
        assert ns.routes.provisional_count == 1  # the broker came back from the journal

        client.step()
        second = await client.next_result(RESULT_TIMEOUT_S)
        diag = await client.finish(RESULT_TIMEOUT_S)
        assert second.get("ok") is True, diag
        assert client.proc is not None and client.proc.returncode == 0, diag
        assert [m.topic for m in broker.messages] == [BEFORE, AFTER], diag
        assert ns.routes.provisional_count == 1, "the route came from a new registration"
    finally:
        await client.finish(1)
        await registrar.stop()
        await ns.stop()


async def test_rocketmq_client_cpp_sends_across_a_restart(
    cpp_client: list[str], broker_double: FakeBroker, tmp_path: Path
) -> None:
    home = tmp_path / "cpp-home"
    home.mkdir()

    def argv(addr: str) -> list[str]:
        return [*cpp_client, "--namesrv", addr, "--topic", BEFORE, "--topic", AFTER,
                "--body", "across a restart", "--group", "PeerCppWarm",
                "--hard-timeout", str(HARD_TIMEOUT_S)]  # fmt: skip

    await send_across_a_restart(tmp_path, broker_double, argv, {**os.environ, "HOME": str(home)})
    assert {m.request_code for m in broker_double.messages} == {SEND_MESSAGE}


async def test_ali_ons_sends_across_a_restart(
    node_client: list[str], broker_double: FakeBroker, tmp_path: Path
) -> None:
    def argv(addr: str) -> list[str]:
        return [*node_client, addr, f"{BEFORE},{AFTER}", "across a restart", "PeerNodeWarm",
                "TagNode", str(int(HARD_TIMEOUT_S * 1000))]  # fmt: skip

    await send_across_a_restart(tmp_path, broker_double, argv)
    assert {m.request_code for m in broker_double.messages} == {SEND_MESSAGE_V2}
