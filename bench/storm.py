"""Route-query latency under a registration storm, against the same load when idle.

The storm has the shape of RocketMQ's RegisterBrokerBenchmark: 32 brokers with 10,000
topics each re-register every 100 ms (unchanged data version, JSON bodies of ~1.6 MB: 512 MB/s
of registration traffic). Meanwhile one client keeps one route query in flight; its p99 is
compared with the same client's p99 when no broker registers. Server on CPU 0, load and storm
on the other CPUs.

    .venv/bin/python bench/storm.py [--seconds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import struct
import time

import uvloop

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codec import FrameDecoder, encode
from route_query import pin, register_route, run_load, start_server, wait_for_port

BROKERS = 32
TOPICS = 10_000
PERIOD_S = 0.1


def storm(cpus: str, port: int, seconds: float, out: mp.Queue) -> None:
    """Every broker re-registers every PERIOD_S over its own connection."""
    pin(cpus)

    requests = [
        BrokerClient(
            namesrv_addrs=[],
            cluster="Storm",
            broker_name=f"storm-{index}",
            broker_id=0,
            broker_addr=f"127.0.0.4:{20000 + index}",
            topics={
                f"s{index}-{t:05d}": TopicConfig(f"s{index}-{t:05d}", 8, 8, 6)
                for t in range(TOPICS)
            },
        ).registration_request()
        for index in range(BROKERS)
    ]
    frames = [encode(request) for request in requests]  # the same bytes every period

    async def run() -> tuple[int, int, float]:
        done, late, worst = 0, 0, 0.0

        async def one(index: int) -> None:
            nonlocal done, late, worst
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            stop_at = time.perf_counter() + seconds
            next_at = time.perf_counter()
            while next_at < stop_at:
                start = time.perf_counter()
                writer.write(frames[index])
                (length,) = struct.unpack(">i", await reader.readexactly(4))
                [answer] = FrameDecoder().feed(
                    struct.pack(">i", length) + await reader.readexactly(length)
                )
                took = time.perf_counter() - start
                assert answer.code == 0, answer.remark
                done += 1
                worst = max(worst, took)
                next_at += PERIOD_S
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                else:
                    late += 1
            writer.close()

        await asyncio.gather(*(one(i) for i in range(BROKERS)))
        return done, late, worst

    out.put(uvloop.run(run()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    ncpu = os.cpu_count() or 1
    load_cpus = ",".join(str(c) for c in range(1, ncpu)) or "0"
    server, port, _ = start_server("storm")
    try:
        wait_for_port(port)
        broker_socket, _ = register_route(port)
        idle = run_load(port, 1, 1, 1, args.seconds, load_cpus)
        queue: mp.Queue = mp.Queue()
        storming = mp.Process(target=storm, args=(load_cpus, port, args.seconds + 4, queue))
        storming.start()
        time.sleep(8)  # bodies are built and first registrations decoded before measuring
        busy = run_load(port, 1, 1, 1, args.seconds, load_cpus)
        done, late, worst = queue.get(timeout=args.seconds + 120)
        storming.join()
        broker_socket.close()
    finally:
        server.terminate()
        server.wait(30)
    rate = done / (args.seconds + 4)
    print(
        f"storm: {BROKERS} brokers x {TOPICS:,} topics every {PERIOD_S * 1000:.0f} ms: "
        f"{rate:,.0f} registrations/s ({rate / (BROKERS / PERIOD_S):.0%} of the asked "
        f"{BROKERS / PERIOD_S:.0f}/s), {late} late, slowest {worst * 1000:.1f} ms"
    )
    print(f"{'route queries':<14} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'p999 ms':>8}")
    for name, r in (("idle", idle), ("during storm", busy)):
        print(f"{name:<14} {r['rps']:>9,.0f} {r['p50']:>8.3f} {r['p99']:>8.3f} {r['p999']:>8.3f}")
    print(f"p99 during storm / idle p99: {busy['p99'] / idle['p99']:.2f}x")


if __name__ == "__main__":
    main()
