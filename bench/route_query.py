"""GET_ROUTEINFO_BY_TOPIC throughput and latency, against a same-run ceiling.

Two servers are measured with the same load, one after the other:

* pynamesrv (``pynamesrv serve``) holding one broker's routes, and
* a minimal asyncio server (uvloop) that answers every frame with a constant frame of the
  same size: the ceiling of this runtime on this machine.

Each server is pinned to CPU 0 and the load generators to the other CPUs. Load: several
processes, each with several connections, each keeping ``depth`` pipelined requests in
flight, so the generator is not the bottleneck. At 64 in flight the queries are for one
topic and then for 16 topics in turn: pynamesrv cuts a read of repeats of one query with
one struct format, and a read of one header layout with other topics with two regular
expressions (``remoting/repeats.py``).

    .venv/bin/python bench/route_query.py [--seconds 5] [--procs 2]
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
from pathlib import Path

import uvloop

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(
    name: str, cpu: str | None = "0", **properties: object
) -> tuple[subprocess.Popen, int, Path]:
    """``pynamesrv serve`` on a free port, pinned to ``cpu``, with every file it writes in a
    fresh temporary home; ``properties`` are namesrv.properties keys to add or override."""
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    settings = {
        "kvConfigPath": home / "kv.json",
        "listenPort": port,
        "httpPort": 0,
        "journalDir": home / "journal",
        **properties,
    }
    config = home / "namesrv.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    pinned = ["taskset", "-c", cpu] if cpu is not None else []
    server = subprocess.Popen(
        [*pinned, sys.executable, "-m", "pynamesrv", "serve", "-c", str(config),
         "--listen", "127.0.0.1", "--log-level", "WARNING"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
) -> dict:
    """Run the load and return req/s, latency percentiles (ms) and, with ``server_pid``,
    the server's CPU microseconds per request: a cost that does not depend on whether the
    load generator kept the server busy."""
    queue: mp.Queue = mp.Queue()
    cpu_before = cpu_seconds(server_pid) if server_pid else 0.0
    workers = [
        mp.Process(target=load_worker, args=(cpus, port, conns, depth, seconds, queue, frames, tls))
        for _ in range(procs)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    cpu_used = cpu_seconds(server_pid) - cpu_before if server_pid else 0.0
    sample = sorted(v for _, values in results for v in values)

    def pct(p: float) -> float:
        return sample[min(len(sample) - 1, int(p * len(sample)))] * 1000 if sample else 0.0

    total = sum(count for count, _ in results)
    return {
        "rps": total / seconds,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "p999": pct(0.999),
        "cpu_us": cpu_used / total * 1e6 if total else 0.0,
    }


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
    parser.add_argument("--procs", type=int, default=2, help="load processes at 64 in flight")
    args = parser.parse_args()
    ncpu = os.cpu_count() or 1
    server_cpu, load_cpus = "0", ",".join(str(c) for c in range(1, ncpu)) or "0"

    const_port = free_port()
    server, port, _ = start_server("route-query", server_cpu)
    const = None
    try:
        wait_for_port(port)
        broker_socket, answer = register_route(port, (TOPIC, *MIXED_TOPICS))
        const = mp.Process(target=constant_server, args=(server_cpu, const_port, answer))
        const.start()
        wait_for_port(const_port)
        print(
            f"server on CPU {server_cpu}, load on CPU(s) {load_cpus}; "
            f"answer frame {len(answer)} bytes; {args.seconds:.0f} s per run"
        )
        columns = ("req/s", "p50 ms", "p99 ms", "p999 ms", "CPU us/req")
        print(f"{'in flight':<16} {'target':<15} " + " ".join(f"{c:>9}" for c in columns))
        runs = (
            ("1", 1, 1, 1, REQUESTS),
            ("64", args.procs, 8, 64 // 8, REQUESTS),
            (f"64, {len(MIXED_TOPICS)} topics", args.procs, 8, 64 // 8, MIXED_REQUESTS),
        )
        for label, procs, conns, depth, frames in runs:
            per_proc = max(1, conns // procs)
            rows = {}
            targets = (("pynamesrv", port, server.pid), ("constant-frame", const_port, const.pid))
            for name, target, pid in targets:
                r = rows[name] = run_load(
                    target, procs, per_proc, depth, args.seconds, load_cpus, frames, pid
                )
                print(
                    f"{label:<16} {name:<15} {r['rps']:>9,.0f} {r['p50']:>9.3f} "
                    f"{r['p99']:>9.3f} {r['p999']:>9.3f} {r['cpu_us']:>10.2f}"
                )
            ours, ceiling = rows["pynamesrv"], rows["constant-frame"]
            print(
                f"{label:<16} {'pynamesrv/ceiling':<15} {ours['rps'] / ceiling['rps']:>9.0%} "
                f"(CPU per request: ceiling/pynamesrv {ceiling['cpu_us'] / ours['cpu_us']:.0%})"
            )
        broker_socket.close()
    finally:
        if const is not None:
            const.terminate()
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
