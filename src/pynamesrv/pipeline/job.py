"""The pipeline job: ingest new journal hours, recompute the days they touch, publish at once.

A run (``run_pipeline``):
1. finishes a publish an earlier run committed but did not complete (``publish.recover``);
2. lists the journal files and compares them with the manifest's record: only new or changed
   hour files are parsed, into the event store (``store.py``);
3. computes the tables whole (first run, ``--full``, other parameters) or from the UTC day R
   from which the new data can change anything (``start_of``), with the state the last run
   left (``derive.Carry``);
4. stages every output and publishes them together (``publish.py``).
A run over unchanged journals changes nothing and says so.

Its cost beyond the data is one planning, code generation and scheduling per query, so a run
starts few (about 20, whatever the data): ingest parses each new hour file once, compacting
heartbeats in the same pass, and reads its statistics back from the store; ``derive``
materialises the frames every table shares once (``localCheckpoint``); each table and state
table is one write whose row count comes from the write's own metrics; the report is one
query. ``bench/pipeline.py`` counts them.

Output layout under ``--out``: one directory per table (``day=YYYY-MM-DD`` partitions, except
``topic_distribution``), ``report.html``, ``_manifest.json`` (what was read, the parameters,
the last published run), ``_store/`` (the parsed events) and ``_state/`` (what the next run
takes over). Directories starting with ``_`` are invisible to Spark readers of a table.

Runs the same on ``local[*]`` (embedded) and on a cluster: only the DataFrame API is used, so
executors need no Python packages, and paths may be anything Spark reads or writes
(``file:``, ``hdfs://``, ``s3a://``) as long as driver and executors see the same files.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final

import orjson
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pynamesrv.pipeline import TABLES
from pynamesrv.pipeline.derive import (
    COLUMNS,
    DEFAULT_HEARTBEAT_INTERVAL_S,
    LOOKBACK_MS,
    MAX_HEARTBEAT_INTERVAL_S,
    PARTITIONED,
    Carry,
    Derived,
    derive,
)
from pynamesrv.pipeline.fs import HadoopFS
from pynamesrv.pipeline.paths import join_path
from pynamesrv.pipeline.publish import Staging, read_manifest, recover
from pynamesrv.pipeline.report import collect_report_data, render_report
from pynamesrv.pipeline.runs import DAY_MS, HOUR_MS, MINUTE_MS
from pynamesrv.pipeline.store import (
    FileStats,
    JournalFile,
    changed_files,
    find_journal_files,
    ingest,
    partition_path,
    read_store,
)

__all__ = [
    "COLUMNS",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "TABLES",
    "Derived",
    "PipelineResult",
    "run_pipeline",
    "spark_session",
]

# Of the store, state and manifest; another value means a whole run. 2: sessions carry
# start_reason (warm restarts: broker_recovered starts a session).
FORMAT: Final = 2
STORE: Final = "_store"
STATE: Final = "_state"
REPORT: Final = "report.html"
# Tables the next run takes over; those whose rows are partitioned by day.
STATE_TABLES: Final = ("lifecycle", "run_hours", "present", "sessions", "spans")
STATE_PARTITIONED: Final = frozenset({"sessions", "spans"})

Progress = Callable[[str, float, str], None]  # stage, seconds, detail


# ---------------------------------------------------------------------------- session


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "pynamesrv-pipeline",
    shuffle_partitions: int | None = None,
) -> SparkSession:
    """The job's Spark session.

    ``master`` None means: whatever ``spark-submit`` configured, else ``local[*]`` embedded in
    this process; an already active session is returned as it is. An embedded session gets
    2 GB of driver memory unless configured, and logs errors only. Shuffle sizing is set per
    run for every master (``job_conf``) unless ``shuffle_partitions`` (or the launch
    configuration) fixes it.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active  # embedded (tests, notebooks): never reconfigure the caller's session
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # launched by spark-submit / pyspark
    if master is None and not submitted:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if master is not None and master.startswith("local"):
        builder = builder.config("spark.ui.enabled", "false")
        if not submitted:
            builder = builder.config(
                "spark.driver.memory", os.environ.get("PYNAMESRV_DRIVER_MEMORY", "2g")
            ).config(
                "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_quiet_log4j()}"
            )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log4j() -> str:
    """A log4j2 configuration that shows errors only, so the embedded JVM does not drown the
    progress lines in start-up warnings (a cluster keeps its own logging configuration)."""
    path = Path(tempfile.gettempdir()) / "pynamesrv-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        scratch = path.with_name(f"{path.name}.{os.getpid()}")
        scratch.write_text(_LOG4J2)
        os.replace(scratch, path)  # atomic: concurrent jobs never read half a file
    return str(path)


def shuffle_partitions(spark: SparkSession) -> int:
    """Shuffle partitions for a run: what the launch configuration says, else twice the
    cores the master reports (a day of 1,000 brokers is ~1 GB of journal and ~100 k rows
    after ingestion: 200 tiny tasks per shuffle cost more than the work)."""
    configured = spark.sparkContext.getConf().get("spark.sql.shuffle.partitions")
    if configured:
        return int(configured)
    return max(2, 2 * spark.sparkContext.defaultParallelism)


# SQL settings of a run (job_conf), on every master.
SQL_CONF: Final = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.parallelismFirst": "false",
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "10000000",
    "spark.sql.session.timeZone": "UTC",
    # A day is 24 hour files per instance, and as many store partitions: up to a few days'
    # worth, the driver lists them itself rather than by a Spark job each time more than 32
    # paths are read (longer rebuilds keep the parallel listing object stores need).
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "256",
}


@contextmanager
def job_conf(spark: SparkSession) -> Iterator[None]:
    """The SQL settings a run needs, on any master, restored afterwards: adaptive execution
    coalescing small shuffle partitions by size, a partition count sized to the cores, and
    hash aggregation of heartbeat arrays without a fall-back to sorting."""
    wanted = {**SQL_CONF, "spark.sql.shuffle.partitions": str(shuffle_partitions(spark))}
    before = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


# ---------------------------------------------------------------------------- paths


class SharedPathError(ValueError):
    """A path executors cannot see (a plain local path with a cluster master)."""


def is_local_master(master: str) -> bool:
    return master.startswith("local")


def check_shared(
    master: str, options: Sequence[tuple[str, str]], scheme: Callable[[str], str]
) -> None:
    """Refuse local paths with a cluster master: executors on other machines would write
    into their own disks (the data stays in ``_temporary/``, the driver sees only
    ``_SUCCESS``) or find no journal at all. ``options`` are (option, path) pairs;
    ``scheme`` names the filesystem a path lives on."""
    if is_local_master(master):
        return
    for option, path in options:
        if scheme(path) == "file":
            raise SharedPathError(
                f"{option} {path} is a local path but the master {master} runs executors "
                "elsewhere: use hdfs://, s3a:// or another shared filesystem, or pass "
                "--shared-path if this path is the same on every worker (NFS, one machine)"
            )


# ---------------------------------------------------------------------------- result


@dataclass
class PipelineResult:
    """What a run did, for the CLI summary, the benchmark and the tests."""

    out: str
    events: int  # journal lines that are events, all history published
    instances: int
    rows: dict[str, int]  # rows written by this run per table (all rows on a whole run)
    timings: list[tuple[str, float]]
    report: str
    headline: dict[str, Any]
    ingested: int = 0  # hour files parsed by this run
    malformed: int = 0  # lines that are not JSON (torn, garbage), all history
    invalid: int = 0  # JSON lines without ts / ns / type, all history
    start: int | None = None  # R: the first day recomputed (None: whole)
    nothing_new: bool = False
    recovered: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(t for _, t in self.timings)


# ---------------------------------------------------------------------------- run


def start_of(
    changed: Sequence[JournalFile],
    record: dict[str, FileStats],
    new: dict[str, FileStats],
    last_before: Callable[[set[str], int], dict[str, int]],
) -> int:
    """R: the UTC midnight from which new data can change a published row.

    L is the earliest time the changed files hold (now or before). The rows an instance's new
    data can change begin at its last event before L (what was open at the end of its data
    then), and a minute's exposure row takes its queries from the ``route_queries`` line one
    minute later; hence R = the midnight before min(L, last events before L) - 1 minute.
    """
    low = min(
        min(
            f.hour_ms,
            *(s.min_ts for s in (record.get(f.key), new.get(f.key)) if s and s.min_ts is not None),
        )
        for f in changed
    )
    instances: set[str] = set()
    for f in changed:
        for stats in (record.get(f.key), new.get(f.key)):
            if stats is not None:
                instances.update(stats.ns)
    hour = low // HOUR_MS * HOUR_MS
    before = last_before(instances, hour)
    earliest = min([low, *before.values()])
    return (earliest - MINUTE_MS) // DAY_MS * DAY_MS


_DAY_DIR: Final = re.compile(r"^day=(\d{4}-\d{2}-\d{2})$")
# A table without rows still has its columns: one empty file in the partition of a null day.
_NO_DAY: Final = "day=__HIVE_DEFAULT_PARTITION__"


def _days(fs: HadoopFS, table: str) -> list[str]:
    return sorted(m.group(1) for m in map(_DAY_DIR.match, fs.children(table)) if m)


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


@dataclass
class _Output:
    """Reading and staging the published outputs of ``out``."""

    spark: SparkSession
    fs: HadoopFS
    out: str
    schemas: dict[str, StructType]

    def live(self, relative: str) -> str:
        return join_path(self.out, relative)

    def days(self, relative: str) -> list[str]:
        """The ``day=…`` partitions of a published table, as dates."""
        return _days(self.fs, self.live(relative))

    def read(self, relative: str, days: Sequence[str] | None = None) -> DataFrame:
        """A published table (only ``days`` of a partitioned one when given); empty when
        there is nothing. Read with the schema the manifest recorded, so a table without a
        single row still has its columns."""
        schema = self.schemas[relative]
        base = self.live(relative)
        if days is None:
            paths = [base] if self.fs.exists(base) else []
        else:
            paths = [join_path(base, f"day={d}") for d in days]
            paths = [p for p in paths if self.fs.exists(p)]
        if not paths:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).option("basePath", base).parquet(*paths)


def run_pipeline(
    spark: SparkSession,
    journals: Sequence[str],
    out: str,
    *,
    from_ts: int | None = None,
    to_ts: int | None = None,
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
    full: bool = False,
    progress: Progress | None = None,
) -> PipelineResult:
    """Bring ``out`` up to date with ``journals`` (see the module's docstring)."""
    if not 0 < heartbeat_interval_s <= MAX_HEARTBEAT_INTERVAL_S:
        raise ValueError(f"heartbeat interval must be in (0, {MAX_HEARTBEAT_INTERVAL_S:g}] s")
    timings: list[tuple[str, float]] = []

    def stage(name: str, action: Callable[[], Any], detail: Callable[[Any], str]) -> Any:
        begin = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - begin
        timings.append((name, seconds))
        if progress is not None:
            progress(name, seconds, detail(value))
        return value

    fs = HadoopFS(spark)
    with job_conf(spark):
        recovered = recover(fs, out)
        manifest = read_manifest(fs, out)
        params = {
            "format": FORMAT,
            "heartbeat_interval_s": heartbeat_interval_s,
            "from_ts": from_ts,
            "to_ts": to_ts,
        }
        record = {
            key: FileStats.from_json(value)
            for key, value in ((manifest or {}).get("files") or {}).items()
        }
        whole = full or manifest is None or manifest.get("params") != params
        files = stage(
            "journal files",
            lambda: find_journal_files(fs, journals),
            lambda found: f"{len(found):,} hour file(s)",
        )
        changed = changed_files(files, record)
        store = join_path(out, STORE)
        if not changed and not whole:
            totals = (manifest or {}).get("totals") or {}
            return PipelineResult(
                out=out,
                events=int(totals.get("events") or 0),
                instances=int(totals.get("instances") or 0),
                rows={},
                timings=timings,
                report=join_path(out, REPORT),
                headline=(manifest or {}).get("headline") or {},
                malformed=int(totals.get("malformed") or 0),
                invalid=int(totals.get("invalid") or 0),
                nothing_new=True,
                recovered=recovered,
            )
        new = stage(
            "ingest",
            lambda: ingest(spark, fs, changed, store),
            lambda stats: (
                f"{len(stats):,} file(s), {sum(s.lines for s in stats.values()):,} line(s)"
                + _bad(stats.values())
            ),
        )
        schemas = {
            name: StructType.fromJson(orjson.loads(text))
            for name, text in ((manifest or {}).get("schemas") or {}).items()
        }
        output = _Output(spark, fs, out, schemas)
        start: int | None = None
        if not whole:
            old_hours = output.read(f"{STATE}/run_hours")

            def last_before(instances: set[str], hour: int) -> dict[str, int]:
                rows = (
                    old_hours.where(F.col("ns").isin(*instances) & (F.col("hour_ms") < hour))
                    .groupBy("ns")
                    .agg(F.max("last_ts").alias("last"))
                    .collect()
                )
                return {r["ns"]: int(r["last"]) for r in rows}

            start = start_of(changed, record, new, last_before)
        record.update(new)
        events = _store_events(spark, fs, store, files, record, start, from_ts, to_ts)
        carry = None if start is None else _carry(output, start)
        derived = stage(
            "derive",
            partial(derive, events, heartbeat_interval_s, carry),
            lambda _: "lifecycles, runs and run hours materialized",
        )
        staging = Staging(fs, out)
        try:
            result = _compute_and_publish(
                spark, derived, output, staging, stage, record, params, whole
            )
        except BaseException:
            staging.abandon()
            raise
        finally:
            derived.release()
        result.ingested = len(new)
        result.recovered = recovered
        result.start = start
        result.timings = timings
        return result


def _bad(stats: Any) -> str:
    malformed = sum(s.malformed for s in stats)
    invalid = sum(s.invalid for s in stats)
    if not malformed and not invalid:
        return ""
    return f" ({malformed:,} malformed, {invalid:,} without ts/ns/type: skipped)"


def _store_events(
    spark: SparkSession,
    fs: HadoopFS,
    store: str,
    files: Sequence[JournalFile],
    record: dict[str, FileStats],
    start: int | None,
    from_ts: int | None,
    to_ts: int | None,
) -> DataFrame:
    """The store rows a computation reads: every file's, or those that reach
    ``start - LOOKBACK_MS``; within [from_ts, to_ts)."""
    low = None if start is None else start - LOOKBACK_MS
    if from_ts is not None:
        low = from_ts if low is None else max(low, from_ts)
    by_key = {f.key: f for f in files}
    paths = []
    for key, stats in record.items():
        if stats.lines == 0 or stats.max_ts is None:
            continue
        if low is not None and stats.max_ts < low:
            continue
        if to_ts is not None and stats.min_ts is not None and stats.min_ts >= to_ts:
            continue
        file = by_key.get(key) or _file_of(key, stats)
        paths.append(partition_path(store, file))
    frame = read_store(spark, store, [p for p in paths if fs.exists(p)])
    if low is not None:
        frame = frame.where(F.col("last_ts") >= F.lit(low))
    if from_ts is not None or to_ts is not None:
        frame = _clip(frame, from_ts, to_ts)
    return frame


def _clip(frame: DataFrame, from_ts: int | None, to_ts: int | None) -> DataFrame:
    """Rows within [from_ts, to_ts); heartbeat segments cut to the beats inside."""
    lo = F.lit(from_ts if from_ts is not None else -(2**62)).cast("long")
    hi = F.lit(to_ts if to_ts is not None else 2**62).cast("long")
    inside = F.filter(
        F.arrays_zip("beat_ts", "beat_seq"), lambda b: (b["beat_ts"] >= lo) & (b["beat_ts"] < hi)
    )
    segments = frame.where(F.col("beat_ts").isNotNull()).withColumn("kept", inside)
    segments = (
        segments.where(F.size("kept") > 0)
        .withColumn("beat_ts", F.transform("kept", lambda b: b["beat_ts"]))
        .withColumn("beat_seq", F.transform("kept", lambda b: b["beat_seq"]))
        .withColumn("ts", F.get(F.col("beat_ts"), 0))
        .withColumn("seq", F.get(F.col("beat_seq"), 0))
        .withColumn("last_ts", F.get(F.col("beat_ts"), F.size("beat_ts") - 1))
        .withColumn("lines", F.size("beat_ts").cast("long"))
        .drop("kept")
    )
    others = frame.where(F.col("beat_ts").isNull() & (F.col("ts") >= lo) & (F.col("ts") < hi))
    return others.unionByName(segments)


def _file_of(key: str, stats: FileStats) -> JournalFile:
    """A recorded file that is no longer on disk (its rows stay in the store)."""
    instance, _, hour = key.rpartition("/")
    moment = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    return JournalFile(
        instance, round(moment.timestamp() * 1000), stats.path, stats.size, stats.mtime
    )


def _carry(output: _Output, start: int) -> Carry:
    """The state a computation from ``start`` takes over from the published outputs."""
    first = _day(start)
    read_from = start - LOOKBACK_MS

    def later(relative: str) -> DataFrame:
        return output.read(relative, [d for d in output.days(relative) if d >= first])

    at = F.lit(start)
    return Carry(
        start=start,
        lifecycle=output.read(f"{STATE}/lifecycle").where(F.col("ts") < F.lit(read_from)),
        run_hours=output.read(f"{STATE}/run_hours").where(F.col("hour_ms") < F.lit(read_from)),
        present=output.read(f"{STATE}/present"),
        sessions=later(f"{STATE}/sessions").where(F.col("start_ts") < at).drop("day"),
        spans=later(f"{STATE}/spans").where(F.col("member_from") < at).drop("day"),
        divergence=later("namesrv_divergence"),
        distribution=output.read("topic_distribution"),
        settled=lambda days: output.read(f"{STATE}/sessions", days),
        availability=lambda days: output.read("broker_availability", days),
    )


def _rows_written(counted: Observation, recount: Callable[[], int]) -> int:
    """The rows a write's own metrics counted: no job of its own. A frame without a single
    partition runs no task and reports no metric (Spark 4 fails on reading it), so its
    files are counted instead (an empty output: a job over nothing)."""
    try:
        return int(counted.get["rows"])
    except Exception:  # no metric: no task ran
        return recount()


def _compute_and_publish(
    spark: SparkSession,
    derived: Derived,
    output: _Output,
    staging: Staging,
    stage: Callable[[str, Callable[[], Any], Callable[[Any], str]], Any],
    record: dict[str, FileStats],
    params: dict[str, Any],
    whole: bool,
) -> PipelineResult:
    fs, start = output.fs, derived.start
    first = None if start is None else _day(start)
    totals = stage(
        "running intervals",
        derived.totals,
        lambda t: (
            f"{t['events']:,} events from {t['instances']} instance(s), "
            f"{t['sessions']:,} session(s) reach the run"
        ),
    )
    totals.pop("sessions")  # for the progress line only: the manifest keeps its totals

    replaced: dict[str, set[str]] = {}  # partitioned table -> days published by this run

    schemas: dict[str, str] = {}

    def write(relative: str, frame: DataFrame, partitioned: bool) -> int:
        """Stage ``frame``; returns its rows (counted while it is written)."""
        target = staging.path(relative)
        schemas[relative] = frame.schema.json()
        counted = Observation()
        frame = frame.observe(counted, F.count(F.lit(1)).alias("rows"))
        if partitioned:
            frame.repartition("day").write.mode("overwrite").partitionBy("day").parquet(target)
            days = set(_days(fs, target))
            replaced[relative] = days
            if whole:
                if not days:
                    empty = spark.createDataFrame([], frame.drop("day").schema)
                    empty.coalesce(1).write.mode("overwrite").parquet(join_path(target, _NO_DAY))
                staging.replace(relative)
            else:
                for day in sorted(days):
                    staging.replace(f"{relative}/day={day}")
                for day in output.days(relative):
                    if day >= (first or "") and day not in days:
                        staging.remove(f"{relative}/day={day}")
            if not days:
                return 0
        else:
            frame.coalesce(1).write.mode("overwrite").parquet(target)
            staging.replace(relative)
        return _rows_written(counted, lambda: spark.read.parquet(target).count())

    rows: dict[str, int] = {}

    def table(name: str) -> DataFrame:
        frame = derived.table(name)
        if name == "broker_availability":
            patches = derived.patches()
            if patches is not None:
                frame = frame.unionByName(patches)
        return frame

    def write_table(name: str) -> int:
        """The table's plan is built here, inside its timed stage."""
        return write(name, table(name), name in PARTITIONED)

    for name in TABLES:
        rows[name] = stage(
            name,
            partial(write_table, name),
            lambda n: f"{n:,} row(s)",
        )

    state = {
        "lifecycle": derived.lifecycle,
        "run_hours": derived.hours,
        "present": derived.present,
        "sessions": derived.session_state(),
        "spans": derived.span_state(),
    }
    stage(
        "state",
        lambda: [
            write(f"{STATE}/{name}", frame, name in STATE_PARTITIONED)
            for name, frame in state.items()
        ],
        lambda _: f"{STATE}/ for the next run",
    )

    def view(name: str) -> DataFrame:
        """The table as it will be once published."""
        schema = StructType.fromJson(orjson.loads(schemas[name]))
        staged = output.spark.read.schema(schema).parquet(staging.path(name))
        if whole or name not in PARTITIONED:
            return staged
        kept = [d for d in output.days(name) if d < (first or "") and d not in replaced[name]]
        return output.read(name, kept).unionByName(staged)

    malformed = sum(s.malformed for s in record.values())
    invalid = sum(s.invalid for s in record.values())

    def report() -> dict[str, Any]:
        data = collect_report_data(
            view,
            totals["events"],
            totals["instances"],
            (totals["first_ts"], totals["last_ts"]),
            bad_lines=(malformed, invalid),
        )
        fs.write_text(staging.path(REPORT), render_report(data))
        staging.replace(REPORT)
        return data

    data = stage("report.html", report, lambda _: join_path(output.out, REPORT))
    manifest = {
        "format": FORMAT,
        "params": params,
        "published": staging.run_id,
        "published_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "start": start,
        "files": {key: stats.to_json() for key, stats in sorted(record.items())},
        "totals": {**totals, "malformed": malformed, "invalid": invalid},
        "schemas": schemas,
        "headline": data["headline"],
    }
    stage("publish", lambda: staging.commit(manifest), lambda _: staging.run_id)
    return PipelineResult(
        out=output.out,
        events=int(totals["events"]),
        instances=int(totals["instances"]),
        rows=rows,
        timings=[],
        report=join_path(output.out, REPORT),
        headline=data["headline"],
        malformed=malformed,
        invalid=invalid,
    )
