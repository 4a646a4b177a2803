"""Memory under an attack of incomplete frames: 1,000 connections each start a 16 MiB frame.

Each connection sends the length word of a frame just under the 16 MiB limit and then part of
it (4 MiB by default), never the rest: without a bound the server would hold 4 GB. We measure
the server's resident memory idle (the reference, same run), its peak (VmHWM) during the
attack and the state after, how many connections it shed (``maxBufferedBytes``) and that a
route query is still answered. The bound to compare with is idle + maxBufferedBytes (plus the
allocator's slack).

    .venv/bin/python bench/partial_frames.py [--connections 1000] [--send-mib 4]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import struct
import time
from pathlib import Path

from pynamesrv.remoting.codec import FrameDecoder, encode
from route_query import REQUEST_COMMAND, start_server, wait_for_port

FRAME_LENGTH = 16 * 1024 * 1024 - 8  # the largest the default limit accepts
CHUNK = 256 * 1024


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def attacker(port: int, send_bytes: int, outcome: dict[str, int]) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        outcome["refused"] += 1
        return
    header = b'{"code":106,"opaque":1}'
    try:
        writer.write(struct.pack(">iI", FRAME_LENGTH, len(header)) + header)
        sent = 0
        while sent < send_bytes:
            writer.write(b"\0" * CHUNK)
            sent += CHUNK
            await writer.drain()
        outcome["held"] += 1
        await reader.read()  # until the server sheds it or the bench ends
        outcome["shed"] += 1
    except (ConnectionError, OSError):
        outcome["shed"] += 1
    finally:
        writer.close()


async def route_query(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode(REQUEST_COMMAND))
    decoder = FrameDecoder()
    try:
        while True:
            answers = decoder.feed(await asyncio.wait_for(reader.read(65536), 30))
            if answers:
                return answers[0].code
    finally:
        writer.close()


async def attack(pid: int, port: int, connections: int, send_bytes: int) -> None:
    outcome = {"refused": 0, "held": 0, "shed": 0}
    tasks = [asyncio.create_task(attacker(port, send_bytes, outcome)) for _ in range(connections)]
    started = time.perf_counter()
    while sum(outcome.values()) < connections and time.perf_counter() - started < 120:
        await asyncio.sleep(0.5)
        if outcome["held"] + outcome["shed"] + outcome["refused"] >= connections:
            break
    rss, peak = memory_mb(pid)
    code = await route_query(port)
    print(f"connections sent {send_bytes >> 20} MiB each: held {outcome['held'] - outcome['shed']}"
          f", shed {outcome['shed']}, refused at connect {outcome['refused']}")  # fmt: skip
    print(
        f"server RSS during the attack {rss:.0f} MiB, peak {peak:.0f} MiB; "
        f"route query answered with code {code}"
    )
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--send-mib", type=int, default=4)
    parser.add_argument("--max-buffered-mib", type=int, default=512)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 2 * args.connections + 256)
    if soft < wanted:  # inherited by the server too
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    budget = args.max_buffered_mib * 1024 * 1024
    server, port, _ = start_server("partial", cpu=None, maxBufferedBytes=budget)
    try:
        wait_for_port(port)
        time.sleep(0.5)
        idle, _ = memory_mb(server.pid)
        budget_mib = args.max_buffered_mib
        print(f"server idle RSS {idle:.0f} MiB (reference); maxBufferedBytes {budget_mib} MiB; "
              f"bound ~ {idle + budget_mib:.0f} MiB")  # fmt: skip
        asyncio.run(attack(server.pid, port, args.connections, args.send_mib * 1024 * 1024))
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
