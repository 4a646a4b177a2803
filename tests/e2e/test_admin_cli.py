"""``pynamesrv admin`` end to end: the installed command against running name servers.

Every subcommand runs as an operator runs it, through the installed entry point in a
subprocess, against in-process name servers (tests/conftest.py) that brokers registered
with. The CLI runs under ``asyncio.create_subprocess_exec`` so the servers' event loop keeps
serving while the command waits. Assertions check effects, not just exit codes: the KV file
on disk, the perm the route shows afterwards, the route being gone; and the exit codes
scripts rely on (1 error answer, 2 usage, 3 unreachable, 4 timeout, 5 diff disagrees,
6 a write that changed nothing).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.cli.main import cli
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.pipeline.timetravel import route_digest
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from tls_pki import TlsFiles

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
    listed = (await admin("-n", n, "topicList", "-c")).out.splitlines()
    assert [line.split() for line in listed] == [
        ["Cluster", "Topic"],
        [CLUSTER, "Other"],
        [CLUSTER, "ReadTopic"],
    ]

    route = await admin("-n", n, "topicRoute", "-t", "ReadTopic", "--list")
    assert route.code == 0
    assert [CLUSTER, "broker-b", "0=127.0.0.1:10921", "8", "8", "6(RW-)"] in [
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
    assert_one_error_line(
        result, f"{addr(ns)} answered TOPIC_NOT_EXIST (17)", "for the topic: NoSuchTopic"
    )
    # --json: the error is a JSON document on stdout as well.
    document = result.json()
    assert document["exitCode"] == 1 and document["namesrv"] == addr(ns)
    assert (document["code"], document["codeName"]) == (17, "TOPIC_NOT_EXIST")
    assert "No topic route info in name server for the topic: NoSuchTopic" in document["remark"]
    assert document["error"] == result.err.strip().removeprefix("error: ")


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
    assert ["orderMessageEnable", "true", "live", "yes"] in [
        line.split() for line in after.out.splitlines()
    ]
    assert ns.config.order_message_enable is True

    refused = await admin("-n", n, "updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x")
    assert refused.code == 1
    assert_one_error_line(refused, f"{n} answered NO_PERMISSION (16)")
    remark = refused.err.strip().split("answered NO_PERMISSION (16): ", 1)[1]
    (row,) = [line for line in refused.out.splitlines() if line.startswith(n)]
    assert row.split() == [n, *remark.split(), "FAILED"]  # the remark in its column too

    bad = await admin(
        "-n", n, "updateNamesrvConfig", "-k", "scanNotActiveBrokerInterval", "-v", "abc"
    )  # fmt: skip
    assert bad.code == 1, bad.out
    assert "scanNotActiveBrokerInterval='abc' is not allowed" in bad.err
    assert ns.config.scan_not_active_broker_interval != "abc"


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
    assert "4(R--)" in (await admin("-n", n, "topicRoute", "-t", "PermTopic", "-l")).out

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

    # -c limits the delete to that cluster's brokers: another cluster changes nothing,
    # which is said (exit 6).
    other = await admin("-n", n, "deleteTopic", "-t", "Doomed2", "-c", "OtherCluster")
    assert other.code == 6
    assert_one_error_line(other, "no queues of topic 'Doomed2' in cluster 'OtherCluster'")
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
    broker_row = "broker - broker-only broker cluster AdminCluster: 0=127.0.0.1:10981 absent"
    topic_row = "topic OnlyHere - topic broker-only r=2 w=2 perm=6 flag=0 absent"
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


# --------------------------------------------------------------------------- issue 15:
# when config changes apply (6), mqadmin's spellings (7), every server's config (8), output
# for pipes and scripts (9), the wrong port named (10), writes that change nothing (11).


async def test_config_update_says_when_it_applies_and_config_shows_every_key(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv()
    n = addr(ns)
    later = await admin(
        "-n", n, "updateNamesrvConfig", "-k", "serverSocketSndBufSize", "-v", "65536"
    )
    assert later.code == 0, later.err
    rows = [line.split() for line in later.out.splitlines()]
    assert rows[0] == ["Name", "server", "Remark", "Result"]
    assert rows[1] == [
        n,
        "applies",
        "at",
        "the",
        "next",
        "restart:",
        "serverSocketSndBufSize",
        "OK",
    ]
    assert ns.config.server_socket_snd_buf_size == 65536  # saved, and reported as such
    live = await admin(
        "-n", n, "--json", "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true"
    )
    assert live.json()["results"] == [{"namesrv": n, "ok": True}]  # no remark: live at once
    refused = await admin("-n", n, "updateNamesrvConfig", "-k", "listenPort", "-v", "1")
    assert refused.code == 1
    assert_one_error_line(refused, "NO_PERMISSION (16): Can not update config remotely: listenPort")

    table = await admin("-n", n, "getNamesrvConfig")
    assert table.code == 0, table.err
    rows = [line.split() for line in table.out.splitlines()]
    assert rows[1] == ["Key", "Value", "Applies", "Remote"]
    by_key = {row[0]: row[1:] for row in rows[2:]}
    assert by_key["serverSocketSndBufSize"] == ["65536", "restart", "yes"]
    assert by_key["orderMessageEnable"] == ["true", "live", "yes"]
    assert by_key["listenPort"] == [str(ns.port), "restart", "no"]
    assert by_key["kvConfigPath"][1:] == ["restart", "no"]  # a file: only in the -c file
    assert by_key["clusterTest"] == ["false", "no-effect", "yes"]
    document = (await admin("-n", n, "--json", "getNamesrvConfig")).json()
    assert document["settings"]["listenPort"] == {"applies": "restart", "remote": False}
    assert document["settings"]["orderMessageEnable"] == {"applies": "live", "remote": True}


async def test_mqadmin_spellings_of_the_name_server_option_and_long_options(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    n = addr(ns)
    await start_broker([ns], "broker-s", "127.0.0.1:10913", SpellTopic=(2, 2))
    spellings: list[tuple[list[str], dict[str, str] | None]] = [
        (["clusterList", "-n", n], None),
        (["clusterList", "--namesrvAddr", n], None),  # mqadmin's
        (["--namesrvAddr", n, "clusterList"], None),
        (["clusterList", "--namesrv", n], None),  # this tool's earlier spelling
        (["clusterList"], {"NAMESRV_ADDR": n}),
    ]
    for args, env in spellings:
        result = await admin("--json", *args, env=env)
        assert result.code == 0, (args, result.err)
        assert [b["brokerName"] for b in result.json()["brokers"]] == ["broker-s"]

    # mqadmin's long option names, after the subcommand as mqadmin puts them.
    put = ("updateKvConfig", "--namesrvAddr", n, "--namespace", "S", "--key", "k", "--value", "v")
    assert (await admin(*put)).code == 0
    got = await admin("getKvConfig", "--namesrvAddr", n, "--namespace", "S", "--key", "k")
    assert (got.code, got.out) == (0, "v\n")
    assert (await admin("wipeWritePerm", "--brokerName", "broker-s", "-n", n)).code == 0
    assert (await admin("addWritePerm", "--brokerName", "broker-s", "-n", n)).code == 0
    models = await admin("topicList", "--clusterModel", "-n", n)
    assert [CLUSTER, "SpellTopic"] in [line.split() for line in models.out.splitlines()]
    one = await admin("deleteTopic", "--topic", "SpellTopic", "--clusterName", CLUSTER, "-n", n)
    assert one.code == 0, one.err


# Every twin of an mqadmin subcommand takes mqadmin's option letters and long names
# (mqadmin 4.9.4 / 5.x SubCommand.buildCommandlineOptions).
MQADMIN_OPTIONS: dict[str, list[str]] = {
    "clusterList": ["-c, --clusterName", "-m, --moreStats", "-i, --interval"],
    "topicList": ["-c, --clusterModel"],
    "topicRoute": ["-t, --topic", "-l, --list"],
    "topicClusterList": ["-t, --topic"],
    "getKvConfig": ["-s, --namespace", "-k, --key"],
    "updateKvConfig": ["-s, --namespace", "-k, --key", "-v, --value"],
    "deleteKvConfig": ["-s, --namespace", "-k, --key"],
    "getNamesrvConfig": [],
    "updateNamesrvConfig": ["-k, --key", "-v, --value"],
    "wipeWritePerm": ["-b, --brokerName"],
    "addWritePerm": ["-b, --brokerName"],
    "deleteTopic": ["-t, --topic", "-c, --clusterName"],
}


def test_help_command_shows_mqadmin_option_letters() -> None:
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli, ["admin", *args], prog_name="pynamesrv")

    for command, options in MQADMIN_OPTIONS.items():
        result = run("help", command)
        assert result.exit_code == 0, result.output
        assert result.output.startswith(f"Usage: pynamesrv admin {command} [OPTIONS]")
        for option in [*options, "-n, --namesrvAddr, --namesrv", "-h, --help", "--json"]:
            assert option in result.output, (command, option)
        assert result.output == run(command, "-h").output
    listing = run("help")
    assert listing.exit_code == 0 and "topicRoute" in listing.output
    typo = run("help", "topicroute")
    assert typo.exit_code == 2
    assert "no such command 'topicroute' (did you mean 'topicRoute'?)" in typo.output
    typo = run("clusterlist")
    assert typo.exit_code == 2 and "did you mean 'clusterList'?" in typo.output


def test_broker_commands_and_the_command_list_are_named_in_full() -> None:
    """mqadmin's broker commands are named as such, not taken for a typo of a name-server
    command, and no line of the command list is cut off (issue 26, finding 6)."""
    runner = CliRunner()
    for args in (["updateTopic", "-n", "127.0.0.1:1"], ["help", "updateTopic"]):
        result = runner.invoke(cli, ["admin", *args])
        assert result.exit_code == 2
        assert "did you mean" not in result.output
        assert (
            "no such command 'updateTopic': pynamesrv admin has no updateTopic, an mqadmin "
            "command for brokers (run mqadmin updateTopic against a broker; here, "
            "registerTopic puts a topic's queues into the name servers' routes)"
        ) in " ".join(result.output.split())
    listing = runner.invoke(cli, ["admin", "--help"], terminal_width=80, env={"COLUMNS": "80"})
    commands = listing.output.split("Commands:")[1].split("Exit codes:")[0]
    assert "getNamesrvConfig" in commands and "help" in commands
    cut = [line for line in commands.splitlines() if line.rstrip().endswith("...")]
    assert cut == []


async def test_cluster_list_more_stats_shows_what_a_name_server_knows(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    n = addr(ns)
    await start_broker([ns], "broker-m", "127.0.0.1:10914", M1=(4, 2), M2=(8, 8))
    await start_broker([ns], "broker-o", "127.0.0.1:10915", M1=(1, 1))
    assert (await admin("-n", n, "wipeWritePerm", "-b", "broker-m")).code == 0

    more = await admin("-n", n, "clusterList", "-m")
    assert more.code == 0, more.err
    rows = [line.split() for line in more.out.splitlines()]
    assert rows == [
        ["Cluster", "Broker", "BID", "Address", "Topics", "Read-only", "Read", "queues",
         "Write", "queues"],
        [CLUSTER, "broker-m", "0", "127.0.0.1:10914", "2", "2", "12", "10"],
        [CLUSTER, "broker-o", "0", "127.0.0.1:10915", "1", "0", "1", "1"],
    ]  # fmt: skip
    # What mqadmin -m prints comes from the brokers: said, not faked.
    assert more.err.startswith("note: message counts (mqadmin clusterList -m's #InTotalYest")
    assert "a name server does not have" in more.err
    document = (await admin("-n", n, "--json", "clusterList", "-m")).json()
    assert document["notAvailable"] == ["InTotalYest", "OutTotalYest", "InTotalToday",
                                        "OutTotalToday"]  # fmt: skip
    assert document["brokers"][0] == {
        "cluster": CLUSTER, "brokerName": "broker-m", "brokerId": 0, "addr": "127.0.0.1:10914",
        "topics": 2, "readOnlyTopics": 2, "readQueues": 12, "writeQueues": 10,
    }  # fmt: skip


async def test_cluster_list_interval_repeats_until_interrupted(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    ns = await start_namesrv()
    await start_broker([ns], "broker-i", "127.0.0.1:10916", I1=(1, 1))
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT, "admin", "-n", addr(ns), "--json", "clusterList", "-i", "1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        first = await asyncio.wait_for(proc.stdout.readline(), 30)
        second = await asyncio.wait_for(proc.stdout.readline(), 30)
    finally:
        proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 30)
    for line in (first, second):  # one compact document per line
        document = json.loads(line)
        assert [b["brokerName"] for b in document["brokers"]] == ["broker-i"]
    assert code == 130  # interrupted, as a shell reports it


async def test_get_namesrv_config_shows_every_server_under_its_banner(
    start_namesrv: StartNamesrv,
) -> None:
    first, second = await start_namesrv(), await start_namesrv()
    a, b = addr(first), addr(second)
    result = await admin("-n", f"{a};{b}", "getNamesrvConfig")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    banners = [i for i, line in enumerate(lines) if line.startswith("====")]
    assert [lines[i] for i in banners] == [
        f"============{a}============",
        f"============{b}============",
    ]
    sections = [lines[banners[0] + 1 : banners[1]], lines[banners[1] + 1 :]]
    for section, ns in zip(sections, (first, second), strict=True):
        assert section[0].split() == ["Key", "Value", "Applies", "Remote"]
        assert ["listenPort", str(ns.port), "restart", "no"] in [s.split() for s in section]

    # A server that cannot be asked is an error line; the others are still shown.
    dead = f"127.0.0.1:{free_port()}"
    partly = await admin("-n", f"{a};{dead};{b}", "getNamesrvConfig")
    assert partly.code == 3
    assert_one_error_line(partly, f"cannot connect to {dead}")
    assert partly.out.count("============") == 4 and dead not in partly.out
    document = (await admin("-n", f"{a};{dead};{b}", "--json", "getNamesrvConfig")).json()
    assert [(s["namesrv"], s["ok"]) for s in document["servers"]] == [
        (a, True),
        (dead, False),
        (b, True),
    ]
    assert document["servers"][2]["config"]["listenPort"] == str(second.port)
    assert document["servers"][1]["exitCode"] == 3
    assert document["namesrv"] == a and document["config"]["listenPort"] == str(first.port)


async def test_piped_tables_keep_each_record_on_one_plain_line(
    start_namesrv: StartNamesrv,
) -> None:
    ns = await start_namesrv()
    n = addr(ns)
    long_value = "v" * 300
    assert (
        await admin("-n", n, "updateKvConfig", "-s", "P", "-k", "long", "-v", long_value)
    ).code == 0
    assert (await admin("-n", n, "updateKvConfig", "-s", "P", "-k", "two", "-v", "a\nb")).code == 0
    assert (await admin("-n", n, "updateKvConfig", "-s", "P", "-k", "empty", "-v", "")).code == 0
    listing = await admin("-n", n, "kvList", "-s", "P")
    assert listing.code == 0 and listing.out.isascii()
    assert listing.out.splitlines() == [
        "Key    Value",
        "empty  -",  # an empty cell keeps its field
        "long   " + long_value,  # not wrapped at 80 columns
        "two    a\\nb",  # a line break cannot split the record
    ]
    # getKvConfig prints the value itself, for scripts that read it.
    assert (await admin("-n", n, "getKvConfig", "-s", "P", "-k", "two")).out == "a\nb\n"


async def test_topic_route_prints_the_route_as_mqadmin_does(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    # The exact text for a known body (a Java 4.9.4 answer from the golden corpus).
    async with fake_namesrv(body=GOLDEN_ROUTE) as fake:
        result = await admin("-n", fake, "topicRoute", "-t", "GoldenTopicA")
    assert result.code == 0, result.err
    assert result.out == GOLDEN_ROUTE_AS_MQADMIN_PRINTS_IT + "\n"

    # A live route: the same format, and the same route as --json reports.
    ns = await start_namesrv()
    n = addr(ns)
    await start_broker([ns], "broker-j", "127.0.0.1:10917", JsonTopic=(4, 2))
    text = (await admin("-n", n, "topicRoute", "-t", "JsonTopic")).out
    route = (await admin("-n", n, "--json", "topicRoute", "-t", "JsonTopic")).json()["route"]
    assert fastjson.loads(text) == route
    assert text.startswith(
        '{\n\t"brokerDatas":[\n\t\t{\n\t\t\t"brokerAddrs":{0:"127.0.0.1:10917"\n'
    )


async def test_topic_route_digest_is_the_one_routes_at_prints(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    """``--digest`` is the canonical digest of the live answer, which pipeline time travel
    prints for the route it rebuilds (tests/pipeline/test_real_server.py ties the two)."""
    ns = await start_namesrv()
    n = addr(ns)
    await start_broker([ns], "broker-d", "127.0.0.1:10918", DigestTopic=(4, 4))
    body = ns.view.route_body("DigestTopic")
    assert body is not None
    shown = await admin("-n", n, "--json", "topicRoute", "-t", "DigestTopic", "--digest")
    assert shown.json()["digest"] == route_digest(body)
    text = (await admin("-n", n, "topicRoute", "-t", "DigestTopic", "--digest")).out
    assert text.splitlines()[-1] == f"digest: {route_digest(body)}"


async def test_json_errors_are_json_on_stdout_too() -> None:
    dead = f"127.0.0.1:{free_port()}"
    unreachable = await admin("-n", dead, "--json", "clusterList")
    assert unreachable.code == 3
    assert_one_error_line(unreachable, f"cannot connect to {dead}")
    assert unreachable.json() == {
        "error": unreachable.err.strip().removeprefix("error: "),
        "exitCode": 3,
    }
    usage = await admin("--json", "topicRoute", "-n", dead)  # -t missing
    assert usage.code == 2
    assert usage.json() == {"error": "Missing option '-t' / '--topic'.", "exitCode": 2}
    no_server = await admin("clusterList", "--json")
    assert no_server.code == 2 and "NAMESRV_ADDR" in no_server.json()["error"]


async def test_the_http_port_is_named_for_what_it_is(start_namesrv: StartNamesrv) -> None:
    ns = await start_namesrv()
    http = HttpServer(ns.view)
    port = await http.start("127.0.0.1", 0)
    try:
        result = await admin("-n", f"127.0.0.1:{port}", "clusterList")
        as_json = await admin("-n", f"127.0.0.1:{port}", "--json", "topicList")
    finally:
        await http.stop()
    assert result.code == 3
    assert_one_error_line(
        result,
        f"127.0.0.1:{port} answered in HTTP: that is an HTTP server, not the name-server port",
    )
    assert "frame length" not in result.err
    assert as_json.code == 3 and "that is an HTTP server" in as_json.json()["error"]


async def test_tls_mismatches_are_named(start_namesrv: StartNamesrv, tls_files: TlsFiles) -> None:
    # A TLS server answering a plain frame with an alert record.
    async with fake_namesrv(raw_reply=TLS_ALERT) as tls_only:
        alert = await admin("-n", tls_only, "clusterList")
    assert alert.code == 3
    assert_one_error_line(alert, f"{tls_only} answered with a TLS record", "add --tls")

    # --tls against a plain name server.
    ns = await start_namesrv()
    plain_port = await admin("-n", addr(ns), "--tls-insecure", "clusterList")
    assert plain_port.code == 3
    assert_one_error_line(plain_port, "the server did not answer in TLS: drop --tls")
    assert not re.search(r"[a-z]Error\b", plain_port.err), plain_port.err  # no class names

    # A plain frame to an HTTPS port: closed without a word.
    https_ns = await start_namesrv(
        httpTlsCertPath=str(tls_files.server_cert), httpTlsKeyPath=str(tls_files.server_key)
    )
    https = HttpServer(https_ns.view)
    port = await https.start("127.0.0.1", 0)
    try:
        closed = await admin("-n", f"127.0.0.1:{port}", "clusterList")
    finally:
        await https.stop()
    assert closed.code == 3
    assert_one_error_line(closed, "closed without answering (if that port requires TLS, add --tls)")


async def test_writes_that_change_nothing_say_so_and_exit_6(
    start_namesrv: StartNamesrv, start_broker: StartBroker
) -> None:
    first, second = await start_namesrv(), await start_namesrv()
    a, b = addr(first), addr(second)
    await start_broker([first], "broker-n", "127.0.0.1:10918", NoopTopic=(2, 2))

    wipe = await admin("-n", a, "wipeWritePerm", "-b", "no-such-broker")
    assert wipe.code == 6
    assert_one_error_line(wipe, f"{a} has no topic of broker 'no-such-broker': nothing changed")
    assert [a, "0", "UNCHANGED"] in [line.split() for line in wipe.out.splitlines()]
    add = await admin("-n", a, "--json", "addWritePerm", "-b", "no-such-broker")
    assert add.code == 6
    assert add.json()["results"] == [
        {
            "namesrv": a,
            "ok": False,
            "addTopicCount": 0,
            "error": f"{a} has no topic of broker 'no-such-broker': nothing changed "
            "(clusterList shows the broker names)",
            "exitCode": 6,
        }
    ]
    gone = await admin("-n", a, "deleteTopic", "-t", "NoSuchTopic")
    assert gone.code == 6
    assert_one_error_line(gone, f"{a} has no topic 'NoSuchTopic': nothing deleted")
    absent = await admin("-n", a, "deleteKvConfig", "-s", "N", "-k", "absent")
    assert absent.code == 6
    assert_one_error_line(absent, f"{a} has no key 'absent' in namespace 'N': nothing deleted")
    ignored = ("registerTopic", "-t", "T", "-b", "no-such-broker", "-r", "1", "-w", "1")
    unknown = await admin("-n", a, *ignored)
    assert unknown.code == 6
    assert_one_error_line(unknown, f"{a} knows no broker 'no-such-broker'")

    # Two servers, the broker known to the first only: the first changes, the run says the
    # second did not (the servers have diverged) and exits 6.
    both = await admin("-n", f"{a};{b}", "wipeWritePerm", "-b", "broker-n")
    assert both.code == 6
    rows = [line.split() for line in both.out.splitlines()]
    assert [a, "1", "OK"] in rows and [b, "0", "UNCHANGED"] in rows
    assert_one_error_line(both, f"{b} has no topic of broker 'broker-n'")
    # A key on one server only: deleted there, said for the other.
    assert (await admin("-n", a, "updateKvConfig", "-s", "N", "-k", "here", "-v", "1")).code == 0
    mixed = await admin("-n", f"{a};{b}", "deleteKvConfig", "-s", "N", "-k", "here")
    assert mixed.code == 6
    assert "here" not in json.loads(Path(first.config.kv_config_path).read_text())[
        "configTable"
    ].get("N", {})
    # A server that cannot be asked is the bigger problem: its exit code wins.
    dead = f"127.0.0.1:{free_port()}"
    worse = await admin("-n", f"{b};{dead}", "wipeWritePerm", "-b", "broker-n")
    assert worse.code == 3
    assert len(worse.err.strip().splitlines()) == 2  # one line per server


# A Java 4.9.4 NameServer's answer to mqadmin topicRoute (golden register-master-slave), and
# what mqadmin printed for it: fastjson's pretty format (see cli/admin/mqadmin_json.py).
GOLDEN_ROUTE = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:19120","1":"127.0.0.1:19130"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
GOLDEN_ROUTE_AS_MQADMIN_PRINTS_IT = (
    "{\n"
    '\t"brokerDatas":[\n'
    "\t\t{\n"
    '\t\t\t"brokerAddrs":{0:"127.0.0.1:19120",1:"127.0.0.1:19130"\n'
    "\t\t\t},\n"
    '\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t"cluster":"DefaultCluster"\n'
    "\t\t}\n"
    "\t],\n"
    '\t"filterServerTable":{},\n'
    '\t"queueDatas":[\n'
    "\t\t{\n"
    '\t\t\t"brokerName":"broker-a",\n'
    '\t\t\t"perm":6,\n'
    '\t\t\t"readQueueNums":4,\n'
    '\t\t\t"topicSysFlag":0,\n'
    '\t\t\t"writeQueueNums":4\n'
    "\t\t}\n"
    "\t]\n"
    "}"
)
# A TLS alert record (handshake failure), what a TLS-only server may answer a plain frame with.
TLS_ALERT = b"\x15\x03\x03\x00\x02\x02\x28"


@asynccontextmanager
async def fake_namesrv(*, body: bytes = b"", raw_reply: bytes | None = None) -> AsyncIterator[str]:
    """The other side of the connection: answers every request with SUCCESS and ``body``,
    or the first bytes it receives with ``raw_reply`` and a close."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                if raw_reply is not None:
                    writer.write(raw_reply)
                    break
                for request in decoder.feed(data):
                    answer = RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)
                    writer.write(encode(answer))
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()
