"""Pipeline run time next to the cheapest Spark pass over the same journals, per master.

Generates (or reuses) a day of 1,000 brokers heartbeating every 30 s on two name servers
with ``pynamesrv.testing``. Then, on each master (``local[2]`` and a standalone
cluster of two 1-core workers started from the installed PySpark on 127.0.0.1), in one Spark
session per master:

1. full day: the reference, a bare ``spark.read.schema(JOURNAL_SCHEMA).json(files).count()``
   over every journal file, next to a first ``run_pipeline`` over the same files (parse,
   ingest, six tables, report, publish) into an empty output; and the parse floor, the
   journal parsed by the store's reader into a sink that writes nothing: what ingestion
   alone cannot go below, whatever the rest of the job costs;
2. incremental hour: an output published for all hours but the last complete one, then the
   hour's files appear and a second run brings it up to date; next to it, the bare count of
   those files alone.

Prints both runs' stage timings and a table of pipeline / bare-scan ratios (target: the full
day within 2.5x), in wall time and, on a local master, in CPU time of the Spark JVM (driver and
executors are one process there): on a machine shared with other work the wall time varies
2x, the CPU time much less. With ``--check`` whether every published table equals the generator's
ground truth after the incremental run (and after the full-day run).

    .venv/bin/python bench/pipeline.py [--brokers 1000 --hours 24 --instances 2]
        [--masters local[2],standalone] [--check]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

TESTS = Path(__file__).resolve().parents[1] / "tests"


def ensure_journals(root: Path, args: argparse.Namespace) -> tuple[Any, float | None]:
    """Reuse ``root`` when it was generated with the same parameters."""
    from pynamesrv.testing import GroundTruth, generate

    wanted = {
        "brokers": args.brokers,
        "instances": args.instances,
        "hours": args.hours,
        "seed": args.seed,
    }
    truth_file = root / "ground_truth.json"
    if truth_file.exists():
        params = orjson.loads(truth_file.read_bytes()).get("params", {})
        if all(params.get(k) == v for k, v in wanted.items()):
            return GroundTruth.load(truth_file), None
    start = time.perf_counter()
    truth = generate(root, **wanted)
    return truth, time.perf_counter() - start


def journal_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/events-*.jsonl"))


def warm_page_cache(files: list[Path]) -> tuple[int, int]:
    """Read every file once so neither job pays for the disk alone; returns (bytes, lines)."""
    size = lines = 0
    for file in files:
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                size += len(chunk)
                lines += chunk.count(b"\n")
    return size, lines


def check(spark: Any, out: Path, truth: Any) -> list[str]:
    """Names of the tables that differ from the ground truth (empty: all equal)."""
    sys.path.insert(0, str(TESTS))
    from pipeline.journals import assert_same_rows  # type: ignore[import-not-found]
    from pynamesrv.pipeline.job import COLUMNS, TABLES

    failed = []
    for name in TABLES:
        frame = spark.read.parquet(str(out / name))
        try:
            assert_same_rows(frame.collect(), truth.table(name), COLUMNS[name])
        except AssertionError as exc:
            failed.append(name)
            print(f"  {name}: {str(exc)[:600]}")
    return failed


@dataclass(frozen=True)
class Cost:
    """Wall seconds, and CPU seconds of the Spark JVM (None where it cannot be read)."""

    wall: float
    cpu: float | None


class JvmClock:
    """Wall time and the Spark JVM's CPU time (Linux ``/proc``; on a local master that JVM
    runs the executors too, on a cluster it is the driver only, so CPU is not reported)."""

    def __init__(self, spark: Any) -> None:
        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        local = spark.sparkContext.master.startswith("local")
        self._stat = Path(f"/proc/{pid}/stat") if local else None
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def cpu(self) -> float | None:
        if self._stat is None or not self._stat.exists():
            return None
        fields = self._stat.read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime

    def measure(self, action: Any) -> tuple[Any, Cost]:
        cpu, start = self.cpu(), time.perf_counter()
        value = action()
        wall, after = time.perf_counter() - start, self.cpu()
        return value, Cost(wall, None if cpu is None or after is None else after - cpu)


def bare_scan(clock: JvmClock, spark: Any, files: list[Path]) -> tuple[int, Cost]:
    from pynamesrv.pipeline.schema import JOURNAL_SCHEMA

    reader = spark.read.schema(JOURNAL_SCHEMA)
    return clock.measure(lambda: reader.json([str(f) for f in files]).count())


def parse_floor(clock: JvmClock, spark: Any, files: list[Path]) -> Cost:
    """What ingestion cannot go below: the journal parsed by the store's reader, keeping the
    fields a store row keeps, into a sink that writes nothing (no grouping, no write)."""
    from pynamesrv.pipeline.compact import EVENT_FIELDS
    from pynamesrv.pipeline.schema import CORRUPT
    from pynamesrv.pipeline.store import parse

    kept = parse(spark, [str(f) for f in files]).select("file", CORRUPT, *EVENT_FIELDS)
    return clock.measure(lambda: kept.write.format("noop").mode("overwrite").save())[1]


def cpu_text(cost: Cost) -> str:
    return "" if cost.cpu is None else f", {cost.cpu:.1f} s CPU"


def mirror(files: list[Path], root: Path, target: Path) -> None:
    """Symbolic links to ``files`` under ``target``, in their instance directories."""
    for file in files:
        link = target / file.relative_to(root)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(file)


def bench_master(
    master: str, root: Path, truth: Any, work: Path, args: argparse.Namespace
) -> list[tuple[str, str, Cost, Cost, int]]:
    from pynamesrv.pipeline.job import run_pipeline, spark_session

    spark = spark_session(master, app_name="pynamesrv-bench")
    clock = JvmClock(spark)
    cores = spark.sparkContext.defaultParallelism
    print(f"\n== Spark {spark.version}, master {spark.sparkContext.master} ({cores} cores)")
    files = journal_files(root)
    heartbeat = truth.params["heartbeat_s"]

    def progress(stage: str, seconds: float, detail: str) -> None:
        print(f"    {stage:<22} {seconds:7.2f} s  {detail}")

    def run(journal: Path, out: Path) -> tuple[Any, Cost]:
        return clock.measure(
            lambda: run_pipeline(
                spark, [str(journal)], str(out), heartbeat_interval_s=heartbeat, progress=progress
            )
        )

    bare_scan(clock, spark, files)  # warm the JVM (JIT) the same way for both measurements
    rows = []

    # 1. full day
    count, bare = bare_scan(clock, spark, files)
    print(f"  bare scan: {count:,} lines in {bare.wall:.1f} s{cpu_text(bare)}")
    floor = parse_floor(clock, spark, files)
    print(
        f"  parse floor (the fields the store keeps, no write): {floor.wall:.1f} s"
        f"{cpu_text(floor)} = {floor.wall / bare.wall:.2f}x the bare scan"
    )
    full_out = work / "full"
    shutil.rmtree(full_out, ignore_errors=True)
    print("  full day:")
    result, full = run(root, full_out)
    print(f"  full day: {full.wall:.1f} s{cpu_text(full)}")
    rows.append((master, "full day", full, bare, result.events))
    rows.append((master, "parse floor", floor, bare, count))
    if args.check:
        failed = check(spark, full_out, truth)
        print("  ground truth: " + ("all six tables equal" if not failed else f"DIFFER {failed}"))

    # 2. incremental hour: everything but the last complete hour, then that hour
    hours = sorted({f.name for f in files})
    last_full = hours[-2]  # the last file is the partial hour the generator stopped in
    before = [f for f in files if f.name < last_full]
    added = [f for f in files if f.name == last_full]
    journal = work / "journal"
    shutil.rmtree(journal, ignore_errors=True)
    mirror(before, root, journal)
    inc_out = work / "incremental"
    shutil.rmtree(inc_out, ignore_errors=True)
    print(f"  setup: all hours before {last_full} (not timed):")
    run(journal, inc_out)
    mirror(added, root, journal)
    count, bare_hour = bare_scan(clock, spark, added)
    print(
        f"  bare scan of {last_full}: {count:,} lines in {bare_hour.wall:.2f} s"
        + cpu_text(bare_hour)
    )
    print(f"  incremental hour ({last_full}):")
    result, hour = run(journal, inc_out)
    print(f"  incremental hour: {hour.wall:.1f} s{cpu_text(hour)}")
    rows.append((master, "incremental hour", hour, bare_hour, count))
    if args.check:
        mirror([f for f in files if f.name > last_full], root, journal)
        run(journal, inc_out)
        failed = check(spark, inc_out, truth)
        print(
            "  ground truth after the last hour too: "
            + ("all six tables equal" if not failed else f"DIFFER {failed}")
        )
    spark.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "pynamesrv-bench")
    parser.add_argument("--masters", default="local[2],standalone")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="compare tables to ground truth")
    args = parser.parse_args()

    root = args.dir / f"b{args.brokers}-i{args.instances}-h{args.hours:g}-s{args.seed}"
    truth, generated_s = ensure_journals(root, args)
    size, lines = warm_page_cache(journal_files(root))
    note = f"generated in {generated_s:.1f} s" if generated_s is not None else "reused"
    print(
        f"journals: {lines:,} lines, {size / 1e6:,.0f} MB, {args.instances} instance(s), "
        f"{args.brokers} brokers, {args.hours:g} h ({note}) in {root}"
    )
    rows = []
    for master in args.masters.split(","):
        with ExitStack() as stack:
            if master == "standalone":
                sys.path.insert(0, str(TESTS))
                from pipeline.standalone import StandaloneCluster  # type: ignore[import-not-found]

                cluster = stack.enter_context(
                    StandaloneCluster(args.dir / "cluster", workers=args.workers)
                )
                master = cluster.url
            rows += bench_master(master, root, truth, args.dir / "out", args)

    print(
        f"\n{'master':<26} {'run':<17} {'pipeline':>9} {'bare scan':>10} {'ratio':>7}"
        f" {'CPU ratio':>10}"
    )
    for master, run, pipeline, bare, events in rows:
        cpu_ratio = (
            f"{pipeline.cpu / bare.cpu:9.2f}x" if pipeline.cpu and bare.cpu else f"{'n/a':>10}"
        )
        print(
            f"{master:<26} {run:<17} {pipeline.wall:8.1f}s {bare.wall:9.2f}s"
            f" {pipeline.wall / bare.wall:6.2f}x {cpu_ratio}   ({events:,} lines)"
        )
    full = [r for r in rows if r[1] == "full day"]
    worst = max(r[2].wall / r[3].wall for r in full)
    verdict = "yes" if worst <= 2.5 else "NO"
    print(f"full day within 2.5x of the bare scan on every master: {verdict}")
    floors = [r for r in rows if r[1] == "parse floor"]
    print(
        "parsing alone, before any grouping or write, is "
        + ", ".join(f"{r[2].wall / r[3].wall:.2f}x" for r in floors)
        + " the bare scan (the count reads every token of a line but converts no value)"
    )


if __name__ == "__main__":
    main()
