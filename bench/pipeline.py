"""Pipeline throughput against the cheapest possible Spark pass over the same journals.

Generates (or reuses) a day of 1,000 brokers heartbeating every 30 s on two name servers
with ``pynamesrv.pipeline.generate``, then, in one Spark session:

1. the reference: a bare ``spark.read.json(paths).count()`` over the same files (schema
   inference plus a count: the floor for "read every line once");
2. the whole pipeline (``run_pipeline``: six Parquet tables and report.html).

Prints events per second for both and the ratio (target: the pipeline within 4x of the bare
scan), the per-stage timings, and with ``--check`` whether every table equals the
generator's ground truth.

    .venv/bin/python bench/pipeline.py [--brokers 1000 --hours 24 --instances 2]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson


def journal_glob(root: Path) -> str:
    """Both jobs read exactly these files (the root also holds ground_truth.json)."""
    return str(root / "*" / "events-*.jsonl")


def ensure_journals(root: Path, args: argparse.Namespace) -> tuple[Any, float | None]:
    """Reuse ``root`` when it was generated with the same parameters."""
    from pynamesrv.pipeline.generate import GroundTruth, generate

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


def warm_page_cache(root: Path) -> tuple[int, int]:
    """Read every file once so neither job pays for the disk alone; returns (bytes, lines)."""
    size = lines = 0
    for file in sorted(root.glob("*/events-*.jsonl")):
        with file.open("rb") as handle:
            while chunk := handle.read(1 << 22):
                size += len(chunk)
                lines += chunk.count(b"\n")
    return size, lines


def check(spark: Any, out: str, truth: Any) -> list[str]:
    """Names of the tables that differ from the ground truth (empty: all equal)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pipeline.journals import assert_same_rows
    from pynamesrv.pipeline.job import TABLES

    failed = []
    for name in TABLES:
        frame = spark.read.parquet(f"{out}/{name}")
        try:
            assert_same_rows(frame.collect(), truth.table(name), frame.columns)
        except AssertionError as exc:
            failed.append(name)
            print(f"  {name}: {str(exc)[:600]}")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "pynamesrv-bench")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--check", action="store_true", help="compare tables to ground truth")
    args = parser.parse_args()

    from pynamesrv.pipeline.job import run_pipeline, spark_session

    root = args.dir / f"b{args.brokers}-i{args.instances}-h{args.hours:g}-s{args.seed}"
    truth, generated_s = ensure_journals(root, args)
    size, lines = warm_page_cache(root)
    note = f"generated in {generated_s:.1f} s" if generated_s is not None else "reused"
    print(
        f"journals: {lines:,} lines, {size / 1e6:,.0f} MB, {args.instances} instance(s), "
        f"{args.brokers} brokers, {args.hours:g} h ({note}) in {root}"
    )

    spark = spark_session(args.master, app_name="pynamesrv-bench")
    cores = spark.sparkContext.defaultParallelism
    print(f"Spark {spark.version}, master {spark.sparkContext.master} ({cores} cores)")
    paths = [journal_glob(root)]

    start = time.perf_counter()
    bare_count = spark.read.json(paths).count()
    bare_s = time.perf_counter() - start
    print(f"bare spark.read.json().count(): {bare_count:,} lines in {bare_s:.1f} s "
          f"= {bare_count / bare_s:,.0f} events/s")  # fmt: skip

    out = str(args.dir / "out")
    shutil.rmtree(out, ignore_errors=True)

    def progress(stage: str, seconds: float, detail: str) -> None:
        print(f"  {stage:<22} {seconds:7.2f} s  {detail}")

    start = time.perf_counter()
    result = run_pipeline(spark, paths, out, progress=progress)
    pipeline_s = time.perf_counter() - start
    print(
        f"pipeline: {result.events:,} events in {pipeline_s:.1f} s "
        f"= {result.events / pipeline_s:,.0f} events/s"
    )
    ratio = pipeline_s / bare_s
    verdict = "within" if ratio <= 4.0 else "NOT within"
    print(f"ratio pipeline / bare scan: {ratio:.2f}x ({verdict} the 4x target)")
    if args.check:
        failed = check(spark, out, truth)
        print("ground truth: " + ("all six tables equal" if not failed else f"DIFFER: {failed}"))
    spark.stop()


if __name__ == "__main__":
    main()
