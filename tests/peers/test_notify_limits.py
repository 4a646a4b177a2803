"""Issue 24, the notifier finding: registrants choose where NOTIFY_MIN_BROKER_ID_CHANGE
connects, so the switch is not remotely writable, targets are bounded in total and at once,
an allowed set keeps the server from connecting elsewhere, and drops show in the metrics."""

from __future__ import annotations

import asyncio

from prometheus_client.exposition import generate_latest
from test_notify_min_broker_id import WAIT_S, brokers_of_group, notifications

from fake_broker import FakeBroker
from pynamesrv.http.metrics import build_registry
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.notifier import MinBrokerIdNotifier
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand


async def test_the_switch_cannot_be_turned_on_remotely(start_namesrv) -> None:
    namesrv = await start_namesrv()
    client = await RemotingClient.connect("127.0.0.1", namesrv.port)
    try:
        update = requests.update_namesrv_config({"notifyMinBrokerIdChanged": "true"})
        answer = await client.request(update)
    finally:
        await client.close()
    assert answer.code == ResponseCode.NO_PERMISSION
    assert namesrv.config.notify_min_broker_id_changed is False


async def test_nothing_goes_outside_the_allowed_addresses(start_namesrv) -> None:
    namesrv = await start_namesrv(notifyMinBrokerIdChanged=True, notifyAllowedAddresses="10.99.0.*")
    async with FakeBroker() as fake_master, FakeBroker() as fake_slave:
        master, slave = brokers_of_group(namesrv, fake_master.addr, fake_slave.addr)
        await master.register_all()
        await slave.register_all()
        await master.stop()  # the lowest id changes: the slave (127.0.0.1) would be told
        await slave.stop()
    notifier = namesrv.notifier
    assert notifier.dropped_by == {"not_allowed": 1} and notifier.attempts == 0
    assert notifications(fake_slave) == []
    text = generate_latest(build_registry(namesrv.view)).decode()
    assert 'pynamesrv_notify_dropped_total{cause="not_allowed"} 1.0' in text
    assert "pynamesrv_notify_attempts_total 0.0" in text


def notice() -> RemotingCommand:
    return RemotingCommand(code=RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, ext_fields={})


async def test_targets_are_bounded_pending_and_at_once() -> None:
    config = NamesrvConfig(notify_max_pending_targets=2, notify_max_connections=1)
    release = asyncio.Event()
    sending: list[str] = []
    started = asyncio.Event()

    async def send(addr: str, command: RemotingCommand, timeout_s: float) -> RemotingCommand:
        sending.append(addr)
        started.set()
        await release.wait()
        return RemotingCommand(code=ResponseCode.SUCCESS)

    notifier = MinBrokerIdNotifier(config, 0, send=send)
    for addr in ("10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"):
        notifier.submit(addr, notice())
    notifier.submit("10.0.0.1:10911", notice())  # replaces the pending one: no new slot
    assert notifier.dropped_by == {"pending_cap": 1} and notifier.pending == 2
    async with asyncio.timeout(WAIT_S):
        await started.wait()
        for _ in range(3):
            await asyncio.sleep(0)  # give the second target every chance to start
    assert sending == ["10.0.0.1:10911"]  # notifyMaxConnections=1: the other one waits
    release.set()
    async with asyncio.timeout(WAIT_S):
        while notifier.delivered < 2:
            notifier.changed.clear()
            await notifier.changed.wait()
    assert sorted(set(sending)) == ["10.0.0.1:10911", "10.0.0.2:10911"]
    await notifier.stop()
