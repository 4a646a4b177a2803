"""A single-process server (``--workers 1``) against another checkout of pynamesrv, in one
run: route queries (``route_query.py``'s shapes) and registrations (``register.py``'s), each
measured on both in turn, ``--repeat`` times, and printed as medians with their spread and
the ratio after/before (issue 33: a single process loses nothing to the workers' code).

The other checkout is a ``src`` directory with its compiled fast paths built (or copied):

    git worktree add /tmp/before 0474314   # main before the workers merge
    cp src/pynamesrv/namesrv/*.so /tmp/before/src/pynamesrv/namesrv/  # if unchanged there
    .venv/bin/python bench/before_after.py --before /tmp/before/src [--repeat 5] [--only ...]

Both servers run at once, each pinned to CPU 0 with the load on the other CPUs, and only
one of them is loaded at a time: a slow moment of a shared machine falls on either.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import loadgen
from register import FLUSH_PAUSE_S, registration, round_trip, unregistration
from route_query import (
    REQUESTS,
    TOPIC,
    WALK_REQUESTS,
    WALK_TOPICS,
    register_route,
    run_load,
    start_server,
    wait_for_port,
)

SIDES = ("before", "after")


def spread(values: list[float]) -> str:
    return f"{min(values):,.1f}-{max(values):,.1f}"


def row(label: str, unit: str, samples: dict[str, list[float]], higher_is_better: bool) -> None:
    before, after = (statistics.median(samples[side]) for side in SIDES)
    ratio = after / before
    print(
        f"{label:<34} {unit:<8} {before:>10,.1f} ({spread(samples['before'])}) "
        f"{after:>10,.1f} ({spread(samples['after'])})  after/before x{ratio:.3f}"
        + ("" if higher_is_better else " (lower is better)")
    )


def alternate(repeat: int, measure: Callable[[str], float]) -> dict[str, list[float]]:
    """``measure(side)`` on both sides in turn, ``repeat`` times, the first side alternating."""
    samples: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(repeat):
        for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
            samples[side].append(measure(side))
    return samples


def queries(args: argparse.Namespace, sources: dict[str, Path | None]) -> None:
    generator = loadgen.build()
    if generator is None:
        raise SystemExit("bench/before_after.py needs a C compiler for loadgen.c")
    ncpu = os.cpu_count() or 1
    load_cpus = ",".join(str(c) for c in range(1, ncpu)) or "0"
    servers: dict[str, subprocess.Popen] = {}
    socks: list[socket.socket] = []
    ports: dict[str, int] = {}
    try:
        for side, source in sources.items():
            server, port, _ = start_server(f"ba-{side}", "0", source=source)
            servers[side] = server
            ports[side] = port
            wait_for_port(port)
            socks.append(register_route(port, (TOPIC, *WALK_TOPICS))[0])
        for label, conns, frames in (
            ("route, 1 conn x 1", 1, REQUESTS),
            ("route, 64 conns x 1, 1000 topics", 64, WALK_REQUESTS),
        ):
            runs: dict[str, list[dict]] = {side: [] for side in SIDES}
            load = partial(_load, runs, ports, servers, conns, frames, args.seconds, load_cpus,
                           generator)  # fmt: skip
            row(label, "req/s", alternate(args.repeat, load), True)
            row(label, "CPU us", {s: [r["cpu_us"] for r in runs[s]] for s in SIDES}, False)
    finally:
        for sock in socks:
            sock.close()
        for server in servers.values():
            server.terminate()
            server.wait(30)


def _load(
    runs: dict[str, list[dict]],
    ports: dict[str, int],
    servers: dict[str, subprocess.Popen],
    conns: int,
    frames: tuple[bytes, ...],
    seconds: float,
    load_cpus: str,
    generator: Path,
    side: str,
) -> float:
    """One query run on ``side``: its req/s (the whole result kept in ``runs``)."""
    result = run_load(
        ports[side], 1, conns, 1, seconds, load_cpus, frames, servers[side].pid,
        generator=generator,
    )  # fmt: skip
    runs[side].append(result)
    return result["rps"]


def _register(
    socks: dict[str, socket.socket],
    frame: bytes,
    undo: bytes,
    again: dict[str, list[float]],
    side: str,
) -> float:
    """A first registration's round trip on ``side`` (ms), then an unchanged one's (kept in
    ``again``), each apart from the journal flush of the one before, then undone."""
    sock = socks[side]
    first, answer = round_trip(sock, frame)
    assert answer.code == 0, answer.remark
    time.sleep(FLUSH_PAUSE_S)
    again[side].append(round_trip(sock, frame)[0] * 1000)
    assert round_trip(sock, undo)[1].code == 0
    time.sleep(FLUSH_PAUSE_S)
    return first * 1000


def registrations(args: argparse.Namespace, sources: dict[str, Path | None]) -> None:
    servers, socks = {}, {}
    try:
        for side, source in sources.items():
            server, port, _ = start_server(
                f"bar-{side}", "0", source=source, frameMaxLength=256 * 1024 * 1024
            )
            servers[side] = server
            wait_for_port(port)
            socks[side] = socket.create_connection(("127.0.0.1", port))
        for topics in (10_000, 100_000):
            for compressed in (False, True):
                name = f"ba-{topics}-{compressed}"
                frame, undo = registration(topics, compressed, name), unregistration(topics, name)
                again: dict[str, list[float]] = {side: [] for side in SIDES}
                measure = partial(_register, socks, frame, undo, again)
                kind = "compressed" if compressed else "JSON"
                row(f"register {topics:,} {kind}, first", "ms", alternate(args.repeat, measure),
                    False)  # fmt: skip
                row(f"register {topics:,} {kind}, again", "ms", again, False)
    finally:
        for sock in socks.values():
            sock.close()
        for server in servers.values():
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's src")
    parser.add_argument("--repeat", type=int, default=5, help="runs per side (the median)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--only", choices=("queries", "registrations"), help="one of the two tables"
    )
    args = parser.parse_args()
    if not (args.before / "pynamesrv").is_dir():
        raise SystemExit(f"{args.before}: not a src directory with pynamesrv in it")
    sources: dict[str, Path | None] = {"before": args.before.resolve(), "after": None}
    print(
        f"before: {sources['before']}; after: this checkout. Medians of {args.repeat} "
        f"(min-max), each side in turn, the server on CPU 0"
    )
    print(f"{'':<34} {'':<8} {'before':>10} {'':<13} {'after':>10}")
    if args.only != "registrations":
        queries(args, sources)
    if args.only != "queries":
        registrations(args, sources)


if __name__ == "__main__":
    main()
