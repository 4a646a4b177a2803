"""Pipeline run time next to the cheapest Spark pass over the same journals, per master.

Generates (or reuses) a day of 1,000 brokers heartbeating every 30 s on two name servers
with ``pynamesrv.testing``. Then, on each master (``local[2]`` and a standalone
cluster of two 1-core workers started from the installed PySpark on 127.0.0.1), in one Spark
session per master:

1. full day: the reference, a bare ``spark.read.schema(JOURNAL_SCHEMA).json(files).count()``
   over every journal file, next to a first ``run_pipeline`` over the same files (parse,
   ingest, six tables, report, publish) into an empty output;
2. incremental hour: an output published for all hours but the last complete one, then the
   hour's files appear and a second run brings it up to date; next to it, the bare count of
   those files alone.

Prints both runs' stage timings and a table of pipeline / bare-scan ratios (target: the full
day within 2.5x), and with ``--check`` whether every published table equals the generator's
ground truth after the incremental run (and after the full-day run).

    .venv/bin/python bench/pipeline.py [--brokers 1000 --hours 24 --instances 2]
        [--masters local[2],standalone] [--check]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
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


def bare_scan(spark: Any, files: list[Path]) -> tuple[int, float]:
    from pynamesrv.pipeline.schema import JOURNAL_SCHEMA

    start = time.perf_counter()
    count = spark.read.schema(JOURNAL_SCHEMA).json([str(f) for f in files]).count()
    return count, time.perf_counter() - start


def mirror(files: list[Path], root: Path, target: Path) -> None:
    """Symbolic links to ``files`` under ``target``, in their instance directories."""
    for file in files:
        link = target / file.relative_to(root)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(file)


def bench_master(
    master: str, root: Path, truth: Any, work: Path, args: argparse.Namespace
) -> list[tuple[str, str, float, float, int]]:
    from pynamesrv.pipeline.job import run_pipeline, spark_session

    spark = spark_session(master, app_name="pynamesrv-bench")
    cores = spark.sparkContext.defaultParallelism
    print(f"\n== Spark {spark.version}, master {spark.sparkContext.master} ({cores} cores)")
    files = journal_files(root)
    heartbeat = truth.params["heartbeat_s"]

    def progress(stage: str, seconds: float, detail: str) -> None:
        print(f"    {stage:<22} {seconds:7.2f} s  {detail}")

    def run(journal: Path, out: Path) -> tuple[Any, float]:
        start = time.perf_counter()
        result = run_pipeline(
            spark, [str(journal)], str(out), heartbeat_interval_s=heartbeat, progress=progress
        )
        return result, time.perf_counter() - start

    bare_scan(spark, files)  # warm the JVM (JIT) the same way for both measurements
    rows = []

    # 1. full day
    count, bare_s = bare_scan(spark, files)
    print(f"  bare scan: {count:,} lines in {bare_s:.1f} s")
    full_out = work / "full"
    shutil.rmtree(full_out, ignore_errors=True)
    print("  full day:")
    result, full_s = run(root, full_out)
    rows.append((master, "full day", full_s, bare_s, result.events))
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
    count, bare_hour_s = bare_scan(spark, added)
    print(f"  bare scan of {last_full}: {count:,} lines in {bare_hour_s:.2f} s")
    print(f"  incremental hour ({last_full}):")
    result, hour_s = run(journal, inc_out)
    rows.append((master, "incremental hour", hour_s, bare_hour_s, count))
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

    print(f"\n{'master':<26} {'run':<17} {'pipeline':>9} {'bare scan':>10} {'ratio':>7}")
    for master, run, pipeline_s, bare_s, events in rows:
        print(
            f"{master:<26} {run:<17} {pipeline_s:8.1f}s {bare_s:9.2f}s {pipeline_s / bare_s:6.2f}x"
            f"   ({events:,} lines)"
        )
    full = [r for r in rows if r[1] == "full day"]
    worst = max(r[2] / r[3] for r in full)
    verdict = "yes" if worst <= 2.5 else "NO"
    print(f"full day within 2.5x of the bare scan on every master: {verdict}")


if __name__ == "__main__":
    main()
