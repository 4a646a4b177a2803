"""The pipeline job: read the journals once, derive the six tables, write Parquet and a report.

Why the shape: parsing JSON is the dominant cost, so the events are parsed once, projected to
the columns the tables use, and cached; every table is derived from that cache. Sessions and
running intervals are small and used by several tables, so they are cached too. Each stage
is one Spark action that writes one table, which makes "one line per stage with its timing"
an honest measure of where the time goes.

Runs the same on ``local[*]`` (embedded) and on a cluster: only the DataFrame API is used, so
executors need no Python packages, and paths may be anything Spark reads or writes
(``file:``, ``hdfs://``, ``s3a://``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pynamesrv.pipeline import TABLES
from pynamesrv.pipeline.distribution import topic_distribution
from pynamesrv.pipeline.divergence import namesrv_divergence
from pynamesrv.pipeline.exposure import stale_route_exposure
from pynamesrv.pipeline.paths import join_path
from pynamesrv.pipeline.report import collect_report_data, render_report, write_text
from pynamesrv.pipeline.runs import project, running_intervals, with_runs
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.sessions import (
    broker_availability,
    broker_sessions,
    detection_latency,
    sessions_full,
)

DEFAULT_HEARTBEAT_INTERVAL_S = 30.0

Progress = Callable[[str, float, str], None]  # stage, seconds, detail


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "pynamesrv-pipeline",
    shuffle_partitions: int | None = None,
) -> SparkSession:
    """The job's Spark session.

    ``master`` None means: whatever ``spark-submit`` configured, else ``local[*]`` embedded in
    this process; an already active session is returned as it is. Local sessions get few
    shuffle partitions (200 tiny tasks cost more than the work on a laptop) and 2 GB of
    driver memory for the event cache unless configured.
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
    if master is not None and master.startswith("local"):
        builder = builder.config("spark.ui.enabled", "false").config(
            "spark.sql.shuffle.partitions", str(shuffle_partitions or 8)
        )
        if not submitted:
            builder = builder.config(
                "spark.driver.memory", os.environ.get("PYNAMESRV_DRIVER_MEMORY", "2g")
            ).config(
                "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_quiet_log4j()}"
            )
    elif shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
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


@dataclass
class Derived:
    """The six tables of one journal set, lazily, with their shared inputs cached.

    Build with ``Derived.of``; call ``release`` when done to free the caches.
    """

    events: DataFrame
    runs: DataFrame
    sessions: DataFrame
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S

    @classmethod
    def of(
        cls, journal: DataFrame, heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    ) -> Derived:
        """``journal`` is ``schema.read_journal``'s frame."""
        events = project(journal).persist(StorageLevel.MEMORY_AND_DISK)
        runs = running_intervals(events).persist(StorageLevel.MEMORY_AND_DISK)
        tagged = with_runs(events, runs)
        sessions = sessions_full(tagged).persist(StorageLevel.MEMORY_AND_DISK)
        return cls(events, runs, sessions, heartbeat_interval_s)

    @property
    def tagged(self) -> DataFrame:
        """Events with their run's columns (a broadcast join over the cached events)."""
        return with_runs(self.events, self.runs)

    def table(self, name: str) -> DataFrame:
        """One of ``TABLES``, with exactly its documented columns."""
        if name == "broker_sessions":
            return broker_sessions(self.sessions)
        if name == "broker_availability":
            return broker_availability(self.sessions, self.runs)
        if name == "detection_latency":
            return detection_latency(self.events)
        if name == "stale_route_exposure":
            return stale_route_exposure(self.tagged, self.heartbeat_interval_s)
        if name == "namesrv_divergence":
            return namesrv_divergence(self.sessions, self.runs)
        if name == "topic_distribution":
            return topic_distribution(self.events)
        raise KeyError(name)

    def tables(self) -> dict[str, DataFrame]:
        """All six, lazily (nothing runs until an action)."""
        return {name: self.table(name) for name in TABLES}

    def release(self) -> None:
        """Free the caches (the session may run other jobs afterwards)."""
        for frame in (self.sessions, self.runs, self.events):
            frame.unpersist()


@dataclass
class PipelineResult:
    """What a run produced, for the CLI summary, the benchmark and the tests: row counts
    per table, the timing of every stage and the report's headline numbers."""

    out: str
    events: int
    instances: int
    rows: dict[str, int]
    timings: list[tuple[str, float]]
    report: str
    headline: dict[str, Any]

    @property
    def seconds(self) -> float:
        return sum(t for _, t in self.timings)


def run_pipeline(
    spark: SparkSession,
    journals: Sequence[str],
    out: str,
    *,
    from_ts: int | None = None,
    to_ts: int | None = None,
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
    progress: Progress | None = None,
) -> PipelineResult:
    """Read ``journals``, write the six tables under ``out/<table>/`` and ``out/report.html``."""
    timings: list[tuple[str, float]] = []

    def stage(name: str, action: Callable[[], Any], detail: Callable[[Any], str]) -> Any:
        start = time.perf_counter()
        value = action()
        seconds = time.perf_counter() - start
        timings.append((name, seconds))
        if progress is not None:
            progress(name, seconds, detail(value))
        return value

    journal = read_journal(spark, journals, from_ts=from_ts, to_ts=to_ts)
    derived = Derived.of(journal, heartbeat_interval_s)
    try:
        counts = stage(
            "read journal",
            lambda: derived.events.agg(
                F.count(F.lit(1)).alias("events"),
                F.countDistinct("ns").alias("instances"),
                F.min("ts").alias("first_ts"),
                F.max("ts").alias("last_ts"),
            ).first(),
            lambda r: f"{r['events']:,} events from {r['instances']} instance(s)",
        )
        stage("running intervals", derived.runs.count, lambda n: f"{n} run(s)")
        stage("sessions", derived.sessions.count, lambda n: f"{n:,} session(s)")
        rows: dict[str, int] = {}
        for name in TABLES:
            path = join_path(out, name)

            def write(name: str = name, path: str = path) -> int:
                derived.table(name).write.mode("overwrite").parquet(path)
                return spark.read.parquet(path).count()

            rows[name] = stage(name, write, lambda n: f"{n:,} row(s)")
        report_path = join_path(out, "report.html")

        def report() -> dict[str, Any]:
            data = collect_report_data(
                spark,
                out,
                counts["events"],
                counts["instances"],
                (counts["first_ts"], counts["last_ts"]),
            )
            write_text(spark, report_path, render_report(data))
            return data

        data = stage("report.html", report, lambda _: report_path)
    finally:
        derived.release()
    return PipelineResult(
        out=out,
        events=int(counts["events"]),
        instances=int(counts["instances"]),
        rows=rows,
        timings=timings,
        report=report_path,
        headline=data["headline"],
    )
