"""Route query latency while the HTTP port is hammered with topic searches (issue 32, #3).

One ``pynamesrv serve`` as shipped (journal and HTTP on, default limits) holds 300,000 topics
(three brokers of 100,000). Route queries go at a fixed open-loop rate over 16 connections,
each answer's latency counted from its request's *scheduled* send time (a pause of the
server cannot hide behind a late generator). Two phases in the same run, same server:

* without the attack;
* while 64 keep-alive HTTP connections search the topics back to back
  (``/api/topics?q=...``, the status page's own query): each search scans every topic.

Before issue 32 a search scanned in one step on the loop that answers routes: route answers
fell to 5 % (worst 2.8 s). Now a search runs in slices of 1 ms, resting nine times as long
after each (at most a tenth of the loop), at most ``httpMaxSearches`` run at once (the
rest are answered 429), and the whole port reads at most ``httpMaxRequestsPerSecond``
requests (the 429s included), so the two rows should be close. ``--set KEY=VALUE`` changes a
server key (``--set httpMaxRequestsPerSecond=2000`` shows what the request budget buys).

    .venv/bin/python bench/http_search.py [--seconds 10] [--rate 2000] [--topics 300000]

The server runs on CPU 0, the load and the attack on CPU 1 (a 2-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import shutil
import socket
import time
import urllib.request
from collections import Counter

import aiohttp

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.remoting.codec import FrameDecoder, encode
from route_query import (
    WALK_REQUESTS,
    WALK_TOPICS,
    free_port,
    open_loop_worker,
    pin,
    start_server,
    wait_for_port,
)

BROKERS = 3
QUERIES = ("7", "", "walktopic-09", "no-such-topic")  # the page's empty query among them


def register(port: int, topics: int) -> list[socket.socket]:
    """``topics`` topics over ``BROKERS`` brokers (WALK_TOPICS among them), each on a socket
    that stays open (closing it would drop the routes)."""
    names = [*WALK_TOPICS, *(f"BenchTopic-{i:07d}" for i in range(topics - len(WALK_TOPICS)))]
    share = -(-len(names) // BROKERS)
    sockets = []
    for b in range(BROKERS):
        client = BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{port}"],
            cluster="BenchCluster",
            broker_name=f"bench-broker-{b}",
            broker_id=0,
            broker_addr=f"127.0.0.1:{10911 + 10 * b}",
            topics={t: TopicConfig(t, 8, 8, 6) for t in names[b * share : (b + 1) * share]},
        )
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(encode(client.registration_request()))
        decoder = FrameDecoder()
        while not decoder.feed(sock.recv(65536)):
            pass
        sockets.append(sock)
    return sockets


def attacker(http_port: int, searchers: int, seconds: float, out: mp.Queue) -> None:
    """``searchers`` keep-alive connections searching back to back for ``seconds``."""
    pin("1")
    statuses: Counter[int] = Counter()

    async def run() -> None:
        deadline = time.perf_counter() + seconds
        connector = aiohttp.TCPConnector(limit=searchers)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(i: int) -> None:
                n = i
                while time.perf_counter() < deadline:
                    query = QUERIES[n % len(QUERIES)]
                    n += 1
                    url = f"http://127.0.0.1:{http_port}/api/topics?q={query}"
                    try:
                        async with session.get(url) as resp:
                            await resp.read()
                            statuses[resp.status] += 1
                    except aiohttp.ClientError:
                        statuses[0] += 1  # closed by the server

            await asyncio.gather(*(one(i) for i in range(searchers)))

    asyncio.run(run())
    out.put(dict(statuses))


def settle(http_port: int) -> None:
    """Wait until the journal has written the registrations (its encoding competes for the
    GIL), then a little more: the phases compare searches, not the aftermath of 300,000
    topics arriving."""
    url = f"http://127.0.0.1:{http_port}/metrics"
    for _ in range(600):
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        pending = [
            line
            for line in text.splitlines()
            if line.startswith("pynamesrv_journal_pending_bytes ")
        ]
        if pending and float(pending[0].split()[1]) == 0:
            break
        time.sleep(0.1)
    time.sleep(2.0)


def route_latency(port: int, rate: float, seconds: float) -> dict[str, float]:
    queue: mp.Queue = mp.Queue()
    worker = mp.Process(
        target=open_loop_worker, args=("1", port, 16, rate, seconds, queue, WALK_REQUESTS)
    )
    worker.start()
    count, sample = queue.get(timeout=seconds + 60)
    worker.join()
    sample.sort()

    def pct(p: float) -> float:
        return sample[min(len(sample) - 1, int(p * len(sample)))] * 1000 if sample else 0.0

    expected = int(seconds / (16 / rate)) * 16
    return {
        "answered": count / expected,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "max": sample[-1] * 1000 if sample else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="route queries a second")
    parser.add_argument("--topics", type=int, default=300_000)
    parser.add_argument("--searchers", type=int, default=64, help="HTTP connections searching")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a server key to set"
    )
    args = parser.parse_args()

    http_port = free_port()
    # Defaults otherwise; the 64 searchers come from 127.0.0.1 here, as from 2 or more
    # addresses in the wild (httpMaxConnectionsPerSource is 32).
    # (A server from before issue 32, run with PYTHONPATH at its src, knows no such key.)
    per_source = (
        {"httpMaxConnectionsPerSource": max(32, args.searchers)}
        if hasattr(NamesrvConfig(), "http_max_connections_per_source")
        else {}
    )
    server, port, home = start_server(
        "http-search",
        "0",
        httpPort=http_port,
        journalEnable=True,
        **per_source,
        **dict(item.split("=", 1) for item in args.set),
    )
    try:
        wait_for_port(port)
        wait_for_port(http_port)
        began = time.perf_counter()
        sockets = register(port, args.topics)
        print(
            f"{args.topics:,} topics registered in {time.perf_counter() - began:.1f} s "
            f"(journal and HTTP on); route queries open loop at {args.rate:,.0f}/s over 16 "
            f"connections, {args.seconds:g} s a phase, latency from the scheduled send time"
        )
        settle(http_port)
        calm = route_latency(port, args.rate, args.seconds)
        queue: mp.Queue = mp.Queue()
        attack = mp.Process(
            target=attacker, args=(http_port, args.searchers, args.seconds + 1, queue)
        )
        attack.start()
        time.sleep(1.0)  # the searches are running before the first route query is sent
        hammered = route_latency(port, args.rate, args.seconds)
        statuses = queue.get(timeout=args.seconds + 60)
        attack.join()
        print(f"{'':<34}{'answered':>9}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'max ms':>9}")
        for label, row in (
            ("without the attack", calm),
            (f"while {args.searchers} connections search", hammered),
        ):
            print(
                f"{label:<34}{row['answered']:>9.1%}{row['p50']:>9.2f}{row['p99']:>9.2f}"
                f"{row['p999']:>10.2f}{row['max']:>9.2f}"
            )
        seconds = args.seconds + 1
        answered = ", ".join(
            f"{status or 'closed'}: {n:,}" for status, n in sorted(statuses.items())
        )
        print(
            f"searches over {seconds:g} s: {answered} "
            f"({statuses.get(200, 0) / seconds:,.1f} answered a second)"
        )
        for sock in sockets:
            sock.close()
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
