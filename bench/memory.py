"""Resident memory of a loaded name server, and the time from start to first answer.

For each shape a fresh ``pynamesrv serve`` (default settings: HTTP and journal on) is started;
we measure the time until its first route answer, its resident memory idle once HTTP is up too
(the reference), then register the brokers (compressed
bodies, as a 4.x broker with compressedRegister sends them) and measure again:

* 4 brokers x 1,000 topics (the Java 4.9.4 figure: 195 MB, 3.1 s to first answer);
* 100 brokers x 10,000 topics;
* 32 brokers x 40,000 topics x 8 queues, every broker serving every topic (a cluster-wide
  topic set) and, separately, each broker with its own topics (1.28 million topics).

    .venv/bin/python bench/memory.py
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand
from route_query import REQUEST_COMMAND, free_port, start_server, wait_for_port

SHAPES = (
    ("4 x 1,000", 4, 1_000, True),
    ("100 x 10,000", 100, 10_000, True),
    ("32 x 40,000 shared", 32, 40_000, True),
    ("32 x 40,000 own", 32, 40_000, False),
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def ask(sock: socket.socket, frame: bytes) -> RemotingCommand:
    decoder = FrameDecoder(max_frame_length=1 << 30)
    sock.sendall(frame)
    while True:
        answers = decoder.feed(sock.recv(1 << 20))
        if answers:
            return answers[0]


def first_answer(port: int, started: float) -> float:
    """Seconds from spawning the server until it answered a route query."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                ask(sock, encode(REQUEST_COMMAND))
                return time.perf_counter() - started
        except OSError:
            time.sleep(0.005)


def measure(brokers: int, topics: int, shared: bool) -> tuple[float, float, float]:
    http_port = free_port()
    started = time.perf_counter()
    server, port, _ = start_server("memory", cpu=None, httpPort=http_port)
    sockets = []
    try:
        startup = first_answer(port, started)
        wait_for_port(http_port)  # the default configuration: metrics and status page up too
        idle = rss_mb(server.pid)
        for b in range(brokers):
            prefix = "T" if shared else f"b{b}-"
            broker = BrokerClient(
                namesrv_addrs=[],
                cluster="MemCluster",
                broker_name=f"mem-broker-{b}",
                broker_id=0,
                broker_addr=f"127.0.0.5:{20000 + b}",
                topics={
                    f"{prefix}{t:06d}": TopicConfig(f"{prefix}{t:06d}", 8, 8, 6)
                    for t in range(topics)
                },
                compressed=True,
            )
            sock = socket.create_connection(("127.0.0.1", port))
            answer = ask(sock, encode(broker.registration_request()))
            assert answer.code == 0, answer.remark
            sockets.append(sock)  # keep the connection: closing it would drop the broker
        time.sleep(1)
        loaded = rss_mb(server.pid)
    finally:
        for sock in sockets:
            sock.close()
        server.terminate()
        server.wait(60)
    return startup, idle, loaded


def main() -> None:
    print(f"{'brokers x topics':<20} {'start s':>8} {'idle MB':>8} {'loaded MB':>10} "
          f"{'queue entries':>14} {'bytes/entry':>12}")  # fmt: skip
    for label, brokers, topics, shared in SHAPES:
        startup, idle, loaded = measure(brokers, topics, shared)
        entries = brokers * topics
        per_entry = (loaded - idle) * 1024 * 1024 / entries
        print(
            f"{label:<20} {startup:>8.2f} {idle:>8.1f} {loaded:>10.1f} {entries:>14,} "
            f"{per_entry:>12.0f}"
        )


if __name__ == "__main__":
    main()
