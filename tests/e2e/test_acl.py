"""Authenticated admin writes over real connections, the audit trail, and the operator's view.

A name server with an accounts file (``aclFile``) must refuse every admin write that is not
signed by an admin account (NO_PERMISSION, nothing changed: memory, files and journal), do
what a signed one asks, and leave route queries and broker registration alone unless told
to check them too. Each admin write leaves one audit log line and its journal events name
the caller. ``serve`` warns when it listens beyond loopback with admin writes open.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.views import status_view
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.journal import journal_files, read_records
from pynamesrv.namesrv.model import QueueData
from pynamesrv.remoting.acl_sign import Credentials, sign
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import wait_for

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
ACCOUNTS = """\
accounts:
  - accessKey: rocketmq2
    secretKey: 12345678
    admin: true
  - accessKey: reader01
    secretKey: reader-secret
    admin: false
  - accessKey: elsewhere
    secretKey: elsewhere-secret
    whiteRemoteAddress: 10.20.30.*
    admin: true
"""
ADMIN = Credentials("rocketmq2", "12345678")
READER = Credentials("reader01", "reader-secret")
ELSEWHERE = Credentials("elsewhere", "elsewhere-secret")
WRONG_SECRET = Credentials("rocketmq2", "87654321")
CLUSTER = "AclCluster"

StartNamesrv = Callable[..., Awaitable[NamesrvController]]


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    path.chmod(0o600)
    return path


@pytest.fixture
async def client_of() -> AsyncIterator[Callable[[NamesrvController], Awaitable[RemotingClient]]]:
    clients: list[RemotingClient] = []

    async def connect(ns: NamesrvController) -> RemotingClient:
        client = await RemotingClient.connect("127.0.0.1", ns.port)
        clients.append(client)
        return client

    yield connect
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


@pytest.fixture
async def brokers() -> AsyncIterator[list[BrokerClient]]:
    started: list[BrokerClient] = []
    yield started
    await asyncio.gather(*(b.stop() for b in started), return_exceptions=True)


def broker_for(ns: NamesrvController, name: str, port: int, **kwargs: Any) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster=CLUSTER,
        broker_name=name,
        broker_id=0,
        broker_addr=f"127.0.0.1:{port}",
        topics={t: TopicConfig(t, 4, 4, 6) for t in ("Orders", "Payments")},
        register_period_s=3600.0,
        **kwargs,
    )


def state(ns: NamesrvController) -> Any:
    """Everything an admin write could change: KV (memory and file), config, routes."""
    kv_file = Path(ns.config.kv_config_path)
    return copy.deepcopy(
        (
            ns.kv.table,
            kv_file.read_bytes() if kv_file.exists() else None,
            ns.registry.properties(),
            ns.routes.snapshot()["topics"],
        )
    )


@dataclass(frozen=True)
class Write:
    """One admin write and how to tell it took effect."""

    request: Callable[[], RemotingCommand]  # a fresh one each time: signing changes it
    took_effect: Callable[[NamesrvController], bool]

    @property
    def code(self) -> int:
        return self.request().code


def perm_of(ns: NamesrvController, topic: str) -> int | None:
    queues = ns.routes.topic_queue_table.get(topic)
    return None if not queues else queues["broker-a"].perm


# In an order where each write's effect is visible from the state the previous ones left.
WRITES = [
    Write(
        lambda: requests.put_kv_config("AclNs", "k1", "v1"),
        lambda ns: ns.kv.get("AclNs", "k1") == "v1",
    ),
    Write(
        lambda: requests.delete_kv_config("AclNs", "k1"),
        lambda ns: ns.kv.get("AclNs", "k1") is None,
    ),
    Write(
        lambda: requests.update_namesrv_config({"productEnvName": "acl-test"}),
        lambda ns: ns.config.product_env_name == "acl-test",
    ),
    Write(
        lambda: requests.wipe_write_perm_of_broker("broker-a"),
        lambda ns: perm_of(ns, "Orders") == 4,
    ),
    Write(
        lambda: requests.add_write_perm_of_broker("broker-a"),
        lambda ns: perm_of(ns, "Orders") == 6,
    ),
    Write(
        lambda: requests.delete_topic_in_namesrv("Payments"),
        lambda ns: "Payments" not in ns.routes.topic_queue_table,
    ),
    Write(
        lambda: requests.register_topic_in_namesrv("Fresh", [QueueData("broker-a", 3, 3, 6, 0)]),
        lambda ns: perm_of(ns, "Fresh") == 6,
    ),
]


async def test_every_admin_write_needs_an_admin_signature(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any, brokers: list[BrokerClient]
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    broker = broker_for(ns, "broker-a", 10911)  # registration stays open: unsigned
    brokers.append(broker)
    assert all(o.ok for o in await broker.start())
    client = await client_of(ns)
    assert {w.code for w in WRITES} == {100, 102, 318, 205, 327, 216, 217}

    for write in WRITES:
        refusals = {
            "unsigned": write.request(),
            "non-admin": sign(write.request(), READER),
            "wrong secret": sign(write.request(), WRONG_SECRET),
            "outside whiteRemoteAddress": sign(write.request(), ELSEWHERE),
            "tampered field": sign(write.request(), ADMIN),
            "tampered body": sign(write.request(), ADMIN),
        }
        refusals["tampered field"].ext_fields["injected"] = "1"  # type: ignore[index]
        refusals["tampered body"].body += b"\n#"
        for why, request in refusals.items():
            before = state(ns)
            answer = await client.request(request)
            assert answer.code == ResponseCode.NO_PERMISSION, (write.code, why, answer)
            assert answer.remark, (write.code, why)
            assert state(ns) == before, (write.code, why)
            assert not write.took_effect(ns), (write.code, why)

        answer = await client.request(sign(write.request(), ADMIN))
        assert answer.code == ResponseCode.SUCCESS, (write.code, answer.remark)
        assert write.took_effect(ns), write.code


async def test_refusals_say_why(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    client = await client_of(ns)
    write = WRITES[0]
    remarks = {
        why: (await client.request(request)).remark
        for why, request in {
            "unsigned": write.request(),
            "reader": sign(write.request(), READER),
            "wrong": sign(write.request(), WRONG_SECRET),
            "elsewhere": sign(write.request(), ELSEWHERE),
            "unknown": sign(write.request(), Credentials("stranger", "stranger-secret")),
        }.items()
    }
    assert remarks == {
        "unsigned": "No accessKey is configured: request code=100 must be signed by an admin "
        "account (AccessKey and Signature)",
        "reader": "Need admin permission for request code=100, but accessKey=reader01 is not",
        "wrong": "Check signature failed for accessKey=rocketmq2",
        "elsewhere": "Remote address 127.0.0.1 is not in the whiteRemoteAddress of "
        "accessKey=elsewhere",
        "unknown": "No acl config for stranger",
    }


async def test_oneway_refused_write_changes_nothing(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    client = await client_of(ns)
    before = state(ns)
    client.oneway(WRITES[0].request())
    # An answered request after it on the same connection: the oneway one was handled.
    answer = await client.request(sign(WRITES[2].request(), ADMIN))
    assert answer.code == ResponseCode.SUCCESS
    after = state(ns)
    assert (after[0], after[1]) == (before[0], before[1])  # KV untouched


async def test_without_accounts_writes_stay_open_as_in_java(
    start_namesrv: StartNamesrv, client_of: Any
) -> None:
    ns = await start_namesrv()
    client = await client_of(ns)
    assert ns.access is None
    answer = await client.request(WRITES[0].request())
    assert answer.code == ResponseCode.SUCCESS
    assert WRITES[0].took_effect(ns)
    # A signature nobody checks is ignored, as Java's name server ignores it.
    answer = await client.request(sign(WRITES[1].request(), WRONG_SECRET))
    assert answer.code == ResponseCode.SUCCESS
    assert status_view(ns.view, 0)["access"]["adminWrites"] == "open"


async def test_routes_and_registration_unaffected_unless_configured(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any, brokers: list[BrokerClient]
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    broker = broker_for(ns, "broker-a", 10911)
    brokers.append(broker)
    assert all(o.ok for o in await broker.start())
    for _ in range(3):  # the first query learns the shape, the next ones take the fast path
        route = await query_route(ns.port, "Orders")
        assert route.code == ResponseCode.SUCCESS
    client = await client_of(ns)
    reads = [
        requests.get_broker_cluster_info(),
        requests.get_namesrv_config(),
        requests.get_all_topic_list_from_nameserver(),
    ]
    for request in reads:
        assert (await client.request(request)).code == ResponseCode.SUCCESS
    broker.update_topics(TopicConfig("Later", 1, 1, 6))
    assert all(o.ok for o in await broker.register_all())
    await broker.stop()
    brokers.clear()
    assert (await query_route(ns.port, "Orders")).code == ResponseCode.TOPIC_NOT_EXIST
    status = status_view(ns.view, 0)["access"]
    assert status == {
        "adminWrites": "authenticated",
        "aclFile": str(acl_file),
        "accounts": 3,
        "admins": 2,
        "registrationAuth": False,
        "readAuth": False,
        "adminBinding": False,
    }


async def test_registration_needs_an_account_when_configured(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any, brokers: list[BrokerClient]
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file), aclRegistrationRequired=True)
    unsigned = broker_for(ns, "broker-u", 10921)
    brokers.append(unsigned)
    (outcome,) = await unsigned.register_all()
    assert not outcome.ok and outcome.error is not None
    assert outcome.error.startswith("code 16: No accessKey is configured")
    assert "broker-u" not in ns.routes.broker_addr_table

    signed = broker_for(ns, "broker-a", 10911, credentials=READER)  # any account will do
    brokers.append(signed)
    assert all(o.ok for o in await signed.start())
    assert (await query_route(ns.port, "Orders")).code == ResponseCode.SUCCESS  # reads open

    client = await client_of(ns)
    heartbeat = requests.broker_heartbeat(
        cluster=CLUSTER, broker_name="broker-a", broker_addr="127.0.0.1:10911"
    )
    assert (await client.request(heartbeat)).code == ResponseCode.NO_PERMISSION
    assert (await client.request(sign(heartbeat, READER))).code == ResponseCode.SUCCESS
    forged = requests.unregister_broker(
        cluster=CLUSTER, broker_name="broker-a", broker_addr="127.0.0.1:10911", broker_id=0
    )
    assert (await client.request(forged)).code == ResponseCode.NO_PERMISSION
    assert (await query_route(ns.port, "Orders")).code == ResponseCode.SUCCESS
    await signed.stop()  # a signed unregister works
    brokers.remove(signed)
    assert "broker-a" not in ns.routes.broker_addr_table


async def test_reads_need_an_account_when_configured(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any, brokers: list[BrokerClient]
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file), aclReadRequired=True)
    broker = broker_for(ns, "broker-a", 10911)  # registration is not a read: still open
    brokers.append(broker)
    assert all(o.ok for o in await broker.start())
    client = await client_of(ns)
    query = requests.get_routeinfo_by_topic("Orders")
    for _ in range(3):  # repeated: no cached path may answer an unsigned query
        answer = await client.request(copy.deepcopy(query))
        assert answer.code == ResponseCode.NO_PERMISSION
        assert (await query_route(ns.port, "Orders")).code == ResponseCode.NO_PERMISSION
    for _ in range(3):
        answer = await client.request(sign(copy.deepcopy(query), READER))
        assert answer.code == ResponseCode.SUCCESS
        assert b"broker-a" in answer.body
    cluster = requests.get_broker_cluster_info()
    assert (await client.request(cluster)).code == ResponseCode.NO_PERMISSION
    assert (await client.request(sign(cluster, READER))).code == ResponseCode.SUCCESS


async def test_accounts_file_changes_apply_without_restart(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    client = await client_of(ns)
    newcomer = Credentials("newcomer", "newcomer-secret")
    assert (await client.request(sign(WRITES[0].request(), newcomer))).code == 16
    tmp = acl_file.with_suffix(".new")
    tmp.write_text(
        ACCOUNTS.replace("rocketmq2", "retired99")
        + "  - {accessKey: newcomer, secretKey: newcomer-secret, admin: true}\n"
    )
    tmp.chmod(0o600)
    tmp.replace(acl_file)  # as an operator's tooling writes it: atomically

    async def newcomer_accepted() -> bool:  # the file is looked at once a second
        return (await client.request(sign(WRITES[0].request(), newcomer))).code == 0

    await wait_for(newcomer_accepted, "the new account took effect")
    assert WRITES[0].took_effect(ns)
    answer = await client.request(sign(WRITES[1].request(), ADMIN))
    assert (answer.code, answer.remark) == (16, "No acl config for rocketmq2")


# --------------------------------------------------------------------------- audit


async def test_each_admin_write_is_logged_and_journaled_with_its_caller(
    start_namesrv: StartNamesrv,
    acl_file: Path,
    client_of: Any,
    brokers: list[BrokerClient],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal = tmp_path / "journal"
    ns = await start_namesrv(aclFile=str(acl_file), journalEnable=True, journalDir=str(journal))
    broker = broker_for(ns, "broker-a", 10911)
    brokers.append(broker)
    assert all(o.ok for o in await broker.start())
    client = await client_of(ns)
    with caplog.at_level(logging.INFO, logger="pynamesrv.audit"):
        for write in WRITES:
            answer = await client.request(sign(write.request(), ADMIN))
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        refused = sign(requests.update_namesrv_config({"kvConfigPath": "/x"}), ADMIN)
        assert (await client.request(refused)).code == ResponseCode.NO_PERMISSION
        assert (await client.request(WRITES[0].request())).code == ResponseCode.NO_PERMISSION
    lines = [r.getMessage() for r in caplog.records if r.name == "pynamesrv.audit"]
    peer = f"127.0.0.1:{client.transport.get_extra_info('sockname')[1]}"  # type: ignore[union-attr]
    by = f"by {peer} accessKey=rocketmq2: "
    assert lines == [
        f"admin write PUT_KV_CONFIG {by}namespace=AclNs key=k1",
        f"admin write DELETE_KV_CONFIG {by}namespace=AclNs key=k1",
        f"admin write UPDATE_NAMESRV_CONFIG {by}productEnvName=acl-test",
        f"admin write WIPE_WRITE_PERM_OF_BROKER {by}broker=broker-a topics=2",
        f"admin write ADD_WRITE_PERM_OF_BROKER {by}broker=broker-a topics=2",
        f"admin write DELETE_TOPIC_IN_NAMESRV {by}topic=Payments removed",
        f"admin write REGISTER_TOPIC_IN_NAMESRV {by}topic=Fresh queues=broker-a:3/3",
        f"admin write UPDATE_NAMESRV_CONFIG {by.rstrip(': ')}: refused, NO_PERMISSION (16): "
        "Can not update config in black list.",
        f"denied PUT_KV_CONFIG by {peer} accessKey=-: No accessKey is configured: request "
        "code=100 must be signed by an admin account (AccessKey and Signature)",
    ]
    levels = [r.levelname for r in caplog.records if r.name == "pynamesrv.audit"]
    assert levels == ["INFO"] * 7 + ["WARNING"] * 2

    await broker.stop()  # its topics leave the routes: not an admin write
    brokers.clear()
    await ns.stop()  # flushes the journal
    records = list(read_records(journal_files(journal)))
    admin_types = {"kv_changed", "config_changed", "perm_changed", "topic_removed",
                   "topic_queues_changed"}  # fmt: skip
    admin_events = [r for r in records if r["type"] in admin_types and r["caller"] is not None]
    assert [r["type"] for r in admin_events] == [
        "kv_changed",
        "kv_changed",
        "config_changed",
        "perm_changed",
        "perm_changed",
        "topic_removed",
        "topic_queues_changed",
    ]
    for record in admin_events:
        assert (record["caller"], record["access_key"]) == (peer, "rocketmq2"), record
    # Events no admin write caused carry no caller: the broker's removal (one line that takes
    # its topics) has no such field at all.
    assert not [r for r in records if r["type"] == "topic_removed" and r["caller"] is None]
    [removed] = [r for r in records if r["type"] == "broker_removed"]
    assert "caller" not in removed and removed["group_gone"] and removed["topics_gone"] == 2


async def test_open_server_still_names_the_caller(
    start_namesrv: StartNamesrv, client_of: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ns = await start_namesrv()
    events: list[Any] = []
    ns.add_listener(events.extend)
    client = await client_of(ns)
    with caplog.at_level(logging.INFO, logger="pynamesrv.audit"):
        # mqadmin signs even when nobody checks: an unverified key is not recorded as one.
        assert (await client.request(sign(WRITES[0].request(), WRONG_SECRET))).code == 0
    (line,) = [r.getMessage() for r in caplog.records if r.name == "pynamesrv.audit"]
    assert line.startswith("admin write PUT_KV_CONFIG by 127.0.0.1:")
    assert line.endswith(" accessKey=-: namespace=AclNs key=k1")
    (event,) = events
    assert event.caller.startswith("127.0.0.1:") and event.access_key is None


# --------------------------------------------------------------------------- CLI


async def run_admin(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NAMESRV_ADDR", "ROCKETMQ_ACCESS_KEY", "ROCKETMQ_SECRET_KEY")
    }
    environ.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT, "admin", *args, env=environ,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_admin_cli_signs_with_keys_env_or_tools_yml(
    start_namesrv: StartNamesrv, acl_file: Path, tmp_path: Path
) -> None:
    ns = await start_namesrv(aclFile=str(acl_file))
    n = f"127.0.0.1:{ns.port}"
    put = ("updateKvConfig", "-s", "CliNs", "-k")

    code, _, err = await run_admin("-n", n, *put, "k0", "-v", "v")
    assert code == 1
    assert err.strip().startswith(f"error: {n} answered NO_PERMISSION (16): No accessKey")
    assert ns.kv.get("CliNs", "k0") is None

    code, _, err = await run_admin(
        "-n", n, "--access-key", "rocketmq2", "--secret-key", "12345678", *put, "k1", "-v", "v1"
    )
    assert code == 0, err
    env = {"ROCKETMQ_ACCESS_KEY": "rocketmq2", "ROCKETMQ_SECRET_KEY": "12345678"}
    code, _, err = await run_admin("-n", n, *put, "k2", "-v", "v2", env=env)
    assert code == 0, err
    tools = tmp_path / "tools.yml"
    tools.write_text("accessKey: rocketmq2\nsecretKey: 12345678\n")  # mqadmin's conf/tools.yml
    code, _, err = await run_admin("-n", n, "--tools-yml", str(tools), *put, "k3", "-v", "v3")
    assert code == 0, err
    assert [ns.kv.get("CliNs", k) for k in ("k1", "k2", "k3")] == ["v1", "v2", "v3"]

    code, _, err = await run_admin("-n", n, "--access-key", "reader01", *put, "k4", "-v", "v")
    assert code == 2 and "give both --access-key and --secret-key" in err
    code, _, err = await run_admin(
        "-n", n, "--access-key", "reader01", "--secret-key", "reader-secret", *put, "k4", "-v", "v"
    )
    assert code == 1 and "Need admin permission" in err


async def test_admin_cli_takes_the_signing_options_after_the_subcommand(
    start_namesrv: StartNamesrv, acl_file: Path, tmp_path: Path
) -> None:
    """--access-key, --secret-key and --tools-yml are global options like --tls*: mqadmin's
    place for them, after the subcommand, works too; there they win over the environment,
    and one half before and one half after make a pair (issue 26, finding 6)."""
    ns = await start_namesrv(aclFile=str(acl_file))
    n = f"127.0.0.1:{ns.port}"
    put = ("updateKvConfig", "-n", n, "-s", "CliNs", "-k")
    keys = ("--access-key", "rocketmq2", "--secret-key", "12345678")
    reader = {"ROCKETMQ_ACCESS_KEY": "reader01", "ROCKETMQ_SECRET_KEY": "reader-secret"}

    code, _, err = await run_admin(*put, "k1", "-v", "v1", *keys)
    assert code == 0, err
    tools = tmp_path / "tools.yml"
    tools.write_text("accessKey: rocketmq2\nsecretKey: 12345678\n")
    code, _, err = await run_admin(*put, "k2", "-v", "v2", "--tools-yml", str(tools), env=reader)
    assert code == 0, err
    code, _, err = await run_admin(
        "--access-key", "rocketmq2", *put, "k3", "-v", "v3", "--secret-key", "12345678"
    )
    assert code == 0, err
    code, _, err = await run_admin(*put, "k4", "-v", "v4", *keys, env=reader)
    assert code == 0, err
    assert [ns.kv.get("CliNs", k) for k in ("k1", "k2", "k3", "k4")] == ["v1", "v2", "v3", "v4"]

    code, _, err = await run_admin(*put, "k5", "-v", "v", "--access-key", "rocketmq2")
    assert code == 2 and "give both --access-key and --secret-key" in err
    assert ns.kv.get("CliNs", "k5") is None


async def test_admin_cli_binds_its_signatures_where_mqadmin_cannot(
    start_namesrv: StartNamesrv, acl_file: Path
) -> None:
    """With aclAdminBindingRequired the CLI's bound writes pass; an unbound one (mqadmin's
    kind) is refused, and the CLI's wipe is no valid add (issue 24, finding 3)."""
    ns = await start_namesrv(aclFile=str(acl_file), aclAdminBindingRequired=True)
    n = f"127.0.0.1:{ns.port}"
    keys = ("--access-key", "rocketmq2", "--secret-key", "12345678")
    code, _, err = await run_admin(
        "-n", n, *keys, "updateKvConfig", "-s", "B", "-k", "k", "-v", "v"
    )
    assert code == 0, err
    assert ns.kv.get("B", "k") == "v"
    client = await RemotingClient.connect("127.0.0.1", ns.port)
    try:
        unbound = sign(requests.put_kv_config("B", "k2", "v"), ADMIN)
        answer = await client.request(unbound)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark is not None and "must carry ARequestBinding" in answer.remark
        bound = sign(requests.wipe_write_perm_of_broker("broker-a"), ADMIN, bound_at_ms=now_ms())
        moved = copy.deepcopy(bound)
        moved.code = requests.add_write_perm_of_broker("broker-a").code
        assert (await client.request(moved)).code == ResponseCode.NO_PERMISSION
        assert (await client.request(bound)).code == ResponseCode.SUCCESS
    finally:
        await client.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- serve


def serve_log(tmp_path: Path, *args: str, extra_config: str = "") -> tuple[int, str]:
    """Start ``pynamesrv serve``, stop it once it has booted; its exit code and stderr."""
    config = tmp_path / "namesrv.properties"
    config.write_text(f"kvConfigPath={tmp_path / 'kv.json'}\nhttpPort=0\n{extra_config}")
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--port", "0", "--no-journal", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ROCKETMQ_HOME": str(tmp_path / "home")},
    )
    lines = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "boot success" in line:
                proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
    finally:
        proc.kill()
    return code, "".join(lines)


def test_serve_warns_when_writes_are_open_beyond_loopback(tmp_path: Path) -> None:
    code, log = serve_log(tmp_path, "--listen", "0.0.0.0")
    assert code == 0, log
    warnings = [line for line in log.splitlines() if " WARN" in line]
    assert len(warnings) == 1, log
    assert "admin writes are open: anyone who reaches 0.0.0.0:" in warnings[0]
    assert "set aclFile" in warnings[0]

    code, log = serve_log(tmp_path, "--listen", "127.0.0.1")
    assert code == 0 and "admin writes are open" not in log, log


def test_serve_with_accounts_says_so_and_refuses_a_bad_file(tmp_path: Path) -> None:
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(ACCOUNTS)
    accounts.chmod(0o600)
    code, log = serve_log(tmp_path, "--listen", "0.0.0.0", extra_config=f"aclFile={accounts}\n")
    assert code == 0, log
    assert "admin writes are open" not in log
    assert "admin writes need a signature of an admin account" in log
    assert "3 accounts, 2 admin" in log

    accounts.write_text("accounts: [{accessKey: rocketmq2, secretKey: 123}]\n")
    code, log = serve_log(tmp_path, extra_config=f"aclFile={accounts}\n")
    assert code == 2  # a configuration error, like a bad key in the -c file
    assert log.strip().splitlines()[-1] == (
        f"Error: acl file {accounts}: accounts[0] (rocketmq2): secretKey must be at least 7 "
        "characters"
    )
    assert "Traceback" not in log


async def test_acl_keys_cannot_be_changed_remotely(
    start_namesrv: StartNamesrv, acl_file: Path, client_of: Any
) -> None:
    """Not even an admin may switch the check off or point it at another file over the wire."""
    ns = await start_namesrv(aclFile=str(acl_file))
    client = await client_of(ns)
    updates = [("aclFile", ""), ("aclFile", "/tmp/mine.yml"), ("aclReadRequired", "true"),
               ("aclRegistrationRequired", "true")]  # fmt: skip
    for key, value in updates:
        request = sign(requests.update_namesrv_config({key: value}), ADMIN)
        answer = await client.request(request)
        assert (answer.code, answer.remark) == (
            16,
            f"Can not update config remotely: {key} (set it in the -c file and restart)",
        )
    assert ns.config.acl_file == str(acl_file)
    assert not ns.config.acl_read_required and not ns.config.acl_registration_required
