"""The HTTP port's limits (issue 24): a connection cap, a request timeout, bounded requests,
and a remoting port that keeps accepting while HTTP is flooded with slow connections."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import test_http
from test_http import HttpOf, get, scrape, value

from helpers import query_route, read_until_eof
from pynamesrv.http.guard import HEALTH_RESERVE, MAX_REQUEST_BYTES
from pynamesrv.remoting.codes import ResponseCode
from waiting import wait_for

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
http_of = test_http.http_of  # the fixture


@pytest.fixture
async def streams() -> AsyncIterator[list[Streams]]:
    """Raw connections a test opens; all closed at teardown."""
    opened: list[Streams] = []
    yield opened
    for _, writer in opened:
        writer.close()


async def connect(port: int, opened: list[Streams], data: bytes = b"") -> Streams:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    opened.append((reader, writer))
    if data:
        writer.write(data)
        await writer.drain()
    return reader, writer


async def test_a_slow_header_sender_is_closed_after_the_timeout(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    ctrl = await start_namesrv(httpHeaderTimeoutSeconds=1)
    http = await http_of(ctrl)
    reader, _ = await connect(http.port, streams, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    silent, _ = await connect(http.port, streams)  # a connection that never sends a byte
    assert await read_until_eof(reader) == b""
    assert await read_until_eof(silent) == b""
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_http_refused_total", reason="header_timeout") == 2
    assert value(samples, "pynamesrv_http_connections") == 1  # the scrape's own


async def test_a_complete_request_is_answered_and_the_connection_kept(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    """The timeout is per request: one that arrives in time is answered as before."""
    ctrl = await start_namesrv(httpHeaderTimeoutSeconds=1)
    http = await http_of(ctrl)
    reader, writer = await connect(http.port, streams, b"GET /healthz/live HTTP/1.1\r\n")
    writer.write(b"Host: x\r\n\r\n")
    assert (await reader.readuntil(b"live")).startswith(b"HTTP/1.1 200 OK")
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_http_refused_total", reason="header_timeout") == 0
    assert value(samples, "pynamesrv_http_connections") == 2


async def test_connections_past_the_cap_are_answered_503_and_closed(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    """Connections that have not sent a request are not idle (nothing to shed): past the cap
    and the health reserve, a new one is answered 503 at once."""
    ctrl = await start_namesrv(httpMaxConnections=2, httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    held = [(await connect(http.port, streams))[1] for _ in range(2 + HEALTH_RESERVE)]
    await wait_for(lambda: http.guard.open == 2 + HEALTH_RESERVE, "every slot open")
    assert len(http.guard.reserved) == HEALTH_RESERVE
    refused, _ = await connect(http.port, streams, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await read_until_eof(refused)
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
    for writer in held[1:]:
        writer.close()
    await wait_for(lambda: http.guard.open == 1, "one HTTP connection left")
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_http_refused_total", reason="max_connections") == 1
    assert value(samples, "pynamesrv_http_connections") == 2
    assert value(samples, "pynamesrv_http_max_connections") == 2


async def test_oversized_requests_are_refused_and_counted(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    ctrl = await start_namesrv(httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    # Many headers, each within aiohttp's field limit: the request's total is capped.
    headers = b"".join(b"X-%d: %s\r\n" % (n, b"a" * 8000) for n in range(10))
    assert len(headers) > MAX_REQUEST_BYTES
    many, _ = await connect(http.port, streams, b"GET / HTTP/1.1\r\n" + headers)
    assert await read_until_eof(many) == b""
    # One header longer than aiohttp's field limit: its parser answers 400.
    long, _ = await connect(
        http.port, streams, b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n"
    )
    assert (await read_until_eof(long)).startswith(b"HTTP/1.0 400 Bad Request\r\n")
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_http_refused_total", reason="too_large") == 1
    assert value(samples, "pynamesrv_http_refused_total", reason="bad_request") == 1


def _lower_open_files(limit: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


async def test_remoting_accepts_while_http_is_flooded_under_a_low_fd_limit(
    tmp_path: Path, streams: list[Streams]
) -> None:
    """The finding: under RLIMIT_NOFILE 1,024, 1,100 slow HTTP connections made every new
    remoting connection fail. Here 160 descriptors and 200 slow HTTP connections: HTTP gets
    a quarter of them, the rest are refused at once, and a route query is still answered."""
    limit, flood = 160, 200
    config = tmp_path / "namesrv.properties"
    with socket.socket() as probe:  # a free port for HTTP (httpPort=0 turns it off)
        probe.bind(("127.0.0.1", 0))
        http_port = probe.getsockname()[1]
    config.write_text(
        f"kvConfigPath={tmp_path / 'kv.json'}\nhttpPort={http_port}\nhttpHeaderTimeoutSeconds=600\n"
        "httpMaxConnectionsPerSource=1000\n"  # every connection comes from 127.0.0.1 here
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pynamesrv", "serve", "-c", str(config), "--listen", "127.0.0.1",
        "--port", "0", "--no-journal",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "ROCKETMQ_HOME": str(tmp_path / "home")},
        preexec_fn=lambda: _lower_open_files(limit),
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    ports: dict[str, int] = {}

    async def drain() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            if found := re.search(r"boot success.* address [\d.]+:(\d+)", line):
                ports["remoting"] = int(found[1])
            if found := re.search(r"HTTP server .* on [\d.]+:(\d+)", line):
                ports["http"] = int(found[1])

    draining = asyncio.create_task(drain())
    try:
        await wait_for(lambda: len(ports) == 2, "both ports open")
        readers = []
        for _ in range(flood):
            reader, _ = await connect(ports["http"], streams, b"GET / HTTP/1.1\r\n")
            readers.append(reader)
        cap = limit // 4

        # Every connection past the cap is answered 503 and closed (none waits in a backlog
        # the server cannot accept from).
        await wait_for(lambda: sum(_answered(r) for r in readers) == flood - cap, "refusals")
        answer = await query_route(ports["remoting"], "NoSuchTopic")
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        assert any("at most 40 HTTP connections" in line for line in lines), lines
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
        await draining


def _answered(reader: asyncio.StreamReader) -> bool:
    """Whether the server answered (the 503) or closed this connection."""
    return reader.at_eof() or len(reader._buffer) > 0  # type: ignore[attr-defined]


# ------------------------------------------------ slots that cannot be held (issue 32, #4)


async def ask(streams_pair: Streams, path: str) -> tuple[bytes, bytes]:
    """One keep-alive GET on an open connection: (status line, body)."""
    reader, writer = streams_pair
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
    body = await asyncio.wait_for(reader.readexactly(length), 30)
    return head.split(b"\r\n", 1)[0], body


async def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    ctrl = await start_namesrv(httpKeepAliveSeconds=1, httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    kept = await connect(http.port, streams)
    assert await ask(kept, "/healthz/live") == (b"HTTP/1.1 200 OK", b"live")
    assert await read_until_eof(kept[0]) == b""  # closed by the server, not by the test
    await wait_for(lambda: http.guard.open == 0, "the idle connection gone")


async def test_a_new_connection_sheds_the_oldest_idle_one_when_all_slots_are_taken(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    """256 keep-alive connections sending one request a minute held every slot: now the
    oldest idle one makes room. One in the middle of a request is never idle, even when it is
    older, and one that has not sent its first request is not either."""
    ctrl = await start_namesrv(httpMaxConnections=3, httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    busy = await connect(http.port, streams, b"GET /healthz HTTP/1.1\r\n")  # oldest, mid-way
    older = await connect(http.port, streams)
    newer = await connect(http.port, streams)
    assert (await ask(older, "/healthz"))[0] == b"HTTP/1.1 200 OK"
    assert (await ask(newer, "/healthz"))[0] == b"HTTP/1.1 200 OK"
    await wait_for(lambda: http.guard.open == 3, "three HTTP connections open")

    newcomer = await connect(http.port, streams)
    assert (await ask(newcomer, "/rocketmq/nsaddr"))[0] == b"HTTP/1.1 200 OK"
    assert await read_until_eof(older[0]) == b""  # the oldest idle one was closed
    assert (await ask(newer, "/healthz/live"))[1] == b"live"  # the others are still served
    busy[1].write(b"Host: x\r\n\r\n")
    assert (await busy[0].readuntil(b"ok")).startswith(b"HTTP/1.1 200 OK")
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_http_refused_total", reason="idle_shed") >= 1
    assert value(samples, "pynamesrv_http_refused_total", reason="max_connections") == 0


async def test_health_checks_and_metrics_are_answered_when_every_slot_is_held(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    """Connections in the middle of a request cannot be shed: the probes and the scrape get
    one of the reserved slots; anything else asked there is answered 503."""
    ctrl = await start_namesrv(httpMaxConnections=2, httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    for _ in range(2):
        await connect(http.port, streams, b"GET / HTTP/1.1\r\n")
    await wait_for(lambda: http.guard.open == 2, "every slot held")
    for path, expected in (("/healthz", b"ok"), ("/healthz/live", b"live")):
        reader, _ = await connect(
            http.port, streams, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        answer = await read_until_eof(reader)  # answered, then closed: the slot comes back
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
        assert answer.endswith(expected)
    status, _, _ = await get(http.port, "/metrics")
    assert status == 200
    reader, _ = await connect(http.port, streams, b"GET /api/status HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await read_until_eof(reader)
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
    assert answer.endswith(b"only /healthz, /healthz/live and /metrics are answered now")
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_http_refused_total", reason="max_connections") == 1
    assert value(samples, "pynamesrv_http_connections") == 3  # the two held, the scrape


async def test_one_address_holds_at_most_its_share_loopback_included(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    ctrl = await start_namesrv(httpMaxConnectionsPerSource=2, httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    idle = await connect(http.port, streams)
    assert (await ask(idle, "/healthz"))[0] == b"HTTP/1.1 200 OK"
    await connect(http.port, streams, b"GET / HTTP/1.1\r\n")  # mid-request
    # A third from 127.0.0.1 takes the idle one's place ...
    third = await connect(http.port, streams, b"GET /healthz/live HTTP/1.1\r\n")
    assert await read_until_eof(idle[0]) == b""
    # ... and a fourth finds none idle: refused at once.
    refused, _ = await connect(http.port, streams, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_until_eof(refused)).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert http.guard.per_source == {"127.0.0.1": 2}
    third[1].write(b"Host: x\r\n\r\n")
    assert (await third[0].readuntil(b"live")).startswith(b"HTTP/1.1 200 OK")
    assert http.guard.refused["idle_shed"] == 1
    assert http.guard.refused["max_per_source"] == 1


async def test_a_flood_of_http_requests_waits_for_the_budget_and_routes_are_answered(
    start_namesrv: Any, http_of: HttpOf, streams: list[Streams]
) -> None:
    """64 connections asking back to back put 64 requests in every turn of the loop the
    route queries share: the whole port reads httpMaxRequestsPerSecond. A pipelined batch
    spends the budget (here for a minute), then the next connection's request waits unread,
    and a route query is answered meanwhile."""
    ctrl = await start_namesrv(httpMaxRequestsPerSecond=1, httpHeaderTimeoutSeconds=600)
    http = await http_of(ctrl)
    batch = 80
    flood = await connect(
        http.port, streams, b"GET /healthz/live HTTP/1.1\r\nHost: x\r\n\r\n" * batch
    )
    answers = b""
    while answers.count(b"live") < batch:  # every request of the batch answered, one a turn
        answers += await asyncio.wait_for(flood[0].read(65536), 30)
    late, _ = await connect(http.port, streams, b"GET /healthz/live HTTP/1.1\r\nHost: x\r\n\r\n")
    await wait_for(lambda: http.guard.budget.waiting == 1, "the late request waiting")
    answer = await query_route(ctrl.port, "NoSuchTopic")
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert not late.at_eof() and len(late._buffer) == 0  # type: ignore[attr-defined]
    assert http.guard.budget.deferred == 1
