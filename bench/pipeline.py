"""Pipeline runs next to the least Spark work over the same data, per master.

Generates (or reuses) a day of 1,000 brokers heartbeating every 30 s on two name servers,
and a day of 40 brokers, with ``pynamesrv.testing``. Then, on each master (``local[2]`` and
a standalone cluster of two 1-core workers started from the installed PySpark on
127.0.0.1), in one Spark session per master, each run next to its reference:

1. full day (1,000 brokers, first run into an empty output) vs the **parse floor**: the
   journal parsed by the store's reader into a sink that writes nothing, what ingestion
   cannot go below (target 2.5x); the bare ``count()`` is printed too, as issue 16 did;
2. incremental hour (an output published for all hours but the last complete one, then
   that hour's files appear) vs a **minimal job over that hour**: its files read with the
   journal schema and written as Parquet, the least any run over new data does (target 4x);
3. a 40-broker day (almost nothing but fixed cost) vs the same minimal job over that day
   (target 4x);
4. ``routes-at`` for one topic at the middle of the last complete hour vs a **minimal read**
   of the hour files it needs (the hour of T and the one before, per instance; target 2x).

Issue 34's figures come after those: the marginal cost per million lines (full day minus the
small day, divided by the lines between them) next to the parse floor's own, both measured
after one untimed run of the small day has warmed the job's code up; and what a cron job pays
(``bench_cold``): new processes, start to exit, over an incremental hour of each day (the
small day's shows what a cold run costs whatever the data), the small day, a bare session,
a minimal run over the hour (what Spark puts under any plan: the hour written as Parquet, six
one-aggregation tables, one query over them), and ``routes-at`` with and without Spark; then,
in one more new process, where a cold incremental hour spends per stage (``profile_cold_run``).

For every run it counts the Spark jobs, stages and SQL queries (actions) it started, per
stage of the run, from the driver's status store, and the classes Spark generated and
compiled for them (``Counter``): the bench may reach into the driver
(``sparkContext``, py4j), the job itself never does. Job counts are deterministic; times
vary 2x on a shared machine, so on a local master it also prints the CPU time of the Spark
JVM (driver and executors are one process there) and how much of it the JIT compilers spent
(about half of a run over little data: each query's generated classes start cold).
``BEFORE`` holds the counts of the job as issue 16 left it (commit 7886155), measured the
same way. Where a target is missed, the table shows what the run spends beyond its reference,
the floor its queries put under it, and its stages at the cost of an empty further stage. With
``--check`` whether every published table equals the generator's ground truth.

    .venv/bin/python bench/pipeline.py [--brokers 1000 --hours 24 --instances 2]
        [--small-brokers 40] [--masters local[2],standalone] [--check]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

TESTS = Path(__file__).resolve().parents[1] / "tests"


def ensure_journals(root: Path, args: argparse.Namespace, brokers: int) -> tuple[Any, float | None]:
    """Reuse ``root`` when it was generated with the same parameters."""
    from pynamesrv.testing import GroundTruth, generate

    wanted = {
        "brokers": brokers,
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
    from pynamesrv.pipeline.tables import current_tables

    failed = []
    tables = current_tables(spark, str(out))
    for name in TABLES:
        frame = tables[name]
        try:
            assert_same_rows(frame.collect(), truth.table(name), COLUMNS[name])
        except AssertionError as exc:
            failed.append(name)
            print(f"  {name}: {str(exc)[:600]}")
    return failed


# Spark jobs / SQL queries per run of the job as issue 16 left it (commit 7886155, local[2],
# counted like ``Counter`` does): a 40-broker day, an incremental hour, routes-at. A full
# day of 1,000 brokers starts as many queries as the 40-broker day (the plan does not depend
# on the data) and about as many jobs (adaptive execution may split a shuffle differently).
BEFORE: dict[str, tuple[int, int]] = {
    "40-broker day": (154, 40),
    "incremental hour": (174, 42),
    "routes-at": (6, 3),
}
TARGETS = {"full day": 2.5, "incremental hour": 4.0, "40-broker day": 4.0, "routes-at": 2.0}
SMALL_FLOOR = "(parse floor, small day)"
# Issue 34's targets: a year of journals costs at most 3x the parse floor per line beyond a
# day's fixed cost; a cron job's cold incremental hour at most 15 s; routes-at cold in 2 s.
MARGINAL_TARGET = 3.0
COLD_HOUR_TARGET_S = 15.0
COLD_ROUTES_AT_TARGET_S = 2.0
SMALL_HOUR = "incremental hour, small day"
MINIMAL_RUN = "floor: minimal run over the hour"


@dataclass(frozen=True)
class Work:
    """What a piece of work started on Spark."""

    jobs: int
    stages: int
    queries: int
    classes: int = 0  # generated classes the driver's JVM compiled (Janino)

    def __str__(self) -> str:
        return (
            f"{self.jobs} jobs, {self.stages} stages, {self.queries} queries, "
            f"{self.classes} classes"
        )


Mark = tuple[set[int], int, int]  # job ids, queries, generated classes compiled
ClockMark = tuple[Mark, float | None, float | None, float]  # work, CPU, JIT, wall clock


class Counter:
    """Spark jobs, their stages and SQL queries started since a ``mark``, from the driver's
    status store (after the listener bus has delivered every event), and the classes Spark
    generated and compiled for them in the driver's JVM (``CodegenMetrics``; on a local
    master the executors' too). A class is compiled once per JVM and source text, so a warm
    session counts what a run's queries brought that no earlier one had (their literals
    among it); a cold process compiles every class its plan needs, about 600 for an
    incremental hour, and the classes stand for Spark's own code paths that run cold too."""

    def __init__(self, spark: Any) -> None:
        self._context = spark.sparkContext
        self._tracker = self._context.statusTracker()
        self._sql = spark._jsparkSession.sharedState().statusStore()
        codegen = self._context._jvm.org.apache.spark.metrics.source.CodegenMetrics
        self._compiled = codegen.METRIC_COMPILATION_TIME()

    def mark(self) -> Mark:
        self._context._jsc.sc().listenerBus().waitUntilEmpty()
        return (
            set(self._tracker.getJobIdsForGroup(None)),
            int(self._sql.executionsCount()),
            int(self._compiled.getCount()),
        )

    def since(self, mark: Mark) -> Work:
        jobs, queries, classes = self.mark()
        new = jobs - mark[0]
        stages: set[int] = set()
        for job in new:
            info = self._tracker.getJobInfo(job)
            if info is not None:
                stages.update(info.stageIds)
        return Work(len(new), len(stages), queries - mark[1], classes - mark[2])


@dataclass(frozen=True)
class Cost:
    """Wall seconds, CPU seconds of the Spark JVM and the part of them its JIT compilers spent
    (None where they cannot be read), and the Spark work started."""

    wall: float
    cpu: float | None
    work: Work
    jit: float | None = None

    @property
    def jit_share(self) -> float | None:
        """The JIT compilers' part of the JVM's CPU (None where either is not read)."""
        return None if self.jit is None or not self.cpu else self.jit / self.cpu


class JvmClock:
    """Wall time, the Spark JVM's CPU time (Linux ``/proc``) and its JIT compilers' time (the
    JVM's compilation bean). On a local master that JVM runs the executors too; on a cluster
    it is the driver only, so neither is reported.

    The JIT share is why a run over little data is not cheap: every query brings classes
    Spark generated for it, and Spark's own code paths for its plan shape, which the JVM
    compiles again before they run fast (on the 40-broker day, about half the JVM's CPU)."""

    def __init__(self, spark: Any, counter: Counter) -> None:
        jvm = spark.sparkContext._jvm
        pid = int(jvm.java.lang.ProcessHandle.current().pid())
        local = spark.sparkContext.master.startswith("local")
        self._stat = Path(f"/proc/{pid}/stat") if local else None
        self._compiler = jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.counter = counter

    def jit(self) -> float | None:
        """Seconds the JIT compilers have spent since the JVM started (local master only)."""
        if self._stat is None or self._compiler is None:
            return None
        return int(self._compiler.getTotalCompilationTime()) / 1000

    def cpu(self) -> float | None:
        if self._stat is None or not self._stat.exists():
            return None
        fields = self._stat.read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime

    def mark(self) -> ClockMark:
        return self.counter.mark(), self.cpu(), self.jit(), time.perf_counter()

    def since(self, mark: ClockMark) -> Cost:
        work, cpu, jit, start = mark
        wall, after, jit_after = time.perf_counter() - start, self.cpu(), self.jit()
        spent = None if cpu is None or after is None else after - cpu
        compiling = None if jit is None or jit_after is None else jit_after - jit
        return Cost(wall, spent, self.counter.since(work), compiling)

    def measure(self, action: Any) -> tuple[Any, Cost]:
        mark = self.mark()
        value = action()
        return value, self.since(mark)


class StageLog:
    """A run's ``progress``: prints each stage as it ends, with the Spark work it started and,
    on a local master, the JVM CPU and JIT compiling it took."""

    def __init__(self, clock: JvmClock) -> None:
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        """Count from here (the start of a run)."""
        self._mark = self.clock.mark()

    def __call__(self, stage: str, seconds: float, detail: str) -> None:
        cost = self.clock.since(self._mark)
        jvm = ""
        if cost.cpu is not None and cost.jit is not None:
            jvm = f"{cost.cpu:5.1f} s CPU ({cost.jit:4.1f} s JIT)  "
        print(f"    {stage:<22} {seconds:7.2f} s  {jvm}{cost.work!s:<50} {detail}", flush=True)
        self.reset()


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
    return clock.measure(lambda: written_nowhere(kept))[1]


def minimal_job(clock: JvmClock, spark: Any, files: list[Path], target: Path) -> Cost:
    """The least a run over new data does: its files read with the journal schema and
    written as Parquet."""
    from pynamesrv.pipeline.schema import JOURNAL_SCHEMA

    frame = spark.read.schema(JOURNAL_SCHEMA).json([str(f) for f in files])
    return clock.measure(lambda: frame.write.mode("overwrite").parquet(str(target)))[1]


def minimal_read(clock: JvmClock, spark: Any, files: list[Path]) -> Cost:
    """The least a question about some hour files does: read them, keep nothing."""
    from pynamesrv.pipeline.schema import JOURNAL_SCHEMA

    frame = spark.read.schema(JOURNAL_SCHEMA).json([str(f) for f in files])
    return clock.measure(lambda: written_nowhere(frame))[1]


def written_nowhere(frame: Any) -> float:
    """Seconds ``frame`` takes to run into a sink that writes nothing."""
    start = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def query_floor(spark: Any) -> float:
    """Seconds the smallest query takes on this master (one row, written nowhere; median of
    five): what each query of a run costs before it reads any data."""
    return sorted(written_nowhere(spark.range(1)) for _ in range(5))[2]


def stage_cost(spark: Any) -> float:
    """Seconds each further stage adds to the smallest query: one row through four shuffles
    against none (median of five). Under adaptive execution each stage is a job of its own;
    what a run's shape costs per stage before it reads any data."""

    def once(shuffles: int) -> float:
        frame = spark.range(0, 1, 1, 1)
        for partitions in range(2, 2 + shuffles):
            frame = frame.repartition(partitions)
        return written_nowhere(frame)

    samples = sorted((once(4) - once(0)) / 4 for _ in range(5))
    return max(0.0, samples[2])


def cpu_text(cost: Cost) -> str:
    if cost.cpu is None:
        return ""
    jit = "" if cost.jit is None else f" ({cost.jit:.1f} s of it JIT compiling)"
    return f", {cost.cpu:.1f} s CPU{jit}"


def split_at_last_hour(files: list[Path]) -> tuple[str, list[Path], list[Path]]:
    """An incremental hour's setup: the file name of the last complete hour (the last one is
    the partial hour the generator stopped in), the files before it (published first, not
    timed) and its own files (the hour the run adds)."""
    last = sorted({f.name for f in files})[-2]
    return last, [f for f in files if f.name < last], [f for f in files if f.name == last]


def mirror(files: list[Path], root: Path, target: Path) -> None:
    """Symbolic links to ``files`` under ``target``, in their instance directories."""
    for file in files:
        link = target / file.relative_to(root)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(file)


@dataclass(frozen=True)
class Row:
    """One run next to its reference."""

    master: str
    run: str
    cost: Cost
    reference: str
    ref: Cost
    per_query: float = 0.0
    per_stage: float = 0.0

    @property
    def floor(self) -> float:
        """The reference plus the smallest query once per query the run starts beyond the
        reference's one: what the run cannot go below with as many queries."""
        return self.ref.wall + max(0, self.cost.work.queries - 1) * self.per_query

    @property
    def shape(self) -> float:
        """Seconds the run's stages cost before any data: each stage beyond the reference's
        one at the measured cost of a further stage."""
        return max(0, self.cost.work.stages - 1) * self.per_stage


def bench_master(
    master: str,
    journals: list[tuple[Path, Any]],
    work: Path,
    args: argparse.Namespace,
) -> list[Row]:
    from pynamesrv.pipeline.job import run_pipeline, spark_session
    from pynamesrv.pipeline.store import hour_of_name
    from pynamesrv.pipeline.timetravel import describe, registries_at, route_bodies

    spark = spark_session(master, app_name="pynamesrv-bench")
    counter = Counter(spark)
    clock = JvmClock(spark, counter)
    cores = spark.sparkContext.defaultParallelism
    print(f"\n== Spark {spark.version}, master {spark.sparkContext.master} ({cores} cores)")
    (root, truth), (small_root, _) = journals
    files = journal_files(root)
    heartbeat = truth.params["heartbeat_s"]

    progress = StageLog(clock)

    def run(journal: Path, out: Path) -> tuple[Any, Cost]:
        progress.reset()
        return clock.measure(
            lambda: run_pipeline(
                spark, [str(journal)], str(out), heartbeat_interval_s=heartbeat, progress=progress
            )
        )

    def done(name: str, cost: Cost) -> None:
        print(f"  {name}: {cost.wall:.1f} s{cpu_text(cost)}; {cost.work}")

    bare_scan(clock, spark, files)  # warm the JVM (JIT) the same way for every measurement
    rows = []
    per_query = query_floor(spark)
    per_stage = stage_cost(spark)
    print(
        f"  smallest query: {per_query * 1000:.0f} ms; a further stage: {per_stage * 1000:.0f} ms"
    )

    # The pipeline's own code warmed up once (not timed): the full day below is the session's
    # first run otherwise, and the JIT's one-time work on the job's queries (~13 s: the small
    # day's first run in a session against its later ones) would count as cost per line.
    warm_out = work / "warm-up"
    shutil.rmtree(warm_out, ignore_errors=True)
    print(f"  warm-up: the {args.small_brokers}-broker day once (not timed)")
    run(small_root, warm_out)

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
    _, full = run(root, full_out)
    done("full day", full)
    rows.append(Row(master, "full day", full, "parse floor", floor))
    rows.append(Row(master, "(parse floor)", floor, "bare count", bare))
    if args.check:
        failed = check(spark, full_out, truth)
        print("  ground truth: " + ("all six tables equal" if not failed else f"DIFFER {failed}"))

    # 2. incremental hour: everything but the last complete hour, then that hour
    hours = sorted({f.name for f in files})
    last_full, before, added = split_at_last_hour(files)
    journal = work / "journal"
    shutil.rmtree(journal, ignore_errors=True)
    mirror(before, root, journal)
    inc_out = work / "incremental"
    shutil.rmtree(inc_out, ignore_errors=True)
    print(f"  setup: all hours before {last_full} (not timed):")
    run(journal, inc_out)
    mirror(added, root, journal)
    hour_ref = minimal_job(clock, spark, added, work / "minimal-hour")
    print(f"  minimal job over {last_full} (read, write Parquet): {hour_ref.wall:.2f} s")
    print(f"  incremental hour ({last_full}):")
    _, hour = run(journal, inc_out)
    done("incremental hour", hour)
    rows.append(Row(master, "incremental hour", hour, "minimal job", hour_ref))
    if args.check:
        mirror([f for f in files if f.name > last_full], root, journal)
        run(journal, inc_out)
        failed = check(spark, inc_out, truth)
        print(
            "  ground truth after the last hour too: "
            + ("all six tables equal" if not failed else f"DIFFER {failed}")
        )

    # 3. a small day: nothing but fixed cost
    small_files = journal_files(small_root)
    small_ref = minimal_job(clock, spark, small_files, work / "minimal-small")
    print(f"  minimal job over the {args.small_brokers}-broker day: {small_ref.wall:.2f} s")
    small_out = work / "small"
    shutil.rmtree(small_out, ignore_errors=True)
    print(f"  {args.small_brokers}-broker day:")
    _, small = run(small_root, small_out)
    done(f"{args.small_brokers}-broker day", small)
    rows.append(Row(master, f"{args.small_brokers}-broker day", small, "minimal job", small_ref))
    small_floor = parse_floor(clock, spark, small_files)
    print(f"  parse floor over the {args.small_brokers}-broker day: {small_floor.wall:.1f} s")
    rows.append(Row(master, SMALL_FLOOR, small_floor, "bare count", small_floor))

    # 4. routes-at for one topic, in the middle of the last complete hour
    at = hour_of_name(last_full) + 1_800_000  # type: ignore[operator]
    topic = truth.table("topic_distribution")[0]["topic"]
    needed = [f for f in files if f.name in hours[-3:-1]]  # the hour of T and the one before
    read_ref = minimal_read(clock, spark, needed)
    print(f"  minimal read of the {len(needed)} hour files routes-at needs: {read_ref.wall:.2f} s")
    answer, lookup = clock.measure(
        lambda: describe(
            {ns: route_bodies(r) for ns, r in registries_at(spark, [str(root)], at).items()},
            at,
            topic,
        )
    )
    found = sum(len(entry["topics"]) for entry in answer.values())
    done(f"routes-at {topic} ({found} route(s))", lookup)
    rows.append(Row(master, "routes-at", lookup, "minimal read", read_ref))
    spark.stop()
    return [replace(r, per_query=per_query, per_stage=per_stage) for r in rows]


def add_journal_arguments(parser: argparse.ArgumentParser) -> None:
    """The generated journals' parameters and where they are kept (``journal_root``): one set,
    so that every pipeline bench finds the same journals under the same options."""
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "pynamesrv-bench")


def journal_root(args: argparse.Namespace, brokers: int) -> Path:
    return args.dir / f"b{brokers}-i{args.instances}-h{args.hours:g}-s{args.seed}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--small-brokers", type=int, default=40)
    add_journal_arguments(parser)
    parser.add_argument("--masters", default="local[2],standalone")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="compare tables to ground truth")
    parser.add_argument(
        "--cold-repeat", type=int, default=3, help="new processes per cold row (median; 0: none)"
    )
    parser.add_argument(
        "--profile-cold-run",
        nargs=3,
        metavar=("JOURNAL", "OUT", "HEARTBEAT_S"),
        help=argparse.SUPPRESS,  # bench_cold runs it: one run in a new process (profile_cold_run)
    )
    args = parser.parse_args()
    if args.profile_cold_run is not None:
        journal, out, heartbeat_s = args.profile_cold_run
        profile_cold_run(journal, out, float(heartbeat_s))
        return

    journals = []
    lines_of: dict[int, int] = {}
    for brokers in (args.brokers, args.small_brokers):
        root = journal_root(args, brokers)
        truth, generated_s = ensure_journals(root, args, brokers)
        size, lines = warm_page_cache(journal_files(root))
        lines_of[brokers] = lines
        note = f"generated in {generated_s:.1f} s" if generated_s is not None else "reused"
        print(
            f"journals: {lines:,} lines, {size / 1e6:,.0f} MB, {args.instances} instance(s), "
            f"{brokers} brokers, {args.hours:g} h ({note}) in {root}"
        )
        journals.append((root, truth))
    rows: list[Row] = []
    for master in [m for m in args.masters.split(",") if m not in ("", "none")]:
        with ExitStack() as stack:
            if master == "standalone":
                sys.path.insert(0, str(TESTS))
                from pipeline.standalone import StandaloneCluster  # type: ignore[import-not-found]

                cluster = stack.enter_context(
                    StandaloneCluster(args.dir / "cluster", workers=args.workers)
                )
                master = cluster.url
            rows += bench_master(master, journals, args.dir / "out", args)
    cold = [] if args.cold_repeat == 0 else bench_cold(journals, args.dir / "cold", args)
    report(rows)
    report_marginal(rows, lines_of[args.brokers] - lines_of[args.small_brokers], args)
    report_cold(cold, rows)


# ---------------------------------------------------------------------------- cold runs

FLOOR_SCRIPT = """
from pynamesrv.pipeline.classcache import class_archive
from pynamesrv.pipeline.job import spark_session
spark = spark_session("local[2]", app_name="pynamesrv-floor", class_archive=class_archive())
spark.range(1).count()
spark.stop()
"""
# The least any cold run over an hour does that publishes six tables and a report, whatever
# its plan: a new session as `pipeline run` starts it for a small run, the hour's files read
# with the journal schema and written as Parquet, six tables of one aggregation each written
# partitioned by day, and one query over the six. argv: a scratch directory, the hour files.
MINIMAL_RUN_SCRIPT = """
import sys
from pyspark.sql import functions as F
from pynamesrv.pipeline.classcache import class_archive
from pynamesrv.pipeline.job import job_conf, spark_session
from pynamesrv.pipeline.schema import JOURNAL_SCHEMA
out, files = sys.argv[1], sys.argv[2:]
spark = spark_session(
    "local[2]", app_name="pynamesrv-floor", class_archive=class_archive(), small_run=True
)
with job_conf(spark):
    spark.read.schema(JOURNAL_SCHEMA).json(files).write.mode("overwrite").parquet(out + "/hour")
    rows = spark.read.parquet(out + "/hour")
    day = F.to_date(F.timestamp_millis("ts")).alias("day")
    tables = [f"{out}/table{i}" for i in range(6)]
    for table in tables:
        counted = rows.groupBy("ns", "broker_addr", day).agg(F.count(F.lit(1)).alias("n"))
        counted.write.mode("overwrite").partitionBy("day").parquet(table)
    report = spark.read.parquet(tables[0]).agg(F.sum("n"))
    for table in tables[1:]:
        report = report.crossJoin(spark.read.parquet(table).agg(F.sum("n")))
    report.first()
spark.stop()
"""
# What each cold variant switches off: the class archive (classcache), C1 alone for a small
# run (job.SMALL_RUN_JIT), both (the job as it was before issue 34).
VARIANTS: dict[str, dict[str, str]] = {
    "as shipped": {},
    "no archive": {"PYNAMESRV_CLASS_ARCHIVE": "off"},
    "C2 JIT": {"PYNAMESRV_SMALL_RUN_BYTES": "0"},
    "neither": {"PYNAMESRV_CLASS_ARCHIVE": "off", "PYNAMESRV_SMALL_RUN_BYTES": "0"},
}


@dataclass(frozen=True)
class ColdRow:
    """Seconds from process start to exit, per variant (median of the repeats)."""

    run: str
    seconds: dict[str, float]
    note: str = ""


def timed(command: list[str], env: dict[str, str]) -> float:
    """Seconds from starting ``command`` to its exit (it must succeed)."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):  # routes-at exits 1 for a topic without a route
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr.decode()[-2000:]}")
    return seconds


def bench_cold(
    journals: list[tuple[Path, Any]], work: Path, args: argparse.Namespace
) -> list[ColdRow]:
    """New processes, start to exit, as cron starts them: ``pipeline run`` over an incremental
    hour and over the small day, the floors (a bare session and one count; a minimal run over
    the hour, ``MINIMAL_RUN_SCRIPT``), ``routes-at`` with and without Spark; each variant of
    the cold-start levers, ``--cold-repeat`` times interleaved (medians: the machine is
    shared). Then the incremental hour once more, profiled per stage (``profile_cold_run``)."""
    from pynamesrv.pipeline.store import hour_of_name

    (root, truth), (small_root, _) = journals
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "PYNAMESRV_CACHE_DIR": str(work / "cache")}
    heartbeat = f"{truth.params['heartbeat_s']:g}"
    cli = [sys.executable, "-m", "pynamesrv", "pipeline"]

    def run(journal: Path, out: Path) -> list[str]:
        return [*cli, "run", "--journal", str(journal), "--out", str(out),
                "--master", "local[2]", "--heartbeat-interval", heartbeat]  # fmt: skip

    print(f"\n== cold: new processes, start to exit, local[2], median of {args.cold_repeat}")
    first = timed(run(small_root, work / "first"), env)
    print(f"  the first run writes the class archive: {first:.1f} s (once)")

    def before_last_hour(journals: Path, name: str) -> tuple[Path, Path, str, list[Path]]:
        """A journal directory holding ``journals`` but the last complete hour, an output
        published over it, then that hour's files added: (journal, base output, hour, the
        hour's files)."""
        last_full, before, added = split_at_last_hour(journal_files(journals))
        journal, base = work / f"journal-{name}", work / f"base-{name}"
        mirror(before, journals, journal)
        timed(run(journal, base), env)  # everything before the hour, not timed
        mirror(added, journals, journal)
        return journal, base, last_full, added

    journal, base, last_full, hour_files = before_last_hour(root, "day")
    # The same run over the small day: what a cold incremental run costs whatever the data.
    small_journal, small_base, _, _ = before_last_hour(small_root, "small")
    minimal_run = [sys.executable, "-c", MINIMAL_RUN_SCRIPT, str(work / "minimal"),
                   *map(str, hour_files)]  # fmt: skip
    at = hour_of_name(last_full) + 1_800_000  # type: ignore[operator]
    topic = truth.table("topic_distribution")[0]["topic"]
    routes_at = [*cli, "routes-at", "--journal", str(root), "--time", str(at), "--topic", topic]

    def copy_of(base: Path) -> Path:
        """A new copy of ``base`` for one run over the hour to publish into."""
        out = work / "hour"
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out, symlinks=True)
        return out

    def next_hour(journal: Path, base: Path, venv: dict[str, str]) -> float:
        """A cold run over the hour added to ``journal``, from a copy of ``base``."""
        return timed(run(journal, copy_of(base)), venv)

    samples: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.cold_repeat):
        for variant, switches in VARIANTS.items():
            venv = {**env, **switches}
            samples.setdefault(("incremental hour", variant), []).append(
                next_hour(journal, base, venv)
            )
            if variant == "as shipped":
                samples.setdefault((SMALL_HOUR, variant), []).append(
                    next_hour(small_journal, small_base, venv)
                )
                samples.setdefault((MINIMAL_RUN, variant), []).append(timed(minimal_run, venv))
            out = work / "small"
            shutil.rmtree(out, ignore_errors=True)
            samples.setdefault((f"{args.small_brokers}-broker day", variant), []).append(
                timed(run(small_root, out), venv)
            )
            if variant in ("as shipped", "no archive"):
                samples.setdefault(("floor: session + count()", variant), []).append(
                    timed([sys.executable, "-c", FLOOR_SCRIPT], venv)
                )
        samples.setdefault(("routes-at, no Spark", "as shipped"), []).append(timed(routes_at, env))
        samples.setdefault(("routes-at, Spark", "as shipped"), []).append(
            timed([*routes_at, "--master", "local[2]"], env)
        )
        samples.setdefault(("routes-at, Spark", "no archive"), []).append(
            timed([*routes_at, "--master", "local[2]"], {**env, **VARIANTS["no archive"]})
        )
        print(f"  repeat {repeat + 1} of {args.cold_repeat} done")
    print("  where a cold incremental hour spends, per stage (one more new process, not timed):")
    profile = [sys.executable, __file__, "--profile-cold-run", str(journal), str(copy_of(base)),
               heartbeat]  # fmt: skip
    subprocess.run(profile, env=env, check=True)
    rows: dict[str, dict[str, float]] = {}
    for (name, variant), values in samples.items():
        rows.setdefault(name, {})[variant] = statistics.median(values)
    return [ColdRow(name, seconds) for name, seconds in rows.items()] + [
        ColdRow("archive written (first run, once)", {"as shipped": first})
    ]


def profile_cold_run(journal: str, out: str, heartbeat_s: float) -> None:
    """One run over ``journal`` into ``out`` in this new process, its session started as
    ``pipeline run`` starts it (class archive; C1 alone for a small run): per stage, the JVM
    CPU, JIT compiling and generated classes a cold JVM spends on it. The counters' own
    calls add a little time to each stage."""
    from pynamesrv.pipeline.classcache import class_archive
    from pynamesrv.pipeline.job import is_small_run, run_pipeline, spark_session

    small = is_small_run([journal], out)
    spark = spark_session(
        "local[2]", app_name="pynamesrv-pipeline", class_archive=class_archive(), small_run=small
    )
    clock = JvmClock(spark, Counter(spark))
    progress = StageLog(clock)
    _, cost = clock.measure(
        lambda: run_pipeline(
            spark, [journal], out, heartbeat_interval_s=heartbeat_s, progress=progress
        )
    )
    print(f"  the run: {cost.wall:.1f} s{cpu_text(cost)}; {cost.work}", flush=True)
    spark.stop()


def report_cold(cold: list[ColdRow], rows: list[Row]) -> None:
    if not cold:
        return
    warm = {r.run: r.cost.wall for r in rows if r.master.startswith("local")}
    names = list(VARIANTS)
    print(
        "\nWhat a cron job pays (a new process, start to exit; local[2]; median), per variant"
        " of the cold-start levers (class archive, C1 alone for a small run), next to the"
        " warm-session run:"
    )
    print(f"  {'run':<36}" + "".join(f"{n:>12}" for n in names) + f"{'warm':>10}")
    for row in cold:
        cells = "".join(
            f"{row.seconds[n]:11.1f}s" if n in row.seconds else f"{'':>12}" for n in names
        )
        key = row.run if row.run in warm else ""
        print(f"  {row.run:<36}{cells}" + (f"{warm[key]:9.1f}s" if key else ""))
    by_run = {r.run: r.seconds for r in cold}
    hour = by_run.get("incremental hour", {}).get("as shipped")
    floor = by_run.get("floor: session + count()", {}).get("as shipped")
    fixed = by_run.get(SMALL_HOUR, {}).get("as shipped")
    if hour is not None and floor is not None and fixed is not None:
        verdict = "ok" if hour <= COLD_HOUR_TARGET_S else "MISSED"
        print(
            f"  cold incremental hour {hour:.1f} s (target {COLD_HOUR_TARGET_S:g} s on a quiet "
            f"machine: {verdict}); the same run over the small day {fixed:.1f} s (what the"
            f" run's queries cost a new JVM whatever the data); a bare session and one count"
            f" {floor:.1f} s"
        )
    minimal = by_run.get(MINIMAL_RUN, {}).get("as shipped")
    if hour is not None and minimal is not None:
        print(
            f"  a minimal run over the same hour (session, the hour written as Parquet, six"
            f" one-aggregation tables, one query over them) {minimal:.1f} s: what Spark puts"
            f" under any cold hour; the other {hour - minimal:.1f} s are this job's plan"
        )
    local = by_run.get("routes-at, no Spark", {}).get("as shipped")
    if local is not None:
        verdict = "ok" if local <= COLD_ROUTES_AT_TARGET_S else "MISSED"
        print(f"  routes-at cold without Spark {local:.2f} s (target 2 s: {verdict})")


def report_marginal(rows: list[Row], lines: int, args: argparse.Namespace) -> None:
    """What a year of journals pays: the full day minus the small day per million lines
    between them, next to the parse floor's own."""
    print(
        f"\nMarginal cost per million lines (full day - {args.small_brokers}-broker day, "
        f"{lines / 1e6:.2f} M lines between them), next to the parse floor's:"
    )
    small_name = f"{args.small_brokers}-broker day"
    for master in dict.fromkeys(r.master for r in rows):
        of = {r.run: r.cost for r in rows if r.master == master}
        if not {"full day", small_name, "(parse floor)", SMALL_FLOOR} <= set(of):
            continue
        job = (of["full day"].wall - of[small_name].wall) / lines * 1e6
        floor = (of["(parse floor)"].wall - of[SMALL_FLOOR].wall) / lines * 1e6
        ratio = job / floor if floor > 0 else float("inf")
        verdict = "ok" if ratio <= MARGINAL_TARGET else "MISSED"
        cpu = ""
        if of["full day"].cpu and of[small_name].cpu and of["(parse floor)"].cpu:
            job_cpu = (of["full day"].cpu - of[small_name].cpu) / lines * 1e6
            floor_cpu = (of["(parse floor)"].cpu - (of[SMALL_FLOOR].cpu or 0)) / lines * 1e6
            cpu = f"; CPU {job_cpu:.2f} s vs {floor_cpu:.2f} s = {job_cpu / floor_cpu:.2f}x"
        print(
            f"  {master:<26} job {job:.2f} s, parse floor {floor:.2f} s = {ratio:.2f}x "
            f"(target {MARGINAL_TARGET:g}x: {verdict}){cpu}"
        )


def report(rows: list[Row]) -> None:
    print(
        "\nWarm session (issue 25's ratio targets, retired by issue 34: kept as reference)"
        f"\n{'master':<26} {'run':<17} {'pipeline':>9} {'reference':>22} {'ratio':>7}"
        f" {'CPU ratio':>10} {'JIT/CPU':>8} {'target':>7}  {'jobs':>5} {'queries':>7}"
    )
    for row in rows:
        cost, ref = row.cost, row.ref
        cpu_ratio = f"{cost.cpu / ref.cpu:9.2f}x" if cost.cpu and ref.cpu else f"{'n/a':>10}"
        jit = f"{'n/a':>7}" if cost.jit_share is None else f"{cost.jit_share:7.0%}"
        target = _target(row)
        verdict = "" if target is None else ("ok" if cost.wall / ref.wall <= target else "MISSED")
        target_text = f"{target:g}x" if target else ""
        print(
            f"{row.master:<26} {row.run:<17} {cost.wall:8.1f}s {row.reference:>12}"
            f" {ref.wall:8.2f}s {cost.wall / ref.wall:6.2f}x {cpu_ratio} {jit:>8} {target_text:>7}"
            f"  {cost.work.jobs:>5} {cost.work.queries:>7}  {verdict}"
        )
    print("\nSpark jobs / SQL queries per run, before (commit 7886155) and now:")
    for run, (jobs, queries) in BEFORE.items():
        now = [r for r in rows if r.run == run]
        after = ", ".join(f"{r.cost.work.jobs} / {r.cost.work.queries}" for r in now) or "-"
        print(f"  {run:<17} before {jobs} / {queries}, now {after}")
    print(
        "\nWhere a run's queries alone put its target out of reach: the reference plus one "
        "smallest query (measured per master) for each further query the run starts."
    )
    for row in rows:
        target = _target(row)
        if target is None:
            continue
        print(
            f"  {row.master:<26} {row.run:<17} {row.cost.work.queries:>3} queries x "
            f"{row.per_query * 1000:.0f} ms + {row.ref.wall:.2f} s = floor {row.floor:.2f} s "
            f"= {row.floor / row.ref.wall:.2f}x its reference (target {target:g}x)"
        )

    print(
        "\nWhat the job's shape costs before any data: its stages (each a job under adaptive "
        "execution) at the measured cost of a further stage, next to the run's time left over "
        "its reference. Where the stages alone exceed the target's room, only fewer stages "
        "meet it; where they fit, the rest is each query's code warming up (JIT/CPU above), "
        "not its scheduling."
    )
    for row in rows:
        target = _target(row)
        if target is None:
            continue
        room = (target - 1) * row.ref.wall
        over = row.cost.wall - row.ref.wall
        print(
            f"  {row.master:<26} {row.run:<17} {row.cost.work.stages:>4} stages x "
            f"{row.per_stage * 1000:.0f} ms = {row.shape:5.2f} s of the {over:5.2f} s "
            f"over its reference (room under the target: {room:.2f} s)"
        )


def _target(row: Row) -> float | None:
    if row.run.endswith("-broker day"):
        return TARGETS["40-broker day"]
    return TARGETS.get(row.run)


if __name__ == "__main__":
    main()
