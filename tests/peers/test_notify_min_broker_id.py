"""NOTIFY_MIN_BROKER_ID_CHANGE (905) reaches the brokers of a group at their own listen
address (golden-5x acting-master: "min broker id changed to 1, notify [slave], offline
broker addr [master]"). The brokers are FakeBroker doubles that record every request; the
name server is the real one, registering them through the real broker client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

import pytest

from fake_broker import FakeBroker, ReceivedRequest
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.command import RemotingCommand

NOTIFY = 905
WAIT_S = 10.0  # a guard against hangs, not a measured duration


def brokers_of_group(namesrv: NamesrvController, master: str, slave: str) -> list[BrokerClient]:
    addrs = [f"127.0.0.1:{namesrv.port}"]
    common = {"cluster": "DefaultCluster", "broker_name": "broker-a", "enable_acting_master": True}
    topics = {"T": TopicConfig("T", 2, 2, 6)}
    return [
        BrokerClient(addrs, broker_id=0, broker_addr=master, topics=topics, version=453, **common),
        BrokerClient(addrs, broker_id=1, broker_addr=slave, topics=topics, version=453, **common),
    ]


@pytest.fixture
async def two_brokers() -> AsyncIterator[tuple[FakeBroker, FakeBroker]]:
    async with FakeBroker() as master, FakeBroker() as slave:
        yield master, slave


async def until(predicate: Callable[[], bool], event: asyncio.Event) -> None:
    """Wait on the notifier's change event until ``predicate`` holds (guarded)."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            event.clear()
            await event.wait()


def notifications(broker: FakeBroker) -> list[ReceivedRequest]:
    return [r for r in broker.requests if r.code == NOTIFY]


async def test_master_leaving_notifies_the_slave_at_its_address(
    start_namesrv, two_brokers: tuple[FakeBroker, FakeBroker]
) -> None:
    fake_master, fake_slave = two_brokers
    namesrv = await start_namesrv(notifyMinBrokerIdChanged=True)
    master, slave = brokers_of_group(namesrv, fake_master.addr, fake_slave.addr)
    await master.register_all()
    await slave.register_all()
    assert namesrv.notifier.attempts == 0  # the slave joined above the lowest id: no change
    await master.stop()  # graceful: UNREGISTER_BROKER
    notifier = namesrv.notifier
    await until(lambda: notifier.delivered == 1, notifier.changed)
    [request] = notifications(fake_slave)
    assert request.ext_fields == {
        "minBrokerId": "1",
        "brokerName": "broker-a",
        "minBrokerAddr": fake_slave.addr,
        "offlineBrokerAddr": fake_master.addr,
    }
    assert (request.version, request.oneway) == (453, False)
    assert notifications(fake_master) == []
    # the master coming back is the lower id registering: the slave hears of it again
    await master.register_all()
    await until(lambda: notifier.delivered == 2, notifier.changed)
    assert notifications(fake_slave)[-1].ext_fields == {
        "minBrokerId": "0",
        "brokerName": "broker-a",
        "minBrokerAddr": fake_master.addr,
        "haBrokerAddr": "",
    }
    await slave.stop()
    await master.stop()


async def test_nothing_is_sent_while_the_setting_is_off(
    start_namesrv, two_brokers: tuple[FakeBroker, FakeBroker]
) -> None:
    fake_master, fake_slave = two_brokers
    namesrv = await start_namesrv()  # notifyMinBrokerIdChanged=false, Java's default
    master, slave = brokers_of_group(namesrv, fake_master.addr, fake_slave.addr)
    await master.register_all()
    await slave.register_all()
    await master.stop()
    # turned on at run time, the next change is sent, and it is the only one the slave got
    namesrv.config.notify_min_broker_id_changed = True
    await master.register_all()
    await until(lambda: namesrv.notifier.delivered == 1, namesrv.notifier.changed)
    assert [r.ext_fields["minBrokerId"] for r in notifications(fake_slave)] == ["0"]
    await slave.stop()
    await master.stop()


async def test_a_broker_not_listening_yet_gets_it_on_a_retry(start_namesrv) -> None:
    async with FakeBroker() as probe:
        port = probe.port  # a port that was just free: nothing listens on it now
    namesrv = await start_namesrv(notifyMinBrokerIdChanged=True)
    namesrv.notifier.retry_delays_s = (0.3, 2.0)
    async with FakeBroker() as fake_master:
        master, slave = brokers_of_group(namesrv, fake_master.addr, f"127.0.0.1:{port}")
        await master.register_all()
        await slave.register_all()
        await master.stop()
        notifier = namesrv.notifier
        await until(lambda: notifier.attempts >= 1, notifier.changed)  # refused
        async with FakeBroker(port=port) as late_slave:
            await until(lambda: notifier.delivered == 1, notifier.changed)
            assert [r.ext_fields["minBrokerId"] for r in notifications(late_slave)] == ["1"]
        assert notifier.failed == 0
        await slave.stop()


async def test_failure_is_logged_once_and_never_blocks_answers(
    start_namesrv, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker that accepts but never answers: every attempt times out, the name server
    answers other requests meanwhile, and one warning says it gave up."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # hold the connection, answer nothing
        writer.close()

    black_hole = await asyncio.start_server(silent, "127.0.0.1", 0)
    hole = f"127.0.0.1:{black_hole.sockets[0].getsockname()[1]}"
    namesrv = await start_namesrv(
        notifyMinBrokerIdChanged=True, notifyMinBrokerIdChangeTimeoutMillis=300
    )
    namesrv.notifier.retry_delays_s = (0.05, 0.05)
    async with FakeBroker() as fake_master:
        master, slave = brokers_of_group(namesrv, fake_master.addr, hole)
        await master.register_all()
        await slave.register_all()
        caplog.set_level(logging.WARNING, logger="pynamesrv.namesrv.notifier")
        await master.stop()
        assert namesrv.notifier.pending == 1
        client = await RemotingClient.connect("127.0.0.1", namesrv.port)
        answer = await client.request(RemotingCommand(code=105, ext_fields={"topic": "T"}))
        assert answer.code == 0 and namesrv.notifier.pending == 1  # answered while it waits
        await client.close()
        notifier = namesrv.notifier
        await until(lambda: notifier.failed == 1, notifier.changed)
        assert notifier.attempts == 3 and notifier.delivered == 0
        warnings = [r for r in caplog.records if hole in r.getMessage()]
        assert len(warnings) == 1 and "failed after 3 attempts" in warnings[0].getMessage()
        await slave.stop()
    black_hole.close()
    await black_hole.wait_closed()
