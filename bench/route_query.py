"""GET_ROUTEINFO_BY_TOPIC throughput and latency in production shapes, against same-run
references.

Three servers get the same load, one after the other:

* pynamesrv (``pynamesrv serve``) holding one broker's routes for 1,017 topics;
* the same with ``routeQueryFastPath=false``: every request decoded and dispatched (the plain
  cached-answer path), so the fast path's gain is measured, not assumed;
* a minimal asyncio server (uvloop) that answers every frame with a constant frame of the
  same size: the ceiling of this runtime on this machine.

Shapes (each server pinned to CPU 0, the load generators on the other CPUs):

* 1 connection x 1 in flight;
* 64 and 1,000 connections x 1 in flight, each walking 1,000 topics (what clients do: every
  client polls each of its topics every 30 s, one or a few requests in flight);
* open loop: a fixed rate over 16 connections walking 1,000 topics, latency counted from
  each request's *scheduled* send time (a late generator cannot hide the server's pauses);
* 4 connections x 16 pipelined for one topic (no client does this; kept for comparison).

    .venv/bin/python bench/route_query.py [--seconds 5] [--procs 2] [--rate 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import uvloop

import loadgen
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.tls import client_context

TOPIC = "BenchTopic"
REQUEST_COMMAND = requests.get_routeinfo_by_topic(TOPIC)
REQUEST_COMMAND.opaque = 1
# Topics of one length, so that their queries and answers are as long as each other.
MIXED_TOPICS = tuple(f"BenchTopic-{i:02d}" for i in range(16))


def route_query(topic: str, opaque: int) -> bytes:
    query = requests.get_routeinfo_by_topic(topic)
    query.opaque = opaque
    return encode(query)


def route_queries(topics: tuple[str, ...]) -> tuple[bytes, ...]:
    """What clients send: queries for ``topics`` in turn, each with the next opaque (7
    digits, as a client that has run a while), so the server cannot answer from the request
    bytes alone."""
    return tuple(route_query(topics[i % len(topics)], 1_000_000 + i) for i in range(4096))


REQUESTS = route_queries((TOPIC,))
MIXED_REQUESTS = route_queries(MIXED_TOPICS)  # a client polling its topics' routes
# Production: clients walk many topics; names of one length, so answers are equally long.
WALK_TOPICS = tuple(f"WalkTopic-{i:04d}" for i in range(1000))
WALK_REQUESTS = route_queries(WALK_TOPICS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    name: str, cpu: str | None = "0", *, source: Path | None = None, **properties: object
) -> tuple[subprocess.Popen, int, Path]:
    """``pynamesrv serve`` on a free port, pinned to ``cpu``, with every file it writes in a
    fresh temporary home; ``properties`` are namesrv.properties keys to add or override.
    ``source``: another checkout's ``src`` to run instead of this one (``before_after.py``)."""
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    settings = {
        "kvConfigPath": home / "kv.json",
        "listenPort": port,
        "httpPort": 0,
        "journalDir": home / "journal",
        # The load comes from this host's one address and stands for many client hosts.
        "maxConnectionsPerSource": 0,
        **properties,
    }
    config = home / "namesrv.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    pinned = ["taskset", "-c", cpu] if cpu is not None else []
    env = None
    if source is not None:
        env = {**os.environ, "PYTHONPATH": str(source)}
    server = subprocess.Popen(
        [*pinned, sys.executable, "-m", "pynamesrv", "serve", "-c", str(config),
         "--listen", "127.0.0.1", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    return server, port, home


def pin(cpus: str) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})


def wait_for_port(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def split_frames(buf: bytearray) -> int:
    """Drop the complete frames at the front of ``buf``; return how many there were."""
    pos, count = 0, 0
    while len(buf) - pos >= 4:
        (length,) = struct.unpack_from(">i", buf, pos)
        if len(buf) - pos - 4 < length:
            break
        pos += 4 + length
        count += 1
    if pos:
        del buf[:pos]
    return count


# ---------------------------------------------------------------------- constant server


def constant_server(cpus: str, port: int, answer: bytes) -> None:
    """The ceiling: split frames by their length word, answer each with ``answer``."""
    pin(cpus)

    class Constant(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.buffer = bytearray()

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            count = split_frames(self.buffer)
            if count:
                self.transport.write(answer * count)  # type: ignore[attr-defined]

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Constant, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(serve())


# ---------------------------------------------------------------------- load generator


def load_worker(
    cpus: str,
    port: int,
    conns: int,
    depth: int,
    seconds: float,
    out: mp.Queue,
    frames: tuple[bytes, ...] = REQUESTS,
    tls: bool = False,
) -> None:
    """Keep ``depth`` requests in flight on each of ``conns`` connections for ``seconds``,
    sending ``frames`` in turn (one frame: the same request over and over); over TLS
    (without verifying the server) when ``tls``."""
    pin(cpus)
    ssl_context = client_context(verify=False) if tls else None

    frame_len = len(frames[0])
    if all(len(frame) == frame_len for frame in frames):
        stream = b"".join(frames) * 2  # equal frames: a batch is one slice, wrapping around

        def batch(start: int, count: int) -> bytes:
            if count > len(frames):
                return b"".join(batch(start + i, 1) for i in range(count))
            first = start % len(frames) * frame_len
            return stream[first : first + count * frame_len]
    else:

        def batch(start: int, count: int) -> bytes:
            return b"".join(frames[(start + i) % len(frames)] for i in range(count))

    latencies: list[float] = []

    async def run() -> None:
        stop_at = time.perf_counter() + seconds

        class Load(asyncio.Protocol):
            def __init__(self, done: asyncio.Future[None]) -> None:
                self.done = done
                self.buffer = bytearray()
                self.sent: list[float] = []  # answers come back in order on one connection
                self.head = 0

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport
                self.sent.extend([time.perf_counter()] * depth)
                self.total = depth
                transport.write(batch(0, depth))  # type: ignore[attr-defined]

            def data_received(self, data: bytes) -> None:
                self.buffer += data
                answered = split_frames(self.buffer)
                now = time.perf_counter()
                latencies.extend(now - t for t in self.sent[self.head : self.head + answered])
                self.head += answered
                if self.head > 4096:
                    del self.sent[: self.head]
                    self.head = 0
                if now < stop_at:
                    self.sent.extend([now] * answered)
                    self.transport.write(batch(self.total, answered))  # type: ignore[attr-defined]
                    self.total += answered
                elif self.head == len(self.sent) and not self.done.done():
                    self.done.set_result(None)

        loop = asyncio.get_running_loop()
        dones = []
        for _ in range(conns):
            done: asyncio.Future[None] = loop.create_future()
            await loop.create_connection(lambda d=done: Load(d), "127.0.0.1", port, ssl=ssl_context)
            dones.append(done)
        await asyncio.wait_for(asyncio.gather(*dones), seconds + 10)

    uvloop.run(run())
    latencies.sort()
    step = max(1, len(latencies) // 20000)  # a sample of the distribution is enough
    out.put((len(latencies), latencies[::step]))


def open_loop_worker(
    cpus: str,
    port: int,
    conns: int,
    rate: float,
    seconds: float,
    out: mp.Queue,
    frames: tuple[bytes, ...] = WALK_REQUESTS,
) -> None:
    """Send ``rate`` requests a second over ``conns`` connections on a fixed schedule, never
    waiting for answers; each answer's latency runs from its request's scheduled time."""
    pin(cpus)
    latencies: list[float] = []
    interval = conns / rate  # between two requests of one connection

    async def run() -> None:
        class Receiver(asyncio.Protocol):
            def __init__(self) -> None:
                self.buffer = bytearray()
                self.scheduled: deque[float] = deque()

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def data_received(self, data: bytes) -> None:
                self.buffer += data
                now = time.perf_counter()
                for _ in range(split_frames(self.buffer)):
                    latencies.append(now - self.scheduled.popleft())

        loop = asyncio.get_running_loop()
        receivers = []
        for _ in range(conns):
            _, receiver = await loop.create_connection(Receiver, "127.0.0.1", port)
            receivers.append(receiver)
        start = time.perf_counter() + 0.1
        sent = [0] * conns
        total = int(seconds / interval)
        offsets = [start + i * interval / conns for i in range(conns)]  # spread the phases
        while True:
            now = time.perf_counter()
            done = True
            for i, receiver in enumerate(receivers):
                due = min(total, int((now - offsets[i]) / interval) + 1) if now >= offsets[i] else 0
                if due > sent[i]:
                    batch = [frames[(i * 997 + k) % len(frames)] for k in range(sent[i], due)]
                    receiver.scheduled.extend(
                        offsets[i] + k * interval for k in range(sent[i], due)
                    )
                    receiver.transport.write(b"".join(batch))
                    sent[i] = due
                done &= sent[i] >= total
            if done:
                break
            await asyncio.sleep(0.0005)
        deadline = time.perf_counter() + 10
        while any(r.scheduled for r in receivers) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)

    uvloop.run(run())
    latencies.sort()
    step = max(1, len(latencies) // 20000)
    out.put((len(latencies), latencies[::step]))


def run_open_loop(
    port: int,
    procs: int,
    conns: int,
    rate: float,
    seconds: float,
    cpus: str,
    generator: Path | None = None,
) -> dict:
    """``rate`` requests a second (from the C ``generator``, or split over ``procs`` Python
    generators without it); percentiles in ms."""
    if generator is not None:
        found = loadgen.run(generator, port, conns, 0, rate, seconds, WALK_REQUESTS, cpus)
        return _c_summary(found, seconds, (0.0, 0.0))
    queue: mp.Queue = mp.Queue()
    args = (cpus, port, conns // procs, rate / procs, seconds, queue)
    workers = [mp.Process(target=open_loop_worker, args=args) for _ in range(procs)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    return _summary(results, seconds, (0.0, 0.0))


def _c_summary(found: dict, seconds: float, cpu_used: tuple[float, float]) -> dict:
    """``loadgen.run``'s figures in ``_summary``'s form."""
    return {
        "rps": found["answered"] / seconds,
        **{p: found[f"{p}_us"] / 1000 for p in ("p50", "p99", "p999")},
        **_cpu_figures(cpu_used, found["answered"]),
    }


def _cpu_figures(cpu_used: tuple[float, float], requests: int) -> dict:
    """Server CPU per request, and the kernel's share of it (the floor no server code can
    remove: TCP, loopback delivery, epoll)."""
    total = sum(cpu_used)
    return {
        "cpu_us": total / requests * 1e6 if requests else 0.0,
        "kernel": cpu_used[1] / total if total else 0.0,
    }


def _summary(results: list, seconds: float, cpu_used: tuple[float, float]) -> dict:
    sample = sorted(v for _, values in results for v in values)

    def pct(p: float) -> float:
        return sample[min(len(sample) - 1, int(p * len(sample)))] * 1000 if sample else 0.0

    total = sum(count for count, _ in results)
    return {
        "rps": total / seconds,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "p999": pct(0.999),
        **_cpu_figures(cpu_used, total),
    }


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def run_load(
    port: int,
    procs: int,
    conns: int,
    depth: int,
    seconds: float,
    cpus: str,
    frames: tuple[bytes, ...] = REQUESTS,
    server_pid: int | None = None,
    tls: bool = False,
    generator: Path | None = None,
) -> dict:
    """Run the load and return req/s, latency percentiles (ms) and, with ``server_pid``,
    the server's CPU microseconds per request: a cost that does not depend on whether the
    load generator kept the server busy. ``procs`` Python generators of ``conns``
    connections each, or one C ``generator`` of ``procs * conns`` (not over TLS)."""
    before = cpu_times(server_pid) if server_pid else (0.0, 0.0)

    def cpu_used() -> tuple[float, float]:
        after = cpu_times(server_pid) if server_pid else (0.0, 0.0)
        return after[0] - before[0], after[1] - before[1]

    if generator is not None and not tls:
        found = loadgen.run(generator, port, procs * conns, depth, 0, seconds, frames, cpus)
        return _c_summary(found, seconds, cpu_used())
    queue: mp.Queue = mp.Queue()
    workers = [
        mp.Process(target=load_worker, args=(cpus, port, conns, depth, seconds, queue, frames, tls))
        for _ in range(procs)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    return _summary(results, seconds, cpu_used())


# ---------------------------------------------------------------------- main


def register_route(port: int, topics: tuple[str, ...] = (TOPIC,)) -> tuple[socket.socket, bytes]:
    """Register one broker with ``topics`` over a plain socket that stays open (closing it
    would drop the routes); return the socket and the server's answer frame to one route
    query for the first topic."""
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{port}"],
        cluster="BenchCluster",
        broker_name="bench-broker",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={topic: TopicConfig(topic, 8, 8, 6) for topic in topics},
    )
    sock = socket.create_connection(("127.0.0.1", port))
    decoder = FrameDecoder()
    answer = b""
    for request in (encode(broker.registration_request()), route_query(topics[0], 1)):
        sock.sendall(request)
        answers: list[RemotingCommand] = []
        while not answers:
            answers = decoder.feed(sock.recv(65536))
        answer = encode(answers[0])
    return sock, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--procs", type=int, default=2, help="load processes")
    parser.add_argument("--rate", type=float, default=30_000, help="open-loop requests/s")
    parser.add_argument(
        "--generator",
        choices=("c", "python"),
        default="c",
        help="load generator: loadgen.c (built with the machine's compiler) or Python processes",
    )
    args = parser.parse_args()
    generator = loadgen.build() if args.generator == "c" else None
    if args.generator == "c" and generator is None:
        print("no C compiler: Python load generators (their own pauses inflate latencies)")
    ncpu = os.cpu_count() or 1
    server_cpu, load_cpus = "0", ",".join(str(c) for c in range(1, ncpu)) or "0"
    _raise_file_limit(4096)

    servers = {}
    sockets = []
    const = None
    try:
        answer = b""
        for name, extra in (("pynamesrv", {}), ("fast path off", {"routeQueryFastPath": "false"})):
            server, port, _ = start_server("route-query", server_cpu, **extra)
            servers[name] = (server, port)
            wait_for_port(port)
            sock, answer = register_route(port, (TOPIC, *MIXED_TOPICS, *WALK_TOPICS))
            sockets.append(sock)
        const_port = free_port()
        const = mp.Process(target=constant_server, args=(server_cpu, const_port, answer))
        const.start()
        wait_for_port(const_port)
        targets = [(name, port, server.pid) for name, (server, port) in servers.items()]
        targets.append(("constant-frame", const_port, const.pid))
        print(
            f"server on CPU {server_cpu}, load on CPU(s) {load_cpus} "
            f"({'loadgen.c' if generator else 'Python generators'}); "
            f"answer frame {len(answer)} bytes; {args.seconds:.0f} s per run"
        )
        columns = ("req/s", "p50 ms", "p99 ms", "p999 ms", "CPU us/req", "kernel")
        print(f"{'shape':<26} {'target':<15} " + " ".join(f"{c:>9}" for c in columns))
        closed = (
            ("1 conn x 1", 1, 1, 1, REQUESTS),
            ("64 conns x 1, 1000 topics", args.procs, 64, 1, WALK_REQUESTS),
            ("1000 conns x 1, 1000 topics", args.procs, 1000, 1, WALK_REQUESTS),
            ("4 conns x 16, one topic", args.procs, 4, 16, REQUESTS),
        )
        for label, procs, conns, depth, frames in closed:
            rows = {}
            for name, target, pid in targets:
                rows[name] = run_load(
                    target, procs, max(1, conns // procs), depth, args.seconds, load_cpus,
                    frames, pid, generator=generator,
                )  # fmt: skip
                _print_row(label, name, rows[name])
            _print_ratios(label, rows)
        label = f"open loop {args.rate:,.0f}/s, 16 conns"
        for name, target, _ in targets:
            _print_row(label, name, run_open_loop(
                target, args.procs, 16, args.rate, args.seconds, load_cpus, generator
            ))  # fmt: skip
    finally:
        for sock in sockets:
            sock.close()
        if const is not None:
            const.terminate()
        for server, _ in servers.values():
            server.terminate()
            server.wait(10)


def _print_row(label: str, name: str, r: dict) -> None:
    print(
        f"{label:<26} {name:<15} {r['rps']:>9,.0f} {r['p50']:>9.3f} "
        f"{r['p99']:>9.3f} {r['p999']:>9.3f} {r['cpu_us']:>10.2f} {r['kernel']:>9.0%}"
    )


def _print_ratios(label: str, rows: dict[str, dict]) -> None:
    """Ours against the constant-frame ceiling and the plain path; and the kernel floor: the
    constant-frame server's kernel CPU per request (one read, one write, TCP over loopback)
    bounds every server on this machine, in any language, to at most ``kernel cap`` req/s
    per core, however little its own code costs."""
    ours, plain, ceiling = rows["pynamesrv"], rows["fast path off"], rows["constant-frame"]
    kernel_us = ceiling["cpu_us"] * ceiling["kernel"]
    cap = f"{1e6 / kernel_us:,.0f} req/s" if kernel_us else "n/a"
    print(
        f"{label:<26} {'ratios':<15} ceiling {ours['rps'] / ceiling['rps']:.0%}, "
        f"fast path gain {ours['rps'] / plain['rps'] - 1:+.0%} req/s, "
        f"server CPU/req {ours['cpu_us']:.2f} vs {plain['cpu_us']:.2f} us without it; "
        f"kernel {kernel_us:.2f} us/req, kernel cap per core {cap}"
    )


def _raise_file_limit(needed: int) -> None:
    """1,000 connections need more descriptors than the usual soft limit of 1,024."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


if __name__ == "__main__":
    main()
