"""Warm restart: what a restart costs clients, what recovery costs the start, what snapshots
cost the running server. Each figure next to a reference measured in the same run.

1. **Gap in route answers across a restart.** ``pynamesrv serve`` with brokers registered
   (the project's broker client, 30 s period) and a client asking each topic's route about
   20 times a second, restarted with SIGTERM and with SIGKILL on the same port and journal.
   Printed: the longest time without a successful answer and the error answers. Reference:
   the same restart with ``warmRestart=false`` (Java's behaviour: TOPIC_NOT_EXIST until the
   brokers' next registration).
2. **Start-up with 1,000 brokers x 100 topics recovered** (100,000 topics, a journal written
   as the server writes it): spawn to first successful route answer, after a clean stop
   (the final snapshot only) and after a crash at the worst moment (a snapshot 10 minutes
   old plus 20,000 heartbeat lines). Reference: the same start with ``warmRestart=false``.
3. **What a snapshot costs**, in process, for the same table: bytes (plain and gzip), time to
   build and encode it (the event loop is blocked that long every journalSnapshotInterval),
   peak memory while doing so, and time to parse and restore it. Reference: building the
   same table from 1,000 registrations, which is what a cold start waits for.
4. **Restart after finding 1's flood** (issue 32): ``--flood-cycles`` registrations of
   110,000 topics, one frame each, each connection closed at once, then kill -9: the next
   start's time to an open port and to a first route answer, and its peak RSS (VmHWM),
   started under ``prlimit --as=1024 MiB`` (the shipped Kubernetes limit, as address space).
   Reference: the same sequence with 10-topic registrations, in the same run.

    .venv/bin/python bench/restart.py [--brokers 1000 --topics 100] [--register-period 30]
        [--flood-cycles 3] [--flood-only] [--restart-limit-mib 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.journal import hour_file_name, instance_dir_name, journal_files, read_records
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.remoting.client import RemotingClient, RemotingError
from route_query import free_port

HEARTBEAT_MS = 30_000
SNAPSHOT_MS = 600_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def serve(
    port: int, home: Path, *extra: str, prefix: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    config = home / "namesrv.properties"
    if not config.exists():
        config.write_text(f"kvConfigPath={home / 'kv.json'}\n")
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "pynamesrv", "serve", "-c", str(config),
         "--listen", "127.0.0.1", "--port", str(port), "--http-port", "0",
         "--journal-dir", str(home / "journal"), "--log-level", "WARNING", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------------------- 1. the gap


class Querier:
    """Asks every topic's route in a loop on one connection, reconnecting when refused."""

    def __init__(self, port: int, topics: list[str]) -> None:
        self.port, self.topics = port, topics
        self.answers: list[tuple[int, int]] = []  # (ms, code)

    async def run(self) -> None:
        client: RemotingClient | None = None
        while True:
            try:
                if client is None or not client.is_open:
                    client = await RemotingClient.connect("127.0.0.1", self.port, timeout=1)
                for topic in self.topics:
                    answer = await client.request(requests.get_routeinfo_by_topic(topic), timeout=5)
                    self.answers.append((now_ms(), answer.code))
            except RemotingError:
                client = None
            await asyncio.sleep(0.05)

    def gap_after(self, stop_ms: int) -> tuple[int, int]:
        """(longest time without a success around ``stop_ms``, error answers after it)."""
        before = max(ts for ts, code in self.answers if ts <= stop_ms and code == 0)
        after = min(ts for ts, code in self.answers if ts > stop_ms and code == 0)
        errors = sum(1 for ts, code in self.answers if ts > stop_ms and code != 0)
        return after - before, errors


async def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    while True:
        assert proc.poll() is None, "serve exited"
        try:
            client = await RemotingClient.connect("127.0.0.1", port, timeout=1)
        except RemotingError:
            await asyncio.sleep(0.01)
            continue
        await client.close()
        return


async def one_restart(sig: signal.Signals, warm: bool, period_s: float) -> tuple[int, int]:
    home = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    port = free_port()
    if not warm:
        (home / "namesrv.properties").write_text(
            f"kvConfigPath={home / 'kv.json'}\nwarmRestart=false\n"
        )
    proc = serve(port, home)
    await wait_port(port, proc)
    brokers = [
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{port}"], cluster="BenchCluster",
            broker_name=f"bench-{b}", broker_id=0, broker_addr=f"127.0.0.1:{20000 + b}",
            topics={f"Bench{b}-{t}": TopicConfig(f"Bench{b}-{t}", 4, 4, 6) for t in range(10)},
            register_period_s=period_s,
        )
        for b in range(8)
    ]  # fmt: skip
    for broker in brokers:
        await broker.start()
    querier = Querier(port, [f"Bench{b}-0" for b in range(4)])
    task = asyncio.create_task(querier.run())
    try:
        await asyncio.sleep(1.5)  # some answers before, and (SIGKILL) the registrations flushed
        stop_ms = now_ms()
        proc.send_signal(sig)
        proc.wait(30)
        proc = serve(port, home)
        while not any(ts > stop_ms and code == 0 for ts, code in querier.answers[-4:]):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)
        return querier.gap_after(stop_ms)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for broker in brokers:
            await broker.stop(unregister=False)
        proc.terminate()
        proc.wait(30)


async def gaps(period_s: float) -> None:
    print(f"1. route answers across a restart (8 brokers, {period_s:.0f} s registration period, "
          "4 topics asked ~20 times/s each)")  # fmt: skip
    print(f"   {'restart':<10} {'mode':<24} {'gap ms':>8} {'error answers':>14}")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for warm in (True, False):
            gap, errors = await one_restart(sig, warm, period_s)
            mode = "warm (recovered)" if warm else "cold (warmRestart=false)"
            print(f"   {sig.name:<10} {mode:<24} {gap:>8} {errors:>14}")


# ---------------------------------------------------------------------------- 2. start-up


def loaded_registry(brokers: int, topics: int, ts: int) -> RouteInfoManager:
    routes = RouteInfoManager()
    for b in range(brokers):
        body = RegisterBrokerBody(
            DataVersion(ts, 1),
            [TopicConfig(f"b{b:04d}-{t:03d}", 8, 8, 6) for t in range(topics)],
            [],
        )
        routes.register_broker(
            cluster="BenchCluster", broker_addr=f"10.1.{b // 250}.{b % 250}:10911",
            broker_name=f"bench-{b:04d}", broker_id=0, ha_server_addr=None, body_digest=b,
            load_body=lambda body=body: body, channel=object(), now_ms=ts,
        )  # fmt: skip
    return routes


def write_journal(root: Path, instance: str, brokers: int, topics: int, clean_stop: bool) -> None:
    """What the server would have written: a run started 11 minutes ago, the brokers
    registered, a snapshot 10 minutes ago, heartbeats every 30 s since; after a clean stop
    also the final snapshot and server_stopped."""
    end = now_ms()
    start = end - SNAPSHOT_MS - 60_000
    routes = loaded_registry(brokers, topics, start)
    lines: list[tuple[int, dict[str, Any]]] = [
        (start, {"type": "server_started", "version": "bench", "config": {}, "recovered": None})
    ]
    lines.append((start, {"type": "snapshot", "brokers": [], "topics": {}, "mappings": {}}))
    lines.append((end - SNAPSHOT_MS, {"type": "snapshot", **routes.snapshot()}))
    for tick in range(end - SNAPSHOT_MS + HEARTBEAT_MS, end, HEARTBEAT_MS):
        for (cluster, addr), live in routes.broker_live_table.items():
            live.last_update_ms = tick
            heartbeat = {
                "type": "broker_heartbeat",
                "cluster": cluster,
                "broker_name": live.broker_name,
                "broker_id": 0,
                "broker_addr": addr,
                "data_version": {"counter": 1, "timestamp": start},
            }
            lines.append((tick, heartbeat))
    if clean_stop:
        lines.append((end, {"type": "snapshot", **routes.snapshot()}))
        lines.append((end, {"type": "server_stopped", "version": "bench", "config": {}}))
    directory = root / instance_dir_name(instance)
    directory.mkdir(parents=True)
    files: dict[str, list[bytes]] = {}
    for seq, (ts, record) in enumerate(lines, 1):
        line = orjson.dumps({"ts": ts, "ns": instance, "seq": seq, **record}) + b"\n"
        files.setdefault(hour_file_name(ts), []).append(line)
    for name, data in files.items():
        (directory / name).write_bytes(b"".join(data))


def first_success(port: int, topic: str, proc: subprocess.Popen[bytes], started: float) -> float:
    async def ask() -> float:
        while True:
            assert proc.poll() is None, "serve exited"
            try:
                client = await RemotingClient.connect("127.0.0.1", port, timeout=1)
            except RemotingError:
                await asyncio.sleep(0.002)
                continue
            try:
                answer = await client.request(requests.get_routeinfo_by_topic(topic))
            finally:
                await client.close()
            return time.perf_counter() - started if answer.code in (0, 17) else -1.0

    return asyncio.run(ask())


def startup(brokers: int, topics: int) -> None:
    print(f"\n2. start to first route answer, {brokers:,} brokers x {topics} topics "
          f"({brokers * topics:,} topics) in the journal")  # fmt: skip
    print(f"   {'journal ends with':<34} {'mode':<24} {'first answer s':>14} {'load ms':>8} "
          f"{'RSS MB':>7} {'journal MB':>10}")  # fmt: skip
    for clean in (True, False):
        for warm in (True, False):
            home = Path(tempfile.mkdtemp(prefix="bench-startup-"))
            port = free_port()
            write_journal(home / "journal", f"127.0.0.1:{port}", brokers, topics, clean)
            size = sum(f.stat().st_size for f in journal_files(home / "journal")) / 2**20
            if not warm:
                (home / "namesrv.properties").write_text(
                    f"kvConfigPath={home / 'kv.json'}\nwarmRestart=false\n"
                )
            started = time.perf_counter()
            proc = serve(port, home)
            try:
                took = first_success(port, f"b{brokers - 1:04d}-000", proc, started)
                rss = rss_mb(proc.pid)
            finally:
                proc.terminate()
                proc.wait(60)
            runs = [r for r in read_records(journal_files(home / "journal"))
                    if r["type"] == "server_started"]  # fmt: skip
            recovered = runs[-1].get("recovered") or {}
            ends = "a clean stop (final snapshot)" if clean else "a crash, snapshot 10 min old"
            mode = "warm (recovered)" if warm else "cold (warmRestart=false)"
            print(f"   {ends:<34} {mode:<24} {took:>14.2f} {recovered.get('load_ms', '-'):>8} "
                  f"{rss:>7.0f} {size:>10.1f}")  # fmt: skip


# ---------------------------------------------------------------------------- 3. snapshots


def snapshots(brokers: int, topics: int) -> None:
    ts = now_ms()
    started = time.perf_counter()
    routes = loaded_registry(brokers, topics, ts)
    build_s = time.perf_counter() - started

    started = time.perf_counter()
    record = {"ts": ts, "ns": "bench:9876", "seq": 2, "type": "snapshot", **routes.snapshot()}
    line = orjson.dumps(record) + b"\n"
    write_s = time.perf_counter() - started
    tracemalloc.start()
    orjson.dumps({"type": "snapshot", **routes.snapshot()})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    packed = len(gzip.compress(line, 6))

    started = time.perf_counter()
    parsed = orjson.loads(line)
    restored = RouteInfoManager()
    restored.restore_snapshot(parsed)
    read_s = time.perf_counter() - started
    assert restored.route_body("b0000-000", True, None) == routes.route_body(
        "b0000-000", True, None
    )

    per_hour = len(line) * 3_600_000 // SNAPSHOT_MS
    print(f"\n3. one snapshot of {brokers:,} brokers x {topics} topics")
    hourly = per_hour / 2**20
    print(f"   bytes                  {len(line):>12,}  (gzip {packed:,}; {hourly:.0f} MB an hour "
          f"at one per {SNAPSHOT_MS // 60_000} min before compression)")  # fmt: skip
    print(
        f"   build + encode         {write_s * 1000:>9.0f} ms  (the event loop, once per interval)"
    )
    print(f"   peak memory doing it   {peak / 2**20:>9.1f} MB")
    print(f"   parse + restore        {read_s * 1000:>9.0f} ms")
    print(f"   reference: the table from {brokers:,} registrations {build_s * 1000:.0f} ms")


# ---------------------------------------------------------------------------- 4. flood


FLOOD_TOPICS = 110_000


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def journal_mb(home: Path) -> float:
    return sum(f.stat().st_size for f in journal_files(home / "journal")) / 2**20


async def register_once(port: int, cycle: int, topics: int) -> int:
    """One broker registering ``topics`` topics in one frame, then its connection closed
    (the server removes it: ``channel_closed``). The frame's size."""
    body = RegisterBrokerBody(
        DataVersion(now_ms(), cycle + 1),
        [TopicConfig(f"F{cycle}{t:06d}", 8, 8, 6) for t in range(topics)],
        [],
    )
    request = requests.register_broker(
        cluster="FloodCluster", broker_name=f"flood-{cycle}",
        broker_addr=f"10.9.0.{cycle % 250}:10911", broker_id=0, ha_server_addr=None, body=body,
    )  # fmt: skip
    client = await RemotingClient.connect("127.0.0.1", port, timeout=5)
    try:
        await client.request(request, timeout=120)
    finally:
        await client.close()
    return len(request.body or b"")


async def settled(home: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the journal stopped growing for 3 s (every flush done)."""
    size, still = -1.0, 0
    while still < 6:
        assert proc.poll() is None, "serve exited"
        now = journal_mb(home)
        still = still + 1 if now == size else 0
        size = now
        await asyncio.sleep(0.5)


def restart_after(cycles: int, topics: int, limit_mib: int) -> list[str]:
    """A server that saw ``cycles`` registrations of ``topics`` topics, each closed at once,
    is killed (-9) once its journal is written; then started again on the same journal, under
    ``prlimit --as`` of ``limit_mib`` (0: no limit). The row's figures: port open s, first
    route answer s, peak RSS MB of the restart (VmHWM), whether it served under the limit,
    peak RSS MB of the server before the kill, journal MB."""
    home = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    try:
        port = free_port()
        proc = serve(port, home)
        try:
            asyncio.run(wait_port(port, proc))
            for cycle in range(cycles):
                asyncio.run(register_once(port, cycle, topics))
            asyncio.run(settled(home, proc))
            before = peak_rss_mb(proc.pid)
        finally:
            proc.kill()
            proc.wait(30)
        size = journal_mb(home)
        prefix = ("prlimit", f"--as={limit_mib * 2**20}") if limit_mib else ()
        started = time.perf_counter()
        proc = serve(port, home, prefix=prefix)
        try:
            asyncio.run(wait_port(port, proc))
            port_s = time.perf_counter() - started
            answer_s = first_success(port, "F0000000", proc, started)
            peak = peak_rss_mb(proc.pid)
            figures = [f"{port_s:.2f}", f"{answer_s:.2f}", f"{peak:.0f}", "yes"]
        except AssertionError:  # serve exited: out of memory under the limit
            figures = ["-", "-", "-", f"no (exit {proc.returncode})"]
        finally:
            proc.terminate()
            proc.wait(60)
        return [*figures, f"{before:.0f}", f"{size:.1f}"]
    finally:
        shutil.rmtree(home, ignore_errors=True)


def flood(cycles: int, limit_mib: int) -> None:
    limit = f"prlimit --as={limit_mib} MiB" if limit_mib else "no limit"
    print(f"\n4. restart after finding 1's flood: {cycles} registrations of {FLOOD_TOPICS:,} "
          "topics, one frame each, each connection closed at once, then kill -9 and start "
          f"again on the same journal ({limit})")  # fmt: skip
    heads = ("port open s", "first answer s", "restart peak RSS MB", "served", "server peak MB",
             "journal MB")  # fmt: skip
    print(f"   {'before the kill':<36} " + " ".join(f"{h:>{max(len(h), 6)}}" for h in heads))
    for label, topics in (
        (f"{cycles} x {FLOOD_TOPICS:,} topics (the attack)", FLOOD_TOPICS),
        (f"{cycles} x 10 topics (reference)", 10),
    ):
        row = restart_after(cycles, topics, limit_mib)
        cells = " ".join(f"{v:>{max(len(h), 6)}}" for h, v in zip(heads, row, strict=True))
        print(f"   {label:<36} {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--register-period", type=float, default=30.0)
    parser.add_argument("--skip-gap", action="store_true")
    parser.add_argument(
        "--flood-cycles", type=int, default=3, help="110,000-topic registrations (issue: 10)"
    )
    parser.add_argument("--flood-only", action="store_true", help="only section 4")
    parser.add_argument(
        "--restart-limit-mib", type=int, default=1024, help="prlimit --as of the restart (0: none)"
    )
    args = parser.parse_args()
    if not args.flood_only:
        if not args.skip_gap:
            asyncio.run(gaps(args.register_period))
        startup(args.brokers, args.topics)
        snapshots(args.brokers, args.topics)
    flood(args.flood_cycles, args.restart_limit_mib if shutil.which("prlimit") else 0)


if __name__ == "__main__":
    main()
