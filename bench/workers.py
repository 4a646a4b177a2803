"""``serve --workers N`` against the single process, in one run (issue 33).

* Queries: GET_ROUTEINFO_BY_TOPIC, 64 connections x 1 in flight walking 1,000 topics
  (``route_query.py``'s production shape, its C load generator), against ``--workers 1``
  and ``--workers N``: requests/s and requests per server CPU-second, the CPU of every
  server process (writer and workers) read from /proc. ``pinned``: every server process
  on CPU 0, the load on the others (the overhead of N processes sharing one core), with a
  broker's heartbeats beside the queries, and again with ``bench/register.py``'s load (a
  100,000-topic broker re-registering every second, a new data version every fifth);
  ``spread``: the server free to use every CPU, the load sharing them, for N = 1 .. N (what
  this machine can show of scaling: on 2 cores the load generator takes one of them).
* Replication: a 100,000-topic first registration answered by the single process, against
  the same registration sent to a worker (forwarded to the writer, answered once the
  worker applied its batch: with N = 2 every worker); the apply lag (a batch's publication
  on the writer to its apply on the worker) p99, from the worker's histogram (bucket
  bounds), with heartbeats flowing beside the query load; the RSS of a worker next to the
  writer's and a single process's, holding 4 groups x 1,000 routes.

    .venv/bin/python bench/workers.py [--seconds 5] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import socket
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import loadgen
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.model import DataVersion
from pynamesrv.remoting.codec import FrameDecoder, encode
from route_query import WALK_REQUESTS, cpu_times, free_port, start_server

LAG_BUCKET = re.compile(
    r'^pynamesrv_worker_apply_lag_seconds_bucket\{le="([^"]+)",worker="1"\} (\S+)$', re.M
)


def http_json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return json.loads(response.read())


def http_text(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return response.read().decode()


def serve(name: str, workers: int, cpu: str | None) -> tuple[subprocess.Popen, int, int]:
    http = free_port()
    server, port, _ = start_server(name, cpu, serverWorkers=workers, httpPort=http)
    deadline = time.monotonic() + 60
    while True:
        try:
            status = http_json(http, "/api/status")
            if len(status["workers"]) == workers - 1 and all(w["ready"] for w in status["workers"]):
                return server, port, http
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: workers not serving")
        time.sleep(0.1)


def pids(server: subprocess.Popen, http: int) -> list[int]:
    """The writer (taskset execs it: the same pid) and its workers."""
    return [server.pid, *(w["pid"] for w in http_json(http, "/api/status")["workers"])]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def broker(
    port: int, name: str, topics: int, prefix: str = "WalkTopic-", index: int = 0
) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{port}"], cluster="BenchCluster", broker_name=name,
        broker_id=0, broker_addr=f"10.1.{index}.1:10911",
        topics={f"{prefix}{i:04d}": TopicConfig(f"{prefix}{i:04d}", 8, 8, 6)
                for i in range(topics)},
    )  # fmt: skip


def round_trip(sock: socket.socket, frame: bytes) -> float:
    decoder = FrameDecoder()
    started = time.perf_counter()
    sock.sendall(frame)
    while not decoder.feed(sock.recv(1 << 20)):
        pass
    return time.perf_counter() - started


def register(port: int, client: BrokerClient) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    round_trip(sock, encode(client.registration_request()))
    return sock  # open: closing it would drop the broker


def on_process(port: int, http: int, worker: bool) -> socket.socket:
    """A connection the writer (False) or a worker (True) accepted (the kernel decides:
    SO_REUSEPORT), told apart by the writer's own request count."""
    query = encode(requests.get_broker_cluster_info())
    counted = re.compile(r'^pynamesrv_worker_requests_total\{worker="0"\} (\S+)$', re.M)
    for _ in range(64):
        sock = socket.create_connection(("127.0.0.1", port))
        before = counted.search(http_text(http, "/metrics")).group(1)
        round_trip(sock, query)
        moved = counted.search(http_text(http, "/metrics")).group(1) != before
        if moved != worker:
            return sock
        sock.close()
    raise RuntimeError("no connection landed where wanted")


def heartbeats(port: int, stop: mp.Event) -> None:
    """Events beside the query load: a broker's BROKER_HEARTBEAT, 200 a second."""
    client = broker(port, "hb", 1, "Hb-", 9)
    sock = register(port, client)
    frame = encode(
        requests.broker_heartbeat(
            cluster="BenchCluster", broker_name="hb", broker_addr=client.broker_addr
        )
    )
    while not stop.is_set():
        round_trip(sock, frame)
        time.sleep(0.005)


def registrations(port: int, stop: mp.Event) -> None:
    """``bench/register.py``'s load beside the queries: a 100,000-topic broker registers,
    then re-registers every second (the same bytes: a heartbeat), a new data version (every
    topic decoded and compared again) every fifth time."""
    client = broker(port, "reg-broker", 100_000, "Reg-", 8)
    sock = socket.create_connection(("127.0.0.1", port))
    frame = encode(client.registration_request())
    rounds = 0
    while not stop.is_set():
        if rounds % 5 == 4:
            client.data_version = DataVersion(client.data_version.timestamp, rounds)
            frame = encode(client.registration_request())
        round_trip(sock, frame)
        rounds += 1
        stop.wait(1.0)
    sock.close()


def query_load(
    port: int, server_pids: list[int], seconds: float, cpus: str, generator: Path | None
) -> dict:
    before = sum(sum(cpu_times(pid)) for pid in server_pids)
    found = loadgen.run(generator, port, 64, 1, 0, seconds, WALK_REQUESTS, cpus)
    cpu = sum(sum(cpu_times(pid)) for pid in server_pids) - before
    return {
        "rps": found["answered"] / seconds,
        "per_cpu_s": found["answered"] / cpu,
        "p99": found["p99_us"] / 1000,
    }


def lag_p99(http: int) -> str:
    """The apply lag's p99 as the bucket bound it falls under, and the share within 1 ms
    (the goal), from the worker's histogram."""
    buckets = [(le, float(n)) for le, n in LAG_BUCKET.findall(http_text(http, "/metrics"))]
    total = buckets[-1][1] if buckets else 0
    within = next((n for le, n in buckets if le == "0.001"), 0.0)
    for le, count in buckets:
        if total and count >= 0.99 * total:
            return (
                f"<= {float(le) * 1000:g} ms, {within / total:.1%} <= 1 ms ({int(total)} batches)"
            )
    return "no batches"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (the median)")
    args = parser.parse_args()
    generator = loadgen.build()
    if generator is None:
        raise SystemExit("bench/workers.py needs a C compiler for loadgen.c")
    ncpu = os.cpu_count() or 1
    load_cpus = ",".join(str(c) for c in range(1, ncpu)) or "0"
    every_cpu = ",".join(str(c) for c in range(ncpu))
    n = args.workers
    print(
        f"{ncpu} CPUs; 64 conns x 1 in flight walking 1,000 topics, {args.seconds:.0f} s a run, "
        f"the median of {args.repeat}"
    )
    print(f"{'queries':<40} {'req/s':>9} {'req/CPU-s':>10} {'p99 ms':>8}")
    layouts = (
        ("pinned", "0", load_cpus, (1, n), False),
        ("pinned + registrations", "0", load_cpus, (1, n), True),
        ("spread", None, every_cpu, tuple(range(1, n + 1)), False),
    )
    for layout, server_cpu, cpus, counts, registering in layouts:
        rows = {}
        for count in counts:
            server, port, http = serve("workers", count, server_cpu)
            socks = [register(port, broker(port, "bench-broker", 1000))]
            stop = mp.Event()
            beside = [mp.Process(target=heartbeats, args=(port, stop))]
            if registering:
                beside.append(mp.Process(target=registrations, args=(port, stop)))
            for process in beside:
                process.start()
            try:
                runs = [
                    query_load(port, pids(server, http), args.seconds, cpus, generator)
                    for _ in range(args.repeat)
                ]
                rows[count] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                r = rows[count]
                label = f"{layout}, --workers {count}"
                print(f"{label:<40} {r['rps']:>9,.0f} {r['per_cpu_s']:>10,.0f} {r['p99']:>8.3f}")
                if count > 1:
                    print(f"{'':<40} apply lag p99 {lag_p99(http)}")
            finally:
                stop.set()
                for process in beside:
                    process.join()
                for sock in socks:
                    sock.close()
                server.terminate()
                server.wait(30)
        one = rows[1]
        for count in counts[1:]:
            many = rows[count]
            print(
                f"{layout + ' ratio':<40} req/s x{many['rps'] / one['rps']:.2f}, "
                f"per CPU-s x{many['per_cpu_s'] / one['per_cpu_s']:.2f} "
                f"(N={count} against 1"
                + (f"; the scaling goal: x{0.8 * count:.1f} req/s)" if server_cpu is None else ")")
            )

    # Replication: 100,000 topics, and RSS with 4 groups x 1,000 routes.
    # Each sample a first registration of another group (the same 100,000 topics), in a
    # server of its own: the median of --repeat.
    frames = [
        encode(broker(0, f"big-{i}", 100_000, "Big-", 20 + i).registration_request())
        for i in range(args.repeat)
    ]
    results: dict[int, float] = {}
    for count in (1, n):
        samples = []
        for frame in frames:
            server, port, http = serve("replication", count, None)
            try:
                if count == 1:
                    sock = socket.create_connection(("127.0.0.1", port))
                else:
                    sock = on_process(port, http, worker=True)
                samples.append(round_trip(sock, frame))
                sock.close()
            finally:
                server.terminate()
                server.wait(30)
        results[count] = statistics.median(samples)
    print(
        f"100,000-topic registration: single process {results[1] * 1000:,.0f} ms; through a "
        f"worker (answered once it applied it) {results[n] * 1000:,.0f} ms "
        f"(x{results[n] / results[1]:.2f}; medians of {args.repeat})"
    )
    rss = {}
    for count in (1, n):
        server, port, http = serve("rss", count, None)
        try:
            socks = [
                register(port, broker(port, f"group-{g}", 1000, f"G{g}-Topic-", g))
                for g in range(4)
            ]
            while not all(w["behind"] == 0 for w in http_json(http, "/api/status")["workers"]):
                time.sleep(0.2)
            rss[count] = [rss_kib(pid) for pid in pids(server, http)]
            for sock in socks:
                sock.close()
        finally:
            server.terminate()
            server.wait(30)
    single, (writer, *workers) = rss[1][0], rss[n]
    print(
        f"RSS with 4 x 1,000 routes: single process {single / 1024:.1f} MiB; writer "
        f"{writer / 1024:.1f} MiB, each worker " + ", ".join(f"{w / 1024:.1f} MiB" for w in workers)
    )
    print(
        f"note: {ncpu} CPUs. 'pinned' puts every server process on one core: it measures "
        "what N processes cost, not what they gain. 'spread' lets them use every core while "
        "the load generator takes one: the gain of more cores shows only where the load runs "
        "on other cores than the server's."
    )


if __name__ == "__main__":
    main()
