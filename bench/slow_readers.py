"""Route-query latency and the server's memory while slow readers hold answers (issue 32,
finding 2), with the server-wide budget of unwritten answers and without it, same run.

A broker registers 110,000 topics. Then 200 connections send requests and never read:

* ``topics``: 20 GET_ALL_TOPIC_LIST each (4 KB in all; answers of 1.6 MB), the finding's
  repro. The listing is one cached body the transports share, so unread answers cost
  little memory whatever the budget;
* ``routes``: 1,500 pipelined route queries each for a topic 64 brokers serve (answers of
  ~9 KB; 120 KB of requests): the answers of each read are one new frame, so every
  connection holds up to its high-water mark (4 MiB) of its own once the kernel's socket
  buffers are full.

One client keeps one route query in flight; its latency is printed idle (the reference)
and over a window that starts 1 s before the attack (its burst of answers included), next
to the server's resident memory (before, at the end of the window, peak) and what the
budget shed. Each attack runs against two servers, one after the other:
``maxPendingAnswerBytes`` at its default (256 MiB) and at 64 GiB (no server-wide budget:
each connection bounded by its high-water mark alone, as before). Server on CPU 0, load on
the others.

    .venv/bin/python bench/slow_readers.py [--seconds 6] [--readers 200] [--attack routes]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import socket
import time
import urllib.request
from typing import Any

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.remoting.codec import FrameDecoder, encode
from route_query import (
    free_port,
    pin,
    register_route,
    route_query,
    run_load,
    start_server,
    wait_for_port,
)

MIB = 1024 * 1024
WIDE = "WideTopic"  # served by WIDE_BROKERS brokers: a route answer of some 9 KB
WIDE_BROKERS = 64


def register_wide(port: int) -> socket.socket:
    """Register WIDE_BROKERS brokers serving WIDE over one socket that stays open."""
    sock = socket.create_connection(("127.0.0.1", port))
    decoder = FrameDecoder()
    for index in range(WIDE_BROKERS):
        broker = BrokerClient(
            namesrv_addrs=[],
            cluster="Wide",
            broker_name=f"wide-{index:02d}",
            broker_id=0,
            broker_addr=f"127.0.0.5:{20000 + index}",
            topics={WIDE: TopicConfig(WIDE, 8, 8, 6)},
        )
        sock.sendall(encode(broker.registration_request()))
        while not decoder.feed(sock.recv(65536)):
            pass
    return sock


def slow_readers(
    cpus: str, port: int, readers: int, attack: str, delay_s: float, hold_s: float, ready: Any
) -> None:
    """After ``delay_s``, open ``readers`` connections, send each its requests, never read;
    hold. A server that stops reading a connection (its answers are not read) gets the rest
    later."""
    pin(cpus)
    time.sleep(delay_s)
    if attack == "topics":
        flood = b"".join(encode(requests.get_all_topic_list_from_nameserver()) for _ in range(20))
    else:
        flood = b"".join(route_query(WIDE, 1_000_000 + i) for i in range(1_500))
    socks = []
    left: dict[socket.socket, memoryview] = {}
    for _ in range(readers):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        socks.append(sock)
        left[sock] = memoryview(flood)
    deadline = time.monotonic() + 20
    while left and time.monotonic() < deadline:
        for sock, data in list(left.items()):
            try:
                sent = sock.send(data)
            except (BlockingIOError, ConnectionError):
                sent = 0
            if sent == len(data):
                del left[sock]
            else:
                left[sock] = data[sent:]
        time.sleep(0.01)
    ready.set()
    time.sleep(hold_s)
    for sock in socks:
        sock.close()


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.M)
    return int(match.group(1)) if match else 0


def shed(http_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'pynamesrv_budget_shed_total\{budget="pending_answer_bytes"\} (\S+)', text)
    return int(float(found.group(1))) if found else -1


def run(
    label: str, budget: int, attack_kind: str, args: argparse.Namespace, load_cpus: str
) -> dict[str, Any]:
    http_port = free_port()
    server, port, _ = start_server(
        label,
        frameMaxLength=64 * MIB,
        maxBufferedBytes=128 * MIB,
        maxPendingAnswerBytes=budget,
        httpPort=http_port,
        journalEnable="false",
    )
    try:
        wait_for_port(port, 60)
        topics = tuple(f"topic-{i:06d}" for i in range(args.topics))
        broker_socket, _ = register_route(port, topics)
        wide_socket = register_wide(port)
        idle = run_load(port, 1, 1, 1, args.seconds, load_cpus)
        rss_before = status_kib(server.pid, "VmRSS")
        ready = mp.Event()
        # The route client runs from before the attack starts to after its requests are all
        # sent: the burst of answers the server builds is inside the window.
        attack = mp.Process(
            target=slow_readers,
            args=(load_cpus, port, args.readers, attack_kind, 1.0, args.seconds + 30, ready),
        )
        attack.start()
        busy = run_load(port, 1, 1, 1, args.seconds, load_cpus)
        ready.wait(90)
        rss = status_kib(server.pid, "VmRSS")
        peak = status_kib(server.pid, "VmHWM")
        sheds = shed(http_port)
        attack.terminate()
        attack.join()
        broker_socket.close()
        wide_socket.close()
    finally:
        server.terminate()
        server.wait(30)
    return {
        "idle": idle,
        "busy": busy,
        "rss_before": rss_before / 1024,
        "rss": rss / 1024,
        "peak": peak / 1024,
        "shed": sheds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--readers", type=int, default=200)
    parser.add_argument("--topics", type=int, default=110_000)
    parser.add_argument("--attack", choices=("topics", "routes", "both"), default="both")
    args = parser.parse_args()
    ncpu = os.cpu_count() or 1
    load_cpus = ",".join(str(c) for c in range(1, ncpu)) or "0"
    attacks = ("topics", "routes") if args.attack == "both" else (args.attack,)
    rows = {
        (attack, name): run(f"{attack}-{label}", budget, attack, args, load_cpus)
        for attack in attacks
        for name, label, budget in (
            ("budget 256 MiB", "budget", 256 * MIB),
            ("no budget", "nobudget", 64 * 1024 * MIB),
        )
    }
    print(
        f"{args.readers} slow readers ({args.topics:,} topics routed), one route query in "
        "flight; route latency in ms"
    )
    print(
        f"{'attack':<7} {'server':<15} {'idle p99':>8} {'p50':>7} {'p99':>7} {'p999':>7} "
        f"{'RSS before':>10} {'during':>7} {'peak':>7} {'shed':>5}"
    )
    for (attack, name), r in rows.items():
        idle, busy = r["idle"], r["busy"]
        print(
            f"{attack:<7} {name:<15} {idle['p99']:>8.3f} {busy['p50']:>7.3f} "
            f"{busy['p99']:>7.3f} {busy['p999']:>7.3f} {r['rss_before']:>8.0f}MB "
            f"{r['rss']:>5.0f}MB {r['peak']:>5.0f}MB {r['shed']:>5}"
        )


if __name__ == "__main__":
    main()
