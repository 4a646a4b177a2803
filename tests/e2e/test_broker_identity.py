"""Issue 24 finding 4: with an accounts file, a live broker's name cannot be taken over or
unregistered from another connection (broker_identity.py); bound accounts own their names."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.acl_sign import Credentials, sign
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from waiting import wait_for

ACCOUNTS = """\
accounts:
  - accessKey: rocketmq2
    secretKey: 12345678
    admin: true
  - accessKey: reader01
    secretKey: reader-secret
  - accessKey: broker-a-key
    secretKey: broker-a-secret
    brokerNames: [broker-a]
    brokerAddresses: 127.0.0.1
"""
ADMIN = Credentials("rocketmq2", "12345678")
READER = Credentials("reader01", "reader-secret")
BROKER_A = Credentials("broker-a-key", "broker-a-secret")
CLUSTER = "IdCluster"
StartNamesrv = Callable[..., Awaitable[NamesrvController]]


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    path.chmod(0o600)
    return path


@pytest.fixture
async def started() -> AsyncIterator[list[Any]]:
    """Brokers and clients the test opened: all closed at teardown."""
    opened: list[Any] = []
    yield opened
    for item in opened:
        if isinstance(item, BrokerClient):
            await item.stop(unregister=False)
        else:
            await item.close()


def broker(ns: NamesrvController, port: int, opened: list[Any], **kwargs: Any) -> BrokerClient:
    client = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster=CLUSTER,
        broker_name=kwargs.pop("name", "broker-a"),
        broker_id=0,
        broker_addr=f"127.0.0.1:{port}",
        topics={"Orders": TopicConfig("Orders", 4, 4, 6)},
        register_period_s=3600.0,
        **kwargs,
    )
    opened.append(client)
    return client


def master_of(ns: NamesrvController, name: str = "broker-a") -> str | None:
    group = ns.routes.broker_addr_table.get(name)
    return None if group is None else group.broker_addrs.get(0)


def forged_unregister(port: int) -> Any:
    return requests.unregister_broker(
        cluster=CLUSTER, broker_name="broker-a", broker_addr=f"127.0.0.1:{port}", broker_id=0
    )


async def client(ns: NamesrvController, opened: list[Any]) -> RemotingClient:
    connected = await RemotingClient.connect("127.0.0.1", ns.port)
    opened.append(connected)
    return connected


async def test_a_live_broker_cannot_be_moved_from_another_connection(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any]
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    assert all(o.ok for o in await broker(ns, 10911, started).start())
    (taken,) = await broker(ns, 6666, started).register_all()
    assert not taken.ok and taken.error is not None
    assert taken.error.startswith(
        "code 16: brokerName=broker-a brokerId=0 is held by the live broker at 127.0.0.1:10911"
    )
    assert master_of(ns) == "127.0.0.1:10911"
    # the account bound to the name may move it (an operator moving a broker by hand)
    (moved,) = await broker(ns, 10912, started, credentials=BROKER_A).register_all()
    assert moved.ok and master_of(ns) == "127.0.0.1:10912"


async def test_a_live_brokers_own_address_cannot_be_registered_from_another_connection(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any], caplog: Any
) -> None:
    """Issue 32 finding 7: the same name, id and address from another connection would
    rewrite the broker's queues and permissions, and the close of that connection would
    remove the live broker with its topics."""
    ns = await start_namesrv(aclFile=str(acl_file))
    live = broker(ns, 10911, started)
    assert all(o.ok for o in await live.start())
    forger = broker(ns, 10911, started)
    forger.update_topics(TopicConfig("Orders", 1, 1, 4), TopicConfig("Forged", 4, 4, 6))
    (taken,) = await forger.register_all()
    assert taken.error is not None and taken.error.startswith(
        "code 16: brokerAddr=127.0.0.1:10911 is held by the live broker brokerName=broker-a "
        "brokerId=0 over another connection"
    )
    assert "denied REGISTER_BROKER" in caplog.text and "is held by the live broker" in caplog.text
    assert "Forged" not in ns.routes.topic_queue_table
    assert ns.routes.topic_queue_table["Orders"]["broker-a"].write_queue_nums == 4
    before = len(ns.server.connections)
    await forger.close_connections()
    await wait_for(lambda: len(ns.server.connections) == before - 1, "the forger's close")
    assert master_of(ns) == "127.0.0.1:10911" and "Orders" in ns.routes.topic_queue_table
    assert (await live.register_all())[0].ok  # the live broker still speaks on its own
    # the account bound to the name may (an operator acting for the broker)
    (bound,) = await broker(ns, 10911, started, credentials=BROKER_A).register_all()
    assert bound.ok


async def test_a_reconnected_broker_gets_in_once_its_old_connection_closed(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any]
) -> None:
    """The half-open case of access-control.md: refused while the old connection is open,
    accepted at the first registration after it closed."""
    ns = await start_namesrv(aclFile=str(acl_file))
    old = broker(ns, 10911, started)
    assert all(o.ok for o in await old.start())
    again = broker(ns, 10911, started)
    (early,) = await again.register_all()
    assert not early.ok
    await old.close_connections()
    await wait_for(lambda: ns.routes.live_entry(CLUSTER, "127.0.0.1:10911") is None)
    (later,) = await again.register_all()
    assert later.ok and master_of(ns) == "127.0.0.1:10911"


async def test_a_restarted_broker_registers_at_a_new_address_at_once(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any]
) -> None:
    """A Java broker restarting on another host: its old connection closed, no signature."""
    ns = await start_namesrv(aclFile=str(acl_file))
    old = broker(ns, 10911, started)
    assert all(o.ok for o in await old.start())
    await old.close_connections()
    await wait_for(lambda: ns.routes.live_entry(CLUSTER, "127.0.0.1:10911") is None)
    (outcome,) = await broker(ns, 10922, started).register_all()
    assert outcome.ok and master_of(ns) == "127.0.0.1:10922"


async def test_a_recovered_broker_gives_its_name_to_a_registration(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any], tmp_path: Path
) -> None:
    """After a name-server restart the recovered entry has no connection: a real broker
    that came back at another address meanwhile must not be locked out."""
    journal = {"journalEnable": True, "instanceName": "id-recovery"}
    journal["journalDir"] = str(tmp_path / "journal")
    first = await start_namesrv(aclFile=str(acl_file), **journal)
    gone = broker(first, 10911, started)
    assert all(o.ok for o in await gone.start())
    await first.stop()
    ns = await start_namesrv(aclFile=str(acl_file), **journal)
    assert ns.routes.is_provisional(CLUSTER, "127.0.0.1:10911")
    anyone = await client(ns, started)
    refused = await anyone.request(forged_unregister(10911))
    assert refused.code == ResponseCode.NO_PERMISSION  # no connection of its own yet
    (outcome,) = await broker(ns, 10933, started).register_all()
    assert outcome.ok and master_of(ns) == "127.0.0.1:10933"


async def test_unregister_only_over_its_connection_while_it_is_open(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any]
) -> None:
    """Issue 32 finding 10: a broker's unregistration has the same fields after every
    restart, so a captured signed one would replay for ever; while the broker's own
    connection is open, no other connection removes it, whoever signed."""
    ns = await start_namesrv(aclFile=str(acl_file))
    assert all(o.ok for o in await broker(ns, 10911, started).start())
    other = await client(ns, started)
    answer = await other.request(forged_unregister(10911))
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark is not None and "must come over the connection" in answer.remark
    for credentials in (READER, ADMIN, BROKER_A):
        replayed = await other.request(sign(forged_unregister(10911), credentials))
        assert replayed.code == ResponseCode.NO_PERMISSION, credentials.access_key
        assert replayed.remark is not None and "while that connection is open" in replayed.remark
    assert master_of(ns) == "127.0.0.1:10911"
    # a real broker's own unregistration, over the connection it registered on
    own = broker(ns, 10944, started, name="broker-c")
    assert all(o.ok for o in await own.start())
    await own.stop()
    assert master_of(ns, "broker-c") is None


async def test_bound_names_need_their_account_when_registration_is_signed(
    start_namesrv: StartNamesrv, acl_file: Path, started: list[Any]
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file), aclRegistrationRequired=True)
    (by_reader,) = await broker(ns, 10911, started, credentials=READER).register_all()
    assert by_reader.error == (
        "code 16: brokerName=broker-a is bound to another account than accessKey=reader01"
    )
    (elsewhere,) = await broker(
        ns, 10911, started, credentials=BROKER_A, name="broker-b"
    ).register_all()
    assert elsewhere.error == "code 16: accessKey=broker-a-key is not bound to brokerName=broker-b"
    owner = broker(ns, 10911, started, credentials=BROKER_A)
    assert all(o.ok for o in await owner.start())
    (unbound,) = await broker(ns, 10955, started, credentials=READER, name="broker-c").start()
    assert unbound.ok  # names bound to no account stay open to any account
    other = await client(ns, started)
    by_reader_unreg = await other.request(sign(forged_unregister(10911), READER))
    assert by_reader_unreg.code == ResponseCode.NO_PERMISSION
    await owner.stop()
    assert master_of(ns) is None


async def test_without_accounts_file_brokers_move_as_in_java(
    start_namesrv: StartNamesrv, started: list[Any]
) -> None:
    ns = await start_namesrv()
    assert all(o.ok for o in await broker(ns, 10911, started).start())
    (taken,) = await broker(ns, 6666, started).register_all()
    assert taken.ok and master_of(ns) == "127.0.0.1:6666"
    other = await client(ns, started)
    assert (await other.request(forged_unregister(6666))).code == 0
    assert master_of(ns) is None
