"""A running name server answers "the route at T" from its own journal: the JSON API
(/api/routes-at) and ``pynamesrv admin routeAt`` print the document ``pipeline routes-at``
prints over the same files, and the body in it is the one the server answered at T."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.cli.pipeline import pipeline
from pynamesrv.http import app as http_app
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv.events import BrokerHeartbeat, BrokerRemoved
from pynamesrv.namesrv.timetravel import route_digest
from pynamesrv.remoting.codes import Version
from waiting import EventLog, wait_for, wait_until

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
A1, A2 = "10.0.0.1:10911", "10.0.0.2:10911"
NS = "ra:9876"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def get_json(port: int, path: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as resp,
    ):
        return resp.status, json.loads(await resp.read())


async def admin(*args: str) -> tuple[int, str, str]:
    """``pynamesrv admin ARGS`` in a subprocess, so the server's loop keeps running."""
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT, "admin", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def routes_at(journal: Path, at: int, *extra: str) -> Any:
    result = CliRunner().invoke(
        pipeline, ["routes-at", "--journal", str(journal), "--time", str(at), *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


async def test_the_server_answers_the_route_it_gave_at_a_past_time(
    start_namesrv: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A flush interval no test waits for: the answer must flush what the journal holds.
    root = tmp_path / "journal"
    server = await start_namesrv(
        instanceName=NS, journalEnable=True, journalDir=root, journalFlushIntervalMs=60_000
    )
    http = HttpServer(server.view)
    await http.start("127.0.0.1", 0)
    threads: list[threading.Thread] = []
    rebuild = http_app.route_at

    def watched(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return rebuild(*args)

    monkeypatch.setattr(http_app, "route_at", watched)
    log = EventLog(server)
    brokers = [
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{server.port}"], cluster="C", broker_name=name,
            broker_id=0, broker_addr=addr, register_period_s=0.2, heartbeat_timeout_ms=5000,
            topics={t: TopicConfig(t, queues, queues, 6) for t in topics},
        )
        for name, addr, topics, queues in (("bA", A1, ("T",), 4), ("bB", A2, ("T", "U"), 8))
    ]  # fmt: skip
    try:
        for broker in brokers:
            assert all(outcome.ok for outcome in await broker.start())
            await log.wait(BrokerHeartbeat, broker_addr=broker.broker_addr)
        then = {v: await query_route(server.port, "T", v) for v in (Version.V4_9_4, Version.V4_6_0)}
        at = now_ms()
        wait_until(lambda: now_ms() > at, "the clock past T")
        await brokers[1].stop()  # bB unregisters: T keeps bA alone, U goes
        await log.wait(BrokerRemoved, broker_addr=A2)
        after = await query_route(server.port, "T")

        status, document = await get_json(http.port, f"/api/routes-at?topic=T&time={at}")
        assert status == 200, document
        assert document[NS]["topics"]["T"]["body"].encode() == then[Version.V4_9_4].body
        assert document[NS]["topics"]["T"]["digest"] == route_digest(then[Version.V4_9_4].body)
        assert threads and threading.main_thread() not in threads  # never on the loop
        legacy = await get_json(http.port, f"/api/routes-at?topic=T&time={at}&dialect=legacy")
        assert legacy[1][NS]["topics"]["T"]["body"].encode() == then[Version.V4_6_0].body
        now = await get_json(http.port, f"/api/routes-at?topic=T&time={now_ms()}")
        assert now[1][NS]["topics"]["T"]["body"].encode() == after.body  # flushed to answer

        code, out, err = await admin(
            "-n", f"127.0.0.1:{server.port}", "routeAt", "-t", "T", "--time", str(at),
            "--http", f"127.0.0.1:{http.port}",
        )  # fmt: skip
        assert (code, err) == (0, ""), err
        assert json.loads(out) == document

        gone = f"/api/routes-at?topic=U&time={now_ms()}"
        assert (await get_json(http.port, gone))[0] == 404
        code, out, err = await admin(
            "-n", f"127.0.0.1:{server.port}", "routeAt", "-t", "U", "--time", str(now_ms()),
            "--http", f"127.0.0.1:{http.port}",
        )  # fmt: skip
        assert code == 1 and "no route of U at" in err, err
        for query, status in (
            ("time=1", 400),  # no topic
            ("topic=T&time=yesterday", 400),
            (f"topic=T&time={now_ms() + 3_600_000}", 400),  # the future
            ("topic=T&time=1000", 404),  # before the journal
            (f"topic=T&time={at}&dialect=klingon", 400),
        ):
            answer = await get_json(http.port, f"/api/routes-at?{query}")
            assert answer[0] == status and answer[1]["error"], (query, answer)
    finally:
        for broker in brokers:
            await broker.stop()
        await http.stop()
        await server.stop()
    # The journal's own reader, over the files the server wrote: the same document.
    assert routes_at(root, at, "--instance", NS, "--topic", "T") == document


async def test_many_peers_asking_at_once_get_at_most_the_searches_budget_and_429(
    start_namesrv: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Time travel reads the journal: the whole process runs at most httpMaxSearches of it at
    once, whatever the number of peers asking; the others are answered 429 at once."""
    server = await start_namesrv(
        instanceName=NS, journalEnable=True, journalDir=tmp_path / "journal", httpMaxSearches=2
    )
    http = HttpServer(server.view)
    await http.start("127.0.0.1", 0)
    release = threading.Event()
    started: list[int] = []
    rebuild = http_app.route_at

    def held(*args: Any) -> Any:  # the rebuild, kept busy until the test lets it go
        started.append(1)
        release.wait(60)
        return rebuild(*args)

    monkeypatch.setattr(http_app, "route_at", held)
    path = f"/api/routes-at?topic=T&time={now_ms()}"
    peers = [asyncio.create_task(get_json(http.port, path)) for _ in range(20)]
    try:
        await wait_for(lambda: sum(p.done() for p in peers) >= 18, "18 peers answered")
        refused = [p.result() for p in peers if p.done()]
        assert all(status == 429 for status, _ in refused), refused
        assert len(started) <= 1  # one rebuild runs; the other admitted one waits its turn
    finally:
        release.set()
        answers = await asyncio.gather(*peers)
        await http.stop()
        await server.stop()
    assert sorted(status for status, _ in answers).count(429) == 18
    assert all(status in (200, 404) for status, _ in answers if status != 429)
