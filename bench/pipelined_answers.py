"""Pipelined requests with large answers on a socket that never reads (issue 24, finding 1).

A fresh ``pynamesrv serve`` (default settings: 4 MB write high-water mark) in a subprocess
gets a 3.6 MB KV namespace (56 values of 64 KB, put with unsigned PUT_KV_CONFIG) and one
broker with 20,000 topics. Then two attacks, each sent in one write:

* 400 GET_KVLIST_BY_NAMESPACE (219) for that namespace (55 KB of requests, 1.4 GB of answers);
* 1,000 GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) (36 KB of requests, 280 MB of answers).

Each is sent twice: by a client that never reads (4 KB receive buffer), held open for
``--hold`` seconds, then by one that reads every answer (the reference, same run). Meanwhile
a prober on a connection of its own asks a route every 10 ms. Reported per run: the server's
resident memory, its peak (VmHWM, reset through /proc/PID/clear_refs at the run's start) and
at the end (the attacker still connected), each as growth over the run's start and as the
total; the prober's median and worst round trip (the worst is how long other clients were
blocked), and how long the run took. The idle prober alone is the latency reference.

``--compare-src DIR`` runs the same against the source tree in DIR too (a worktree or
``git archive`` of an earlier commit; copy its compiled ``_fastpath`` / ``_routed`` modules in,
or it runs their pure-Python twins), so both sets of figures come from one run.

    .venv/bin/python bench/pipelined_answers.py [--hold 3] [--compare-src /tmp/base]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from route_query import free_port, wait_for_port

SRC = Path(__file__).resolve().parents[1] / "src"
NAMESPACE = "BenchNamespace"
KV_VALUES = 56
KV_VALUE = "v" * (64 * 1024)  # the longest value PUT_KV_CONFIG takes
TOPICS = 20_000
PROBE_TOPIC = "Topic-00000"
PROBE_PERIOD_S = 0.01


def start(src: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``pynamesrv serve`` from ``src`` with default settings (journal on, HTTP off)."""
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="bench-pipelined-"))
    config = home / "namesrv.properties"
    config.write_text(
        f"listenPort={port}\nhttpPort=0\nkvConfigPath={home / 'kv.json'}\n"
        f"journalDir={home / 'journal'}\n"
    )
    env = {**os.environ, "PYTHONPATH": str(src)}
    server = subprocess.Popen(
        [sys.executable, "-m", "pynamesrv", "serve", "-c", str(config), "--listen", "127.0.0.1",
         "--log-level", "WARNING"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_for_port(port)
    return server, port


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (Linux 4.0+)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def ask(sock: socket.socket, command: RemotingCommand) -> RemotingCommand:
    decoder = FrameDecoder(max_frame_length=1 << 30)
    sock.sendall(encode(command))
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        answers = decoder.feed(chunk)
        if answers:
            return answers[0]


def load(port: int) -> socket.socket:
    """The namespace and the broker; returns the broker's connection (keep it open: the
    broker leaves with it)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for n in range(KV_VALUES):
            put = RemotingCommand(
                code=RequestCode.PUT_KV_CONFIG,
                opaque=n + 1,
                ext_fields={"namespace": NAMESPACE, "key": f"key-{n:03d}", "value": KV_VALUE},
            )
            assert ask(sock, put).code == ResponseCode.SUCCESS
    broker = BrokerClient(
        namesrv_addrs=[],
        cluster="BenchCluster",
        broker_name="bench-broker",
        broker_id=0,
        broker_addr="127.0.0.5:10911",
        topics={
            name: TopicConfig(name, 8, 8, 6) for name in (f"Topic-{t:05d}" for t in range(TOPICS))
        },
    )
    sock = socket.create_connection(("127.0.0.1", port))
    assert ask(sock, broker.registration_request()).code == ResponseCode.SUCCESS
    return sock


class Prober(threading.Thread):
    """A route query on its own connection every 10 ms; the round trips, in seconds."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.settimeout(300)
        self.round_trips: list[float] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        query = requests.get_routeinfo_by_topic(PROBE_TOPIC)
        opaque = 0
        while not self.stopping.is_set():
            opaque += 1
            query.opaque = opaque
            sent = time.perf_counter()
            answer = ask(self.sock, query)
            self.round_trips.append(time.perf_counter() - sent)
            assert answer.code == ResponseCode.SUCCESS and answer.opaque == opaque
            self.stopping.wait(PROBE_PERIOD_S)

    def finish(self) -> list[float]:
        """Stop after the query in flight is answered."""
        self.stopping.set()
        self.join()
        self.sock.close()
        return self.round_trips


def read_frames(sock: socket.socket, count: int) -> int:
    """Read ``count`` answer frames, skipping their bytes; returns the bytes read."""
    buf = bytearray(1 << 20)
    partial = b""
    skip = frames = total = 0
    while frames < count:
        got = sock.recv_into(buf)
        if not got:
            raise ConnectionError(f"closed after {frames} of {count} answers")
        total += got
        pos = 0
        while pos < got:
            if skip:
                take = min(skip, got - pos)
                skip -= take
                pos += take
                frames += not skip
                continue
            need = 4 - len(partial)
            partial += buf[pos : pos + need]
            pos += min(need, got - pos)
            if len(partial) == 4:
                skip = int.from_bytes(partial, "big")
                partial = b""
                frames += not skip
    return total


@dataclass
class Run:
    tree: str
    attack: str
    client: str
    base_mb: float  # VmRSS at the run's start
    peak_mb: float  # VmHWM growth over the run's start
    end_mb: float  # VmRSS growth at the end, the attacker still connected
    p50_ms: float
    worst_ms: float
    probes: int
    seconds: float


def attack_run(
    pid: int, port: int, tree: str, attack: str, stream: bytes, count: int, reads: bool, hold: float
) -> Run:
    time.sleep(0.5)  # what the previous run freed settles
    reset_peak(pid)
    base, _ = memory_mb(pid)
    prober = Prober(port)
    prober.start()
    time.sleep(0.2)
    sock = socket.socket()
    if not reads:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    started = time.perf_counter()
    sock.sendall(stream)
    if reads:
        read_frames(sock, count)
    else:
        time.sleep(hold)
    round_trips = prober.finish()  # waits for the query in flight: a stall shows in full
    seconds = time.perf_counter() - started
    rss, peak = memory_mb(pid)
    sock.close()
    return Run(
        tree,
        attack,
        "reads every answer" if reads else f"never reads ({hold:g} s)",
        base,
        peak - base,
        rss - base,
        statistics.median(round_trips) * 1000,
        max(round_trips) * 1000,
        len(round_trips),
        seconds,
    )


def pipelined(command: RemotingCommand, count: int) -> bytes:
    frames = []
    for opaque in range(1_000_000, 1_000_000 + count):
        command.opaque = opaque
        frames.append(encode(command))
    return b"".join(frames)


def bench_tree(tree: str, src: Path, args: argparse.Namespace) -> list[Run]:
    server, port = start(src)
    runs = []
    try:
        broker = load(port)
        idle, _ = memory_mb(server.pid)
        prober = Prober(port)
        prober.start()
        time.sleep(1.0)
        round_trips = prober.finish()
        print(
            f"{tree}: server RSS loaded {idle:.0f} MB; idle route query p50 "
            f"{statistics.median(round_trips) * 1000:.2f} ms, worst "
            f"{max(round_trips) * 1000:.2f} ms ({len(round_trips)} probes)"
        )
        runs.append(Run(tree, "none (idle)", "-", idle, 0, 0,
                        statistics.median(round_trips) * 1000, max(round_trips) * 1000,
                        len(round_trips), 1.0))  # fmt: skip
        attacks = (
            (f"{args.kv_requests} x KV list 3.6 MB",
             pipelined(requests.get_kvlist_by_namespace(NAMESPACE), args.kv_requests),
             args.kv_requests),
            (f"{args.topic_requests} x topic list {TOPICS:,}",
             pipelined(requests.get_all_topic_list_from_nameserver(), args.topic_requests),
             args.topic_requests),
        )  # fmt: skip
        for name, stream, count in attacks:
            for reads in (False, True):
                run = attack_run(server.pid, port, tree, name, stream, count, reads, args.hold)
                runs.append(run)
                print(
                    f"  {name} ({len(stream) / 1024:.0f} KB in one write), client "
                    f"{run.client}: RSS {run.base_mb:.0f} MB at the start, peak "
                    f"+{run.peak_mb:.0f} MB, +{run.end_mb:.0f} MB at the end; route query p50 "
                    f"{run.p50_ms:.2f} ms, worst "
                    f"{run.worst_ms:.1f} ms; {run.seconds:.2f} s"
                )
        broker.close()
    finally:
        server.terminate()
        server.wait(60)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold", type=float, default=3.0, help="seconds a non-reader stays")
    parser.add_argument("--kv-requests", type=int, default=400)
    parser.add_argument("--topic-requests", type=int, default=1000)
    parser.add_argument("--compare-src", type=Path, help="another source tree to run too")
    args = parser.parse_args()
    trees = [("this tree", SRC)]
    if args.compare_src is not None:
        compare = args.compare_src / "src" if (args.compare_src / "src").is_dir() else None
        trees.append((f"compare ({args.compare_src})", compare or args.compare_src))
    runs = []
    for tree, src in trees:
        runs += bench_tree(tree, src, args)
    print(
        f"\n{'tree':<24} {'attack':<25} {'client':<20} {'RSS peak':>15} {'at end':>15}"
        f" {'route p50':>10} {'worst':>10}"
    )
    for r in runs:
        peak = f"{r.peak_mb:+.0f} ={r.base_mb + r.peak_mb:.0f}M"
        end = f"{r.end_mb:+.0f} ={r.base_mb + r.end_mb:.0f}M"
        print(
            f"{r.tree[:24]:<24} {r.attack:<25} {r.client:<20} {peak:>15} {end:>15}"
            f" {r.p50_ms:8.2f}ms {r.worst_ms:8.1f}ms"
        )


if __name__ == "__main__":
    main()
