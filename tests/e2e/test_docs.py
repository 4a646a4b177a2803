"""The documents hold: every link resolves inside the repository, and docs/journal.md lists
exactly the events and fields a running ``pynamesrv serve`` writes."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import events
from pynamesrv.namesrv.journal import journal_files, read_records
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
DOCS = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
COMMON = {"ts", "ns", "seq", "type"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_link_resolves_inside_the_repository(doc: Path) -> None:
    text = doc.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        assert (doc.parent / target).exists(), f"{doc.name}: link to {target} goes nowhere"
    # design.md is the project's internal design note, not shipped: nothing may point at it.
    assert "design.md" not in text, f"{doc.name} cites design.md, which is not in the repo"


def documented_events() -> dict[str, dict[str, str]]:
    """docs/journal.md: ``### `type``` sections with ``| `field` | type | meaning |`` rows;
    the "Every line" table under the key ``*``."""
    tables: dict[str, dict[str, str]] = {}
    current: str | None = None
    for line in (REPO / "docs" / "journal.md").read_text().splitlines():
        heading = re.match(r"^#{2,3} (.*)$", line)
        if heading:
            title = heading[1]
            named = re.fullmatch(r"`(\w+)`", title)
            current = named[1] if named else ("*" if title == "Every line" else None)
            continue
        row = re.match(r"^\| `(\w+)` \| ([^|]+) \| (.*) \|$", line)
        if row and current is not None:
            tables.setdefault(current, {})[row[1]] = row[3]
    return tables


def test_journal_doc_lists_every_event_dataclass_field() -> None:
    documented = documented_events()
    assert set(documented["*"]) == COMMON
    classes = [
        c for c in vars(events).values()
        if isinstance(c, type) and issubclass(c, events.Event) and c is not events.Event
    ]  # fmt: skip
    assert len(classes) >= 8
    for cls in classes:
        assert cls.TYPE in documented, f"docs/journal.md has no section for {cls.TYPE}"
        assert set(documented[cls.TYPE]) == {f.name for f in fields(cls)}, cls.TYPE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def admin(port: int, code: int, body: bytes = b"", **header: str) -> None:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        answer = await client.request(
            RemotingCommand(code=code, version=401, ext_fields=header, body=body)
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, (code, answer.remark)


async def every_kind_of_change(port: int) -> None:
    """Drive the server through each event the journal knows."""

    def make(
        name: str, cluster: str, port_: int, topics: dict[str, int], broker_id: int = 0
    ) -> BrokerClient:
        return BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{port}"],
            cluster=cluster,
            broker_name=name,
            broker_id=broker_id,
            broker_addr=f"127.0.0.1:{port_}",
            topics={t: TopicConfig(t, n, n, 6) for t, n in topics.items()},
        )

    slave = make("doc-broker-a", "DocCluster", 10912, {}, broker_id=1)
    assert all(o.ok for o in await slave.start())
    a = make("doc-broker-a", "DocCluster", 10911, {"DocShared": 4, "DocOnlyA": 2, "DocBoth": 1})
    b = make("doc-broker-b", "OtherCluster", 10921, {"DocShared": 2, "DocBoth": 1})
    for broker in (a, b):  # a's master has a lower id than its slave: min_broker_id_changed
        assert all(o.ok for o in await broker.start())
    await a.register_all()  # unchanged: broker_heartbeat
    a.update_topics(TopicConfig("DocNew", 1, 1, 6))
    await a.register_all()  # changed: broker_registered, first = false
    await query_route(port, "DocShared")
    await query_route(port, "NoSuchDocTopic")
    await admin(port, RequestCode.PUT_KV_CONFIG, namespace="DOC", key="k", value="v")
    await admin(port, RequestCode.DELETE_KV_CONFIG, namespace="DOC", key="k")
    await admin(port, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true")
    await admin(port, RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="doc-broker-a")
    await admin(port, RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="doc-broker-a")
    route = {"queueDatas": [{"brokerName": "doc-broker-a", "readQueueNums": 1,
                             "writeQueueNums": 1, "perm": 6, "topicSysFlag": 0}]}  # fmt: skip
    await admin(port, RequestCode.REGISTER_TOPIC_IN_NAMESRV, body=fastjson.dumps(route),
                topic="DocAdmin")  # fmt: skip
    await admin(port, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="DocShared",
                clusterName="OtherCluster")  # fmt: skip
    await admin(port, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="DocAdmin")
    # deleteTopicWithBrokerRegistration: a registration that no longer lists a topic drops
    # it (topic_removed; topic_queues_changed where another group still serves it)
    a.update_topics(remove=("DocOnlyA", "DocBoth"))
    await a.register_all()
    for broker in (slave, a, b):
        await broker.stop()  # broker_removed, topic_removed (no_broker)


def test_journal_doc_matches_what_serve_writes(tmp_path: Path) -> None:
    port = free_port()
    journal = tmp_path / "journal"
    config = tmp_path / "namesrv.properties"
    config.write_text(
        f"kvConfigPath={tmp_path / 'kv.json'}\nhttpPort=0\ndeleteTopicWithBrokerRegistration=true\n"
    )

    def serve() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [ENTRY_POINT, "serve", "-c", config, "--listen", "127.0.0.1", "--port", str(port),
             "--journal-dir", journal],
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        return proc

    async def changes_then_stop(proc: subprocess.Popen[bytes]) -> None:
        await every_kind_of_change(port)
        # a broker still registered (its connection open) when the server stops: the next
        # start recovers it, which writes broker_recovered
        kept = BrokerClient(namesrv_addrs=[f"127.0.0.1:{port}"], cluster="DocCluster",
                            broker_name="doc-broker-k", broker_id=0,
                            broker_addr="127.0.0.1:10931", topics={})  # fmt: skip
        assert all(o.ok for o in await kept.register_all())
        proc.send_signal(signal.SIGTERM)  # a clean stop writes route_queries, snapshot, stop
        assert await asyncio.to_thread(proc.wait, 20) == 0
        await kept.close_connections()

    proc = serve()
    try:
        asyncio.run(changes_then_stop(proc))
        proc = serve()  # a warm restart: server_started with recovered, broker_recovered
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()

    records = list(read_records(journal_files(journal)))
    documented = documented_events()
    seen: dict[str, set[str]] = {}
    reasons: dict[str, set[str]] = {}
    for record in records:
        if record.get("reason") is not None:
            reasons.setdefault(record["type"], set()).add(record["reason"])
        kind = record["type"]
        assert kind in documented, f"{kind} is written but not in docs/journal.md"
        extra = set(record) - COMMON - set(documented[kind])
        assert not extra, f"{kind} carries undocumented fields {sorted(extra)}"
        seen.setdefault(kind, set()).update(set(record) - COMMON)
    for kind, written in reasons.items():  # every reason written is one the table names
        named = set(re.findall(r"`(\w+)`", documented[kind]["reason"]))
        assert written <= named, f"{kind} reasons {sorted(written - named)} not in the doc"
    assert "not_in_registration" in reasons["topic_removed"] & reasons["topic_queues_changed"]
    kinds = set(documented) - {"*"}
    assert set(seen) == kinds, f"never written: {sorted(kinds - set(seen))}"
    for kind, fields_seen in seen.items():
        optional = {f for f, meaning in documented[kind].items() if meaning.startswith("only when")}
        assert set(documented[kind]) - optional <= fields_seen, kind
    # The ordering the document promises: seq from 1, one up per line, in file order; again
    # from 1 in the restarted process.
    restart = max(i for i, r in enumerate(records) if r["type"] == "server_started")
    assert restart > 0
    for run in (records[:restart], records[restart:]):
        assert [r["seq"] for r in run] == list(range(1, len(run) + 1))
    assert [r["type"] for r in records[restart : restart + 3]] == [
        "server_started", "broker_recovered", "snapshot"
    ]  # fmt: skip
    assert records[0]["type"] == "server_started" and records[-1]["type"] == "server_stopped"
    assert [r["type"] for r in records[-3:]] == ["route_queries", "snapshot", "server_stopped"]


async def test_access_control_doc_quotes_the_refusal_of_a_remote_acl_change(
    start_namesrv: Any,
) -> None:
    ns = await start_namesrv()
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT, "admin", "-n", f"127.0.0.1:{ns.port}",
        "updateNamesrvConfig", "-k", "aclFile", "-v", "/tmp/acl.yml",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    remark = err.decode().strip().split("answered NO_PERMISSION (16): ", 1)[1]
    doc = " ".join((REPO / "docs" / "access-control.md").read_text().split())
    assert f'NO_PERMISSION "{remark}"' in doc
    assert f"NO_PERMISSION (16): {remark}" in doc  # the audit line's example
    assert "black list" not in doc
