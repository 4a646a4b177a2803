"""``pynamesrv admin`` end to end: the installed command against running name servers.

Every subcommand runs as an operator runs it, through the installed entry point in a
subprocess, against in-process name servers (tests/conftest.py) that brokers registered
with. The CLI runs under ``asyncio.create_subprocess_exec`` so the servers' event loop keeps
serving while the command waits. Assertions check effects, not just exit codes: the KV file
on disk, the perm the route shows afterwards, the route being gone; and the exit codes
scripts rely on (1 error answer, 2 usage, 3 unreachable, 4 timeout, 5 diff disagrees).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
CLUSTER = "AdminCluster"

StartNamesrv = Callable[..., Awaitable[NamesrvController]]
StartBroker = Callable[..., Awaitable[BrokerClient]]


@dataclass(slots=True)
class CliResult:
    """What a script sees of one run: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def admin(*args: str, env: dict[str, str] | None = None, limit_s: float = 30) -> CliResult:
    """Run ``pynamesrv admin ARGS`` without blocking the loop the name servers run on.

    NAMESRV_ADDR is removed from the environment so that only what a test passes counts.
    """
    environ = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    environ.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT,
        "admin",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode())


def addr(ns: NamesrvController) -> str:
    return f"127.0.0.1:{ns.port}"


def addrs(*servers: NamesrvController) -> str:
    """mqadmin's -n syntax: ``host:port;host:port``."""
    return ";".join(addr(ns) for ns in servers)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_one_error_line(result: CliResult, *fragments: str) -> None:
    """Failures are one stderr line that starts with ``error:``, never a traceback."""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: "), result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture
async def start_broker() -> AsyncIterator[StartBroker]:
    """Register brokers and keep them running (connections open) for the whole test."""
    started: list[BrokerClient] = []

    async def start(
        servers: list[NamesrvController], name: str, broker_addr: str, **topics: tuple[int, int]
    ) -> BrokerClient:
        broker = BrokerClient(
            namesrv_addrs=[addr(ns) for ns in servers],
            cluster=CLUSTER,
            broker_name=name,
            broker_id=0,
            broker_addr=broker_addr,
            topics={t: TopicConfig(t, r, w, 6) for t, (r, w) in topics.items()},
        )
        outcomes = await broker.start()
        assert all(o.ok for o in outcomes), outcomes
        started.append(broker)
        return broker

    yield start
    await asyncio.gather(*(b.stop() for b in started), return_exceptions=True)


# --------------------------------------------------------------------------- reads


async def test_cluster_and_topic_reads(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    await start_broker([ns], "broker-a", "127.0.0.1:10911", ReadTopic=(4, 4), Other=(2, 2))
    await start_broker([ns], "broker-b", "127.0.0.1:10921", ReadTopic=(8, 8))
    n = addr(ns)

    table = await admin("-n", n, "clusterList")
    assert table.code == 0, table.err
    assert [line.split() for line in table.out.splitlines() if "broker-" in line] == [
        [CLUSTER, "broker-a", "0", "127.0.0.1:10911"],
        [CLUSTER, "broker-b", "0", "127.0.0.1:10921"],
    ]
    # mqadmin's order (options after the subcommand) works too.
    clusters = (await admin("clusterList", "-n", n, "--json")).json()
    assert clusters["namesrv"] == n
    assert clusters["clusters"] == {CLUSTER: ["broker-a", "broker-b"]}
    assert clusters["brokers"][1] == {
        "cluster": CLUSTER,
        "brokerName": "broker-b",
        "brokerId": 0,
        "addr": "127.0.0.1:10921",
    }

    topics = await admin("-n", n, "topicList")
    assert topics.code == 0
    assert {"ReadTopic", "Other"} <= set(topics.out.split())
    assert (await admin("-n", n, "--json", "topicList")).json()["topics"] == ["Other", "ReadTopic"]
    with_clusters = await admin("-n", n, "--json", "topicList", "-c")
    assert with_clusters.json()["clusters"] == {"Other": [CLUSTER], "ReadTopic": [CLUSTER]}
    assert f"{CLUSTER}   ReadTopic" in (await admin("-n", n, "topicList", "-c")).out

    route = await admin("-n", n, "topicRoute", "-t", "ReadTopic")
    assert route.code == 0
    assert ["broker-b", "8", "8", "RW-", "(6)", "0"] in [
        line.split() for line in route.out.splitlines()
    ]
    route_json = (await admin("-n", n, "--json", "topicRoute", "-t", "ReadTopic")).json()
    queues = {q["brokerName"]: q for q in route_json["route"]["queueDatas"]}
    assert queues["broker-a"]["readQueueNums"] == 4
    assert queues["broker-b"]["writeQueueNums"] == 8
    assert {b["brokerAddrs"]["0"] for b in route_json["route"]["brokerDatas"]} == {
        "127.0.0.1:10911",
        "127.0.0.1:10921",
    }

    cluster_list = await admin("-n", n, "topicClusterList", "-t", "Other")
    assert cluster_list.code == 0 and CLUSTER in cluster_list.out
    assert (await admin("-n", n, "--json", "topicClusterList", "-t", "Other")).json() == {
        "namesrv": n,
        "topic": "Other",
        "clusters": [CLUSTER],
    }


async def test_missing_topic_route_exits_1_with_topic_not_exist(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv()
    result = await admin("-n", addr(ns), "--json", "topicRoute", "-t", "NoSuchTopic")
    assert result.code == 1
    assert result.out == ""
    assert_one_error_line(
        result, f"{addr(ns)} answered TOPIC_NOT_EXIST (17)", "for the topic: NoSuchTopic"
    )


# --------------------------------------------------------------------------- KV


async def test_kv_writes_reach_every_server_and_its_file(start_namesrv: StartNamesrv) -> None:
    first, second = await start_namesrv(), await start_namesrv()
    both = addrs(first, second)

    update = await admin("-n", both, "updateKvConfig", "-s", "AdminNs", "-k", "k1", "-v", "v[1]")
    assert update.code == 0, update.err
    assert update.out.count("OK") == 2
    await admin("-n", both, "updateKvConfig", "-s", "AdminNs", "-k", "k2", "-v", "v2")

    for ns in (first, second):
        got = await admin("-n", addr(ns), "getKvConfig", "-s", "AdminNs", "-k", "k1")
        assert (got.code, got.out) == (0, "v[1]\n")  # plain value, no markup eaten
        on_disk = json.loads(Path(ns.config.kv_config_path).read_text())
        assert on_disk["configTable"]["AdminNs"] == {"k1": "v[1]", "k2": "v2"}
    got_json = await admin("-n", addr(second), "--json", "getKvConfig", "-s", "AdminNs", "-k", "k2")
    assert got_json.json() == {
        "namesrv": addr(second),
        "namespace": "AdminNs",
        "key": "k2",
        "value": "v2",
    }
    listing = await admin("-n", both, "--json", "kvList", "-s", "AdminNs")
    assert listing.json()["table"] == {"k1": "v[1]", "k2": "v2"}
    assert "k2" in (await admin("-n", both, "kvList", "-s", "AdminNs")).out

    deleted = await admin("-n", both, "--json", "deleteKvConfig", "-s", "AdminNs", "-k", "k1")
    assert deleted.code == 0
    assert [r["ok"] for r in deleted.json()["results"]] == [True, True]
    for ns in (first, second):
        on_disk = json.loads(Path(ns.config.kv_config_path).read_text())
        assert on_disk["configTable"]["AdminNs"] == {"k2": "v2"}
    missing = await admin("-n", addr(first), "getKvConfig", "-s", "AdminNs", "-k", "k1")
    assert missing.code == 1
    assert_one_error_line(
        missing, "answered QUERY_NOT_FOUND (22): No config item, Namespace: AdminNs Key: k1"
    )
    no_namespace = await admin("-n", addr(first), "kvList", "-s", "NoSuchNs")
    assert no_namespace.code == 1
    assert_one_error_line(no_namespace, "QUERY_NOT_FOUND (22)")


# --------------------------------------------------------------------------- config


async def test_namesrv_config_read_update_and_refusal(start_namesrv: StartNamesrv) -> None:
    ns = await start_namesrv()
    n = addr(ns)
    before = (await admin("-n", n, "--json", "getNamesrvConfig")).json()["config"]
    assert before["orderMessageEnable"] == "false"
    assert "listenPort" in before and "kvConfigPath" in before

    update = await admin("-n", n, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert update.code == 0, update.err
    after = await admin("-n", n, "getNamesrvConfig")
    assert ["orderMessageEnable", "true"] in [line.split() for line in after.out.splitlines()]
    assert ns.config.order_message_enable is True

    refused = await admin("-n", n, "updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x")
    assert refused.code == 1
    assert_one_error_line(refused, f"{n} answered NO_PERMISSION (16)")
    assert "FAILED" in refused.out


# --------------------------------------------------------------------------- routes


async def test_wipe_and_add_write_perm_change_the_route(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    await start_broker([ns], "broker-w", "127.0.0.1:10931", PermTopic=(4, 4), PermTopic2=(1, 1))
    n = addr(ns)

    async def perm() -> int:
        route = (await admin("-n", n, "--json", "topicRoute", "-t", "PermTopic")).json()
        return route["route"]["queueDatas"][0]["perm"]

    wipe = await admin("-n", n, "--json", "wipeWritePerm", "-b", "broker-w")
    assert wipe.code == 0
    assert wipe.json()["results"] == [{"namesrv": n, "ok": True, "wipeTopicCount": 2}]
    assert await perm() == 4
    assert "R-- (4)" in (await admin("-n", n, "topicRoute", "-t", "PermTopic")).out

    add = await admin("-n", n, "addWritePerm", "-b", "broker-w")
    assert add.code == 0
    assert [n, "2", "OK"] in [line.split() for line in add.out.splitlines()]
    assert await perm() == 6


async def test_delete_topic_removes_the_route(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    await start_broker([ns], "broker-d", "127.0.0.1:10941", Doomed=(4, 4), Doomed2=(4, 4))
    n = addr(ns)
    assert (await admin("-n", n, "topicRoute", "-t", "Doomed")).code == 0

    assert (await admin("-n", n, "deleteTopic", "-t", "Doomed")).code == 0
    gone = await admin("-n", n, "topicRoute", "-t", "Doomed")
    assert gone.code == 1
    assert_one_error_line(gone, "TOPIC_NOT_EXIST (17)")

    # -c limits the delete to that cluster's brokers: another cluster changes nothing.
    assert (await admin("-n", n, "deleteTopic", "-t", "Doomed2", "-c", "OtherCluster")).code == 0
    assert (await admin("-n", n, "topicRoute", "-t", "Doomed2")).code == 0
    assert (await admin("-n", n, "deleteTopic", "-t", "Doomed2", "-c", CLUSTER)).code == 0
    assert (await admin("-n", n, "topicRoute", "-t", "Doomed2")).code == 1


async def test_register_topic_creates_the_route(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    await start_broker([ns], "broker-r", "127.0.0.1:10951", Seed=(1, 1))
    n = addr(ns)
    args = ("registerTopic", "-t", "Fresh", "-b", "broker-r", "-r", "3", "-w", "5", "-p", "4")
    registered = await admin("-n", n, "--json", *args)
    assert registered.code == 0, registered.err
    assert registered.json()["results"] == [{"namesrv": n, "ok": True}]

    route = (await admin("-n", n, "--json", "topicRoute", "-t", "Fresh")).json()["route"]
    assert route["queueDatas"] == [
        {
            "brokerName": "broker-r",
            "perm": 4,
            "readQueueNums": 3,
            "topicSysFlag": 0,
            "writeQueueNums": 5,
        }
    ]


# --------------------------------------------------------------------------- failures


async def test_unreachable_server_exits_3(start_namesrv: StartNamesrv) -> None:
    dead = f"127.0.0.1:{free_port()}"
    result = await admin("-n", dead, "clusterList")
    assert result.code == 3
    assert result.out == ""
    assert_one_error_line(result, f"cannot connect to {dead}")

    # A write goes to every server: the live one is changed, the dead one fails the run.
    ns = await start_namesrv()
    write = await admin(
        "-n", f"{dead};{addr(ns)}", "updateKvConfig", "-s", "S", "-k", "k", "-v", "v"
    )
    assert write.code == 3
    assert_one_error_line(write, dead)
    assert json.loads(Path(ns.config.kv_config_path).read_text())["configTable"]["S"] == {"k": "v"}

    # A read falls back to the next server that answers.
    read = await admin("-n", f"{dead};{addr(ns)}", "getKvConfig", "-s", "S", "-k", "k")
    assert (read.code, read.out) == (0, "v\n")
    assert read.err.startswith("warning: ") and "trying the next name server" in read.err


async def test_silent_server_exits_4() -> None:
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        n = f"127.0.0.1:{silent.getsockname()[1]}"
        read = await admin("-n", n, "--timeout", "0.5", "topicList")
        write = await admin("-n", n, "--timeout", "0.5", "wipeWritePerm", "-b", "x")
    assert read.code == 4
    assert_one_error_line(read, f"{n} did not answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206)")
    assert write.code == 4
    assert_one_error_line(write, "WIPE_WRITE_PERM_OF_BROKER (205) within 0.5s")


async def test_usage_errors_exit_2_and_env_default(start_namesrv: StartNamesrv) -> None:
    no_server = await admin("clusterList")
    assert no_server.code == 2
    assert "NAMESRV_ADDR" in no_server.err
    assert (await admin("-n", "no-port-here", "clusterList")).code == 2
    assert (await admin("-n", "127.0.0.1:1", "topicRoute")).code == 2  # -t missing

    ns = await start_namesrv()
    from_env = await admin("--json", "clusterList", env={"NAMESRV_ADDR": addr(ns)})
    assert from_env.code == 0
    assert from_env.json()["namesrv"] == addr(ns)


# --------------------------------------------------------------------------- diff


async def test_diff_agreeing_servers_exit_0_until_one_is_changed(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    first, second = await start_namesrv(), await start_namesrv()
    await start_broker([first, second], "broker-a", "127.0.0.1:10961", Same=(4, 4))
    await start_broker([first, second], "broker-b", "127.0.0.1:10971", Same=(2, 2), B=(1, 1))
    both = addrs(first, second)

    agree = await admin("-n", both, "diff")
    assert agree.code == 0, agree.out + agree.err
    assert "agree" in agree.out
    document = (await admin("-n", both, "--json", "diff")).json()
    assert document["agree"] is True and document["differences"] == []
    assert document["summary"][addr(first)] == {"brokers": 2, "topics": 2}

    # wipeWritePerm sent to one server only: exactly the divergence of issue #4807.
    assert (await admin("-n", addr(second), "wipeWritePerm", "-b", "broker-b")).code == 0
    differ = (await admin("-n", both, "--json", "diff")).json()
    assert [(d["topic"], d["broker"], d["field"], d["values"]) for d in differ["differences"]] == [
        ("B", "broker-b", "perm", {addr(first): 6, addr(second): 4}),
        ("Same", "broker-b", "perm", {addr(first): 6, addr(second): 4}),
    ]


async def test_diff_names_missing_brokers_topics_and_queue_differences(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    first, second = await start_namesrv(), await start_namesrv()
    a, b = addr(first), addr(second)
    await start_broker([first, second], "broker-a", "127.0.0.1:10961", Shared=(4, 4))
    await start_broker([first], "broker-only", "127.0.0.1:10981", OnlyHere=(2, 2))
    # The same broker told the two servers different things (a registration that was lost).
    await start_broker([first], "broker-q", "127.0.0.1:10991", QTopic=(4, 4))
    await start_broker([second], "broker-q", "127.0.0.1:10991", QTopic=(4, 8))

    result = await admin("-n", f"{a};{b}", "diff")
    assert result.code == 5, result.out + result.err
    rows = [line.split() for line in result.out.splitlines()]
    broker_row = "broker broker-only broker cluster AdminCluster: 0=127.0.0.1:10981 absent"
    topic_row = "topic OnlyHere topic broker-only r=2 w=2 perm=6 flag=0 absent"
    assert broker_row.split() in rows
    assert topic_row.split() in rows
    assert ["queue", "QTopic", "broker-q", "writeQueueNums", "4", "8"] in rows
    assert a in result.out and b in result.out  # the servers are named (column headers)

    document = (await admin("-n", f"{a};{b}", "--json", "diff")).json()
    assert document["agree"] is False
    found = {
        (d["kind"], d["topic"], d["broker"], d["field"]): d["values"]
        for d in document["differences"]
    }
    assert set(found) == {
        ("broker", None, "broker-only", "broker"),
        ("topic", "OnlyHere", None, "topic"),
        ("queue", "QTopic", "broker-q", "writeQueueNums"),
    }
    assert found["broker", None, "broker-only", "broker"][b] is None
    assert "127.0.0.1:10981" in found["broker", None, "broker-only", "broker"][a]
    assert found["topic", "OnlyHere", None, "topic"][b] is None
    assert found["queue", "QTopic", "broker-q", "writeQueueNums"] == {a: 4, b: 8}

    # A server that cannot be asked makes the comparison impossible: exit 3, not 0 or 5.
    unreachable = await admin("-n", f"{a};127.0.0.1:{free_port()}", "diff")
    assert unreachable.code == 3
    assert_one_error_line(unreachable, "cannot connect")
