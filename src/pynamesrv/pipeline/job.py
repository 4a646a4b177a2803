"""The pipeline job: ingest new journal hours, recompute the days they touch, publish at once.

A run (``run_pipeline``):
1. reads the current manifest (``publish.current``: the newest complete one);
2. lists the journal files and compares them with the manifest's record: only new or changed
   hour files are parsed, into the event store (``store.py``);
3. computes the tables whole (first run, ``--full``, other parameters) or from the UTC day R
   from which the new data can change anything (``start_of``), with the state the last run
   left (``derive.Carry``);
4. writes every output into new directories of its own, then its manifest (the commit
   point), then removes what retention lets go (``publish.py``).
A run over unchanged journals changes nothing and says so.

Its cost beyond the data is one planning, code generation and scheduling per query, so a run
starts few (about 20, whatever the data): ingest parses each new hour file once, compacting
heartbeats in the same pass, and reads its statistics back from the store; ``derive``
materialises the frames every table shares once (``localCheckpoint``); each table and state
table is one write whose row count comes from the write's own metrics; the report is one
query. ``bench/pipeline.py`` counts them.

Output layout under ``--out`` (docs/pipeline-semantics.md, "Output layout"): per table
``<table>/day=YYYY-MM-DD/version=<run>/`` (``topic_distribution``: ``<table>/version=<run>/``), the
report ``report-<run>.html`` (and ``report.html``, a small page pointing at the newest),
``_manifests/<run>.json`` (what was read, the parameters, which version holds each day),
``_store/`` (the parsed events) and ``_state/`` (what the next run takes over). A table is read
through the current manifest (``tables.py``, ``pynamesrv pipeline tables``): a plain read of
``<out>/<table>`` would mix versions.

Runs the same on ``local[*]`` (embedded), on a cluster and through Spark Connect: only the
DataFrame API is used, so executors need no Python packages; the job's own file operations
(listing journals, manifests, retention) go through ``pyarrow.fs`` (``files.py``), so the
machine running the job must reach the same paths as Spark: a local disk shared with a local
master or Connect server, or ``hdfs://`` / ``s3a://`` both reach.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from pynamesrv.pipeline import TABLES
from pynamesrv.pipeline.classcache import ClassArchive
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
from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.frames import local_frame
from pynamesrv.pipeline.paths import join_path
from pynamesrv.pipeline.publish import (
    KEEP,
    MANIFESTS,
    STORE,
    current,
    new_run_id,
    report_name,
    retain,
    version,
    write_manifest,
)
from pynamesrv.pipeline.report import collect_report_data, render_report
from pynamesrv.pipeline.runs import DAY_MS, HOUR_MS, MINUTE_MS
from pynamesrv.pipeline.store import (
    FileStats,
    JournalFile,
    changed_files,
    find_journal_files,
    ingest,
    read_store,
)
from pynamesrv.pipeline.tables import published_paths, read_version

__all__ = [
    "COLUMNS",
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "TABLES",
    "Derived",
    "PipelineResult",
    "run_pipeline",
    "spark_session",
]

# Of the store, state and manifest; another value means a whole run, and the hour files
# still in the journals are parsed again. 2: sessions carry start_reason (warm restarts:
# broker_recovered starts a session). 3: write-once versions and manifests (publish.py).
# 4: the store keeps what replaying routes needs (topic_distribution at the end of the data).
# 5: and what tells a warm start from a base (server_started's ``recovered``) with the
# deadlines that start applied (``timeout_ms``), as routes-at reads them.
FORMAT: Final = 5
STATE: Final = "_state"
REPORT: Final = "report.html"  # points at the newest report-<run>.html
# What an output directory written before FORMAT 3 holds (renamed into place).
OLD_MANIFEST: Final = "_manifest.json"
# Tables the next run takes over; those whose rows are partitioned by day.
STATE_TABLES: Final = ("lifecycle", "run_hours", "present", "sessions", "spans")
STATE_PARTITIONED: Final = frozenset({"sessions", "spans"})

Progress = Callable[[str, float, str], None]  # stage, seconds, detail


# ---------------------------------------------------------------------------- session


def spark_session(
    master: str | None = None,
    *,
    remote: str | None = None,
    app_name: str = "pynamesrv-pipeline",
    shuffle_partitions: int | None = None,
    codegen_cache: int | None = None,
    class_archive: ClassArchive | None = None,
    small_run: bool = False,
) -> SparkSession:
    """The job's Spark session.

    ``remote`` (``sc://host:port``) connects to a Spark Connect server: the client has no
    JVM, and everything the job asks of Spark goes through the DataFrame API and
    ``spark.conf``. Else ``master`` None means: whatever ``spark-submit`` configured, else
    ``local[*]`` embedded in this process; an already active session is returned as it is.
    An embedded session gets 2 GB of driver memory unless configured, the throughput
    collector (``EMBEDDED_GC``), and logs errors only (its log4j configuration; a cluster's
    driver logs as the cluster's configuration says: the log level cannot be set without a
    SparkContext). A session this function launches keeps the classes Spark generates for
    several runs (``codegen_cache``, default ``CODEGEN_CACHE_ENTRIES``; a Connect server or
    spark-submit has its own setting) and records no Python call sites (``NO_CALL_SITES``).
    Shuffle sizing is set per run for every master (``job_conf``) unless
    ``shuffle_partitions`` (or the launch configuration) fixes it.
    A JVM this function launches maps ``class_archive`` (or writes it: ``classcache``); an
    embedded one for a ``small_run`` (``is_small_run``) compiles with C1 alone
    (``SMALL_RUN_JIT``).
    """
    if remote is not None:
        if master is not None:
            raise ValueError("a Spark Connect session takes no master (the server has one)")
        connect = SparkSession.builder.remote(remote).config("spark.sql.session.timeZone", "UTC")
        if shuffle_partitions is not None:
            connect = connect.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        return connect.getOrCreate()
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
    if not submitted:  # spark-submit's configuration is the operator's
        entries = CODEGEN_CACHE_ENTRIES if codegen_cache is None else codegen_cache
        builder = builder.config("spark.sql.codegen.cache.maxEntries", str(entries))
        builder = builder.config(*NO_CALL_SITES)
    java_options = [] if class_archive is None or submitted else [class_archive.java_options()]
    if master is not None and master.startswith("local"):
        builder = builder.config("spark.ui.enabled", "false")
        if not submitted:
            builder = builder.config(
                "spark.driver.memory", os.environ.get("PYNAMESRV_DRIVER_MEMORY", "2g")
            )
            java_options[:0] = [f"-Dlog4j2.configurationFile={_quiet_log4j()}", EMBEDDED_GC]
            if small_run:
                java_options.append(SMALL_RUN_JIT)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options))
    return builder.getOrCreate()


# Classes Spark generates and compiles for a run's queries: ~600 on any day (the plan, not the
# data, decides). Spark keeps 100, so a second run in the same process (tests, notebooks, a
# scheduler calling run_pipeline) compiled every one again, and the JVM warmed each up anew.
CODEGEN_CACHE_ENTRIES: Final = 2000
# PySpark records the Python call site of every DataFrame and Column call in the JVM, for
# error messages: five more py4j round trips and a walk of the Python stack per call, 8,800 of
# the 15,400 round trips of a cold incremental hour of 40 brokers. An error names the Spark
# method then, not the caller's line.
NO_CALL_SITES: Final = ("spark.python.sql.dataFrameDebugging.enabled", "false")
# The embedded JVM's collector: a batch job needs throughput, not short pauses, and G1's
# concurrent work and write barriers cost 3-7 % of a run's time on two cores (a day of 1,000
# brokers, a 40-broker day; bench/pipeline_warmup.py and bench/pipeline.py show the runs).
EMBEDDED_GC: Final = "-XX:+UseParallelGC"
# The embedded JVM's compilers for a run that parses little (an hour of new journal, a small
# cluster's day): C1 alone. A cold run of that size spends most of its CPU in C2 compiling
# code that then runs for seconds (an incremental hour of 1,000 brokers, cold: 87 s of JVM
# CPU with C2, 55 s with C1 alone); a run that parses a day needs C2's code (C1 alone: 116 s
# instead of 84 s). The code cache is raised so that C1's code fits (at the default, it
# filled and compilation stopped). bench/pipeline.py prints cold runs.
SMALL_RUN_JIT: Final = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=512m"
SMALL_RUN_BYTES: Final = 256 * 1024 * 1024  # journal bytes to parse, at most
GZIP_RATIO: Final = 15  # journal lines compress 10-30 times: a .gz's bytes to parse


def is_small_run(journals: Sequence[str], out: str, full: bool = False) -> bool:
    """Whether a run would parse at most ``SMALL_RUN_BYTES`` of journal
    (``PYNAMESRV_SMALL_RUN_BYTES`` when set; 0: never) -- the hour files new or changed
    since the last run, as ``run_pipeline`` finds them --, known before Spark starts; False
    when that cannot be told (the run then says why)."""
    files = Files()
    try:
        manifest = None if full else current(files, files.uri(out))
        record = {
            key: FileStats.from_json(value)
            for key, value in ((manifest or {}).get("files") or {}).items()
        }
        changed = changed_files(find_journal_files(files, journals), record)
    except (OSError, ValueError):
        return False
    size = sum(f.size * (GZIP_RATIO if f.compressed else 1) for f in changed)
    return size <= int(os.environ.get("PYNAMESRV_SMALL_RUN_BYTES", SMALL_RUN_BYTES))


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def _quiet_log4j() -> str:
    """A log4j2 configuration that shows errors only, so the embedded JVM does not drown the
    progress lines in start-up warnings (a cluster keeps its own logging configuration).
    PySpark's gateway gets a level of its own: without one, Spark takes it for a shell and
    prints "Setting default log level" and a tip about ``sc.setLogLevel`` on every start."""
    path = Path(tempfile.gettempdir()) / "pynamesrv-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        scratch = path.with_name(f"{path.name}.{os.getpid()}")
        scratch.write_text(_LOG4J2)
        os.replace(scratch, path)  # atomic: concurrent jobs never read half a file
    return str(path)


# Spark's own default of spark.sql.shuffle.partitions: any other value was configured.
SPARK_DEFAULT_SHUFFLE_PARTITIONS: Final = "200"
_SPLITS: Final = re.compile(r"\bRange \(0, 1, step=1, splits=(\d+)\)")


def shuffle_partitions(spark: SparkSession) -> int:
    """Shuffle partitions for a run: what the launch configuration says, else twice the
    cores Spark has (a day of 1,000 brokers is ~1 GB of journal and ~100 k rows after
    ingestion: 200 tiny tasks per shuffle cost more than the work).

    Read without the SparkContext (a Spark Connect client has none): a value other than
    Spark's default 200 was configured; the cores are the splits Spark plans for a range
    without a partition count (its default parallelism: the master's cores), read from the
    plan, which runs no job."""
    configured = spark.conf.get("spark.sql.shuffle.partitions", None)
    if configured and configured != SPARK_DEFAULT_SHUFFLE_PARTITIONS:
        return int(configured)
    plan = io.StringIO()
    with redirect_stdout(plan):
        spark.range(0, 1).explain()
    found = _SPLITS.search(plan.getvalue())
    if found is None:  # a plan printed differently: keep Spark's default
        return int(configured or SPARK_DEFAULT_SHUFFLE_PARTITIONS)
    return max(2, 2 * int(found.group(1)))


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


class OutputLayoutError(ValueError):
    """``--out`` holds outputs this version does not write (an earlier layout)."""


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
    """What a run did, for the CLI summary, the benchmark and the tests. ``out`` and
    ``report`` are absolute URIs (``file:/…`` for a plain path): what a reader, a Connect
    server included, reads as named."""

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
    run_id: str | None = None  # the run whose manifest is current (None: nothing published)
    removed: list[str] = field(default_factory=list)  # what retention removed (under out)

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


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


@dataclass
class _Output:
    """The published tables of ``out``, as a manifest's ``tables`` names them."""

    spark: SparkSession
    files: Files
    out: str
    tables: dict[str, dict[str, Any]]

    def live(self, relative: str) -> str:
        return join_path(self.out, relative)

    def days(self, relative: str) -> list[str]:
        """The days of a published partitioned table."""
        days = (self.tables.get(relative) or {}).get("days") or {}
        return sorted(d for d in days if d != NO_DAY)

    def read(self, relative: str, days: Sequence[str] | None = None) -> DataFrame:
        """A published table (only ``days`` of a partitioned one when given); empty when
        there is nothing. Read with the schema the manifest recorded, so a table without a
        single row still has its columns."""
        return read_version(self.spark, self.out, relative, self.tables[relative], days)


def run_pipeline(
    spark: SparkSession,
    journals: Sequence[str],
    out: str,
    *,
    from_ts: int | None = None,
    to_ts: int | None = None,
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
    full: bool = False,
    keep: int = KEEP,
    progress: Progress | None = None,
) -> PipelineResult:
    """Bring ``out`` up to date with ``journals`` (see the module's docstring); the newest
    ``keep`` manifests and what they name stay (``publish.retain``)."""
    if not 0 < heartbeat_interval_s <= MAX_HEARTBEAT_INTERVAL_S:
        raise ValueError(f"heartbeat interval must be in (0, {MAX_HEARTBEAT_INTERVAL_S:g}] s")
    if keep < 1:
        raise ValueError("keep must be at least 1 (the current manifest)")
    timings: list[tuple[str, float]] = []

    def stage(name: str, action: Callable[[], Any], detail: Callable[[Any], str]) -> Any:
        begin = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - begin
        timings.append((name, seconds))
        if progress is not None:
            progress(name, seconds, detail(value))
        return value

    files = Files()
    given, out = out, files.uri(out)  # Spark gets URIs: a plain path is this machine's disk
    if files.exists(join_path(out, OLD_MANIFEST)):
        raise OutputLayoutError(
            f"--out {given} holds outputs of an earlier pynamesrv (renamed into place, "
            f"{OLD_MANIFEST}): use a new directory"
        )
    run_id = new_run_id()
    with job_conf(spark):
        manifest = current(files, out)
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
        journal_files = stage(
            "journal files",
            lambda: find_journal_files(files, journals),
            lambda found: f"{len(found):,} hour file(s)",
        )
        if manifest is not None and (manifest.get("params") or {}).get("format") != FORMAT:
            # Stored by another format: parsed again, but for files gone from the journals
            # (their rows are all the history left of them).
            present = {f.key for f in journal_files}
            record = {key: stats for key, stats in record.items() if key not in present}
        changed = changed_files(journal_files, record)
        store = join_path(out, STORE)
        if not changed and not whole:
            totals = (manifest or {}).get("totals") or {}
            return PipelineResult(
                out=out,
                events=int(totals.get("events") or 0),
                instances=int(totals.get("instances") or 0),
                rows={},
                timings=timings,
                report=join_path(out, (manifest or {}).get("report") or REPORT),
                headline=(manifest or {}).get("headline") or {},
                malformed=int(totals.get("malformed") or 0),
                invalid=int(totals.get("invalid") or 0),
                nothing_new=True,
                run_id=(manifest or {}).get("run"),
            )
        new = stage(
            "ingest",
            lambda: ingest(spark, files, changed, store, run_id),
            lambda stats: (
                f"{len(stats):,} file(s), {sum(s.lines for s in stats.values()):,} line(s)"
                + _bad(stats.values())
            ),
        )
        output = _Output(spark, files, out, dict((manifest or {}).get("tables") or {}))
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
        events = _store_events(spark, store, record, start, from_ts, to_ts)
        carry = (
            None
            if start is None
            else _carry(output, start, partial(_history, spark, store, record, from_ts, to_ts))
        )
        derived = stage(
            "derive",
            partial(derive, events, heartbeat_interval_s, carry),
            lambda _: "lifecycles, runs and run hours materialized",
        )
        try:
            result = _compute_and_publish(
                spark, derived, output, run_id, stage, record, params, whole
            )
        finally:
            derived.release()
        result.removed = stage(
            "retention",
            lambda: retain(files, out, run_id, keep),
            lambda removed: f"{len(removed):,} old version(s) removed, {keep} manifest(s) kept",
        )
        result.out = out
        result.report = join_path(out, report_name(run_id))
        result.ingested = len(new)
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
    store: str,
    record: dict[str, FileStats],
    start: int | None,
    from_ts: int | None,
    to_ts: int | None,
) -> DataFrame:
    """The store rows a computation reads: every file's, or those that reach
    ``start - LOOKBACK_MS``; within [from_ts, to_ts). Each file's rows are the version the
    record names (files gone from the journal keep theirs)."""
    low = None if start is None else start - LOOKBACK_MS
    if from_ts is not None:
        low = from_ts if low is None else max(low, from_ts)
    paths = []
    for stats in record.values():
        if stats.stored is None or stats.max_ts is None:
            continue
        if low is not None and stats.max_ts < low:
            continue
        if to_ts is not None and stats.min_ts is not None and stats.min_ts >= to_ts:
            continue
        paths.append(join_path(store, stats.stored))
    frame = read_store(spark, store, sorted(paths))
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


def _history(
    spark: SparkSession,
    store: str,
    record: dict[str, FileStats],
    from_ts: int | None,
    to_ts: int | None,
    instances: Sequence[str],
) -> DataFrame:
    """Every stored event of ``instances`` within [from_ts, to_ts) (their files only)."""
    wanted = set(instances)
    theirs = {key: stats for key, stats in record.items() if wanted & set(stats.ns)}
    events = _store_events(spark, store, theirs, None, from_ts, to_ts)
    return events.where(F.col("type").isNotNull() & F.col("ns").isin(*instances))


def _carry(output: _Output, start: int, history: Callable[[list[str]], DataFrame]) -> Carry:
    """The state a computation from ``start`` takes over from the published outputs;
    ``history`` reads an instance's whole stored history (``Carry.history``)."""
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
        history=history,
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
    run_id: str,
    stage: Callable[[str, Callable[[], Any], Callable[[Any], str]], Any],
    record: dict[str, FileStats],
    params: dict[str, Any],
    whole: bool,
) -> PipelineResult:
    files, start = output.files, derived.start
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

    tables: dict[str, dict[str, Any]] = {}  # what the manifest will name

    def write(relative: str, frame: DataFrame, partitioned: bool) -> int:
        """Write ``frame`` as this run's version of ``relative``; returns its rows."""
        base = output.live(relative)
        schema = frame.schema.json()
        counted = Observation()
        frame = frame.observe(counted, F.count(F.lit(1)).alias("rows"))
        if partitioned:
            # Appended under day=/version=<this run>/: nothing a reader follows is touched.
            (
                frame.withColumn("version", F.lit(run_id))
                .repartition("day")
                .write.mode("append")
                .partitionBy("day", "version")
                .parquet(base)
            )
            written = _written_days(files, base, run_id)
            kept = {
                day: run
                for day, run in ((output.tables.get(relative) or {}).get("days") or {}).items()
                if not whole and day < (first or "")
            }
            days = {**kept, **dict.fromkeys(written, run_id)}
            if not days:  # columns for readers of the paths: one empty file, day null
                empty = local_frame(spark, frame.drop("day").schema)
                empty.coalesce(1).write.parquet(join_path(base, f"day={NO_DAY}/version={run_id}"))
                days = {NO_DAY: run_id}
            tables[relative] = {"schema": schema, "partitioned": True, "days": days}
            paths = [join_path(base, f"day={day}/version={run_id}") for day in written]
        else:
            path = output.live(version(relative, run_id))
            frame.coalesce(1).write.parquet(path)
            tables[relative] = {"schema": schema, "partitioned": False, "version": run_id}
            paths = [path]
        return _rows_written(counted, lambda: spark.read.parquet(*paths).count() if paths else 0)

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
        """The table as this run publishes it."""
        return read_version(spark, output.out, name, tables[name])

    malformed = sum(s.malformed for s in record.values())
    invalid = sum(s.invalid for s in record.values())
    report = report_name(run_id)

    def write_report() -> dict[str, Any]:
        data = collect_report_data(
            view,
            totals["events"],
            totals["instances"],
            (totals["first_ts"], totals["last_ts"]),
            bad_lines=(malformed, invalid),
        )
        files.write_text(output.live(report), render_report(data))
        return data

    data = stage("report.html", write_report, lambda _: report)
    manifest = {
        "format": FORMAT,
        "params": params,
        "published_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "start": start,
        "files": {key: stats.to_json() for key, stats in sorted(record.items())},
        "totals": {**totals, "malformed": malformed, "invalid": invalid},
        "tables": tables,
        "report": report,
        "headline": data["headline"],
    }
    # The same, as absolute URIs, for readers of the file in any language (the relative
    # names above stay valid when OUT is copied elsewhere).
    manifest["paths"] = {
        "out": output.out,
        **published_paths(output.out, {**manifest, "run": run_id}),
    }

    def publish() -> None:
        write_manifest(files, output.out, run_id, manifest)
        # Convenience, after the commit point: a stable address for the newest report.
        files.write_text(output.live(REPORT), _pointer(report))

    stage("publish", publish, lambda _: f"{MANIFESTS}/{run_id}.json")
    return PipelineResult(
        out=output.out,
        events=int(totals["events"]),
        instances=int(totals["instances"]),
        rows=rows,
        timings=[],
        report=output.live(report),
        headline=data["headline"],
        malformed=malformed,
        invalid=invalid,
        run_id=run_id,
    )


def _written_days(files: Files, base: str, run_id: str) -> list[str]:
    """The days ``run_id`` wrote under the partitioned table ``base`` (one listing)."""
    suffix = f"/version={run_id}"
    return sorted(
        leaf.removeprefix("day=").removesuffix(suffix)
        for leaf in files.directories(base, 2)
        if leaf.endswith(suffix) and _DAY_DIR.match(leaf.removesuffix(suffix))
    )


# A table without rows still has its columns: one empty file in the version of a null day.
NO_DAY: Final = "__HIVE_DEFAULT_PARTITION__"
_DAY_DIR: Final = re.compile(r"^day=\d{4}-\d{2}-\d{2}$")


def _pointer(report: str) -> str:
    """``report.html``: a page that sends the browser to the newest report. Rewritten in place
    by every run (a few bytes; object stores replace an object whole); the manifest names the
    report for anyone who needs the consistent one."""
    return (
        '<!doctype html><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0; url={report}">'
        f'<title>pynamesrv pipeline report</title><a href="{report}">{report}</a>\n'
    )
