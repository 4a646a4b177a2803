"""The small day's pipeline run again and again in one Spark session: how much of a run over
little data is the JVM warming up, and what the job costs once nothing is cold.

``bench/pipeline.py`` shows a run over little data (the 40-broker day, an incremental hour)
spending many times its minimal job, about half of its CPU in the JIT compilers. This bench
separates the two causes. Each repeat publishes into a new output, so it is the whole job
again: what the JIT spends falls from repeat to repeat as the JVM has compiled Spark's code
paths and (where the generated source is the same) the job's classes, and the last repeats
show what the job's shape costs when almost nothing is cold. A target that the last repeat
misses is not missed for warm-up alone.

Reference: the minimal job over the same day (its files read with the journal schema and
written as Parquet), measured before the first repeat and again after the last, when the
JVM is as warm for it as for the job. On a local master only (the JIT and CPU figures are
the Spark JVM's, which runs the executors too there).

With ``--hour`` the run repeated is the incremental hour instead (an output published for
all hours but the last complete one, not timed, then each repeat adds that hour to a copy of
it), and the reference is the minimal job over that hour: what an hourly run's queries cost
with nothing cold, the part of a cron job's cold run that no cut of the JVM's start-up
removes. The setup run is the JVM's first, so the first repeat is already partly warm.

    .venv/bin/python bench/pipeline_warmup.py [--brokers 40] [--repeats 5] [--master local[2]]
        [--codegen-cache 100]   # Spark's default, to compare with the session pynamesrv launches
        [--hour]                # the incremental hour instead of the day
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _pipeline_bench() -> Any:
    """bench/pipeline.py, for its journals, clock and references (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("pipeline_bench", HERE / "pipeline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main() -> None:
    bench = _pipeline_bench()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=40)
    bench.add_journal_arguments(parser)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--codegen-cache",
        type=int,
        default=None,
        help="generated classes Spark keeps (default: what pynamesrv sets; Spark's own is 100)",
    )
    parser.add_argument(
        "--hour", action="store_true", help="repeat the incremental hour instead of the day"
    )
    args = parser.parse_args()
    if not args.master.startswith("local"):
        parser.error("the JIT and CPU figures are the Spark JVM's: a local master only")

    from pynamesrv.pipeline.job import run_pipeline, spark_session

    root = bench.journal_root(args, args.brokers)
    truth, _ = bench.ensure_journals(root, args, args.brokers)
    files = bench.journal_files(root)
    size, lines = bench.warm_page_cache(files)
    print(f"journal: {lines:,} lines, {size / 1e6:,.0f} MB, {args.brokers} brokers in {root}")

    spark = spark_session(
        args.master, app_name="pynamesrv-bench-warmup", codegen_cache=args.codegen_cache
    )
    cache = spark.conf.get("spark.sql.codegen.cache.maxEntries")
    print(f"Spark {spark.version}, {args.master}, a cache of {cache} generated classes")
    clock = bench.JvmClock(spark, bench.Counter(spark))
    work = args.dir / "warmup"
    shutil.rmtree(work, ignore_errors=True)
    heartbeat = truth.params["heartbeat_s"]
    journal, base, measured = root, None, files
    if args.hour:
        last, before, measured = bench.split_at_last_hour(files)
        journal, base = work / "journal", work / "base"
        bench.mirror(before, root, journal)
        print(f"setup: all hours before {last} (not timed)", flush=True)
        run_pipeline(spark, [str(journal)], str(base), heartbeat_interval_s=heartbeat)
        bench.mirror(measured, root, journal)
    first_ref = bench.minimal_job(clock, spark, measured, work / "minimal")
    when = "after the setup run" if args.hour else "first in the JVM"
    print(f"minimal job, {when}: {first_ref.wall:.2f} s{bench.cpu_text(first_ref)}")

    runs = []
    for repeat in range(1, args.repeats + 1):
        out = work / f"out-{repeat}"
        if base is not None:
            shutil.copytree(base, out, symlinks=True)
        _, cost = clock.measure(
            lambda out=out: run_pipeline(
                spark, [str(journal)], str(out), heartbeat_interval_s=heartbeat
            )
        )
        runs.append(cost)
        print(f"repeat {repeat}: {cost.wall:.1f} s{bench.cpu_text(cost)}; {cost.work}", flush=True)
    ref = bench.minimal_job(clock, spark, measured, work / "minimal")
    print(f"minimal job, after the repeats: {ref.wall:.2f} s{bench.cpu_text(ref)}")
    spark.stop()
    report(runs, ref, bench.TARGETS["incremental hour" if args.hour else "40-broker day"])


def report(runs: list[Any], ref: Any, target: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="the same job repeated in one JVM, next to its warm minimal job")
    for column in ("repeat", "wall", "x minimal job", "JVM CPU", "JIT", "JIT/CPU", "target"):
        table.add_column(column, justify="right")
    for repeat, cost in enumerate(runs, 1):
        ratio = cost.wall / ref.wall
        share = "" if cost.jit_share is None else f"{cost.jit_share:.0%}"
        table.add_row(
            str(repeat),
            f"{cost.wall:.1f} s",
            f"{ratio:.1f}x",
            "" if cost.cpu is None else f"{cost.cpu:.1f} s",
            "" if cost.jit is None else f"{cost.jit:.1f} s",
            share,
            f"{target:g}x " + ("ok" if ratio <= target else "missed"),
        )
    Console().print(table)
    last = runs[-1]
    print(
        f"warm-up is {runs[0].wall - last.wall:.1f} s of the first repeat's {runs[0].wall:.1f} s; "
        f"the last repeat still spends {last.wall - ref.wall:.1f} s beyond the minimal job, "
        f"{max(0.0, last.wall - target * ref.wall):.1f} s more than the target allows"
    )


if __name__ == "__main__":
    main()
