"""Instance running intervals and the interval each event belongs to (pipeline-semantics.md).

Every table needs to know when an instance was running: sessions end where a run ends, the
availability denominator is running time, divergence only counts while both instances run.

A run is found without sorting the journal. Its boundaries come from the lifecycle events
(``server_started`` / ``server_stopped``, a handful per instance and month), numbered with a
window and broadcast; each event finds its run with a range condition on ``(ts, seq)``. What
a run needs from the bulk of the events, its first and last timestamp, is summed per hour
(``run_hours``), so an incremental run recomputes only the hours it read and keeps the
others: both tables stay tiny (instances x hours) however long the history is.

Order within an instance is ``(ts, seq)``: ``seq`` is the writer's per-process line counter
(0 when absent), which the semantics page allows in place of the file position.

Events before an instance's first ``server_started`` (a journal cut by ``--from``, or one
whose start was lost) form run 0, starting at the instance's first event. The semantics page
does not cover that case; without it such events would belong to no run at all.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRecovered,
    BrokerRegistered,
    BrokerRemoved,
    RouteQueries,
    ServerStarted,
    ServerStopped,
    Snapshot,
    TopicRemoved,
)

DAY_MS: Final = 86_400_000
HOUR_MS: Final = 3_600_000
MINUTE_MS: Final = 60_000
IDENTITY: Final = ("ns", "cluster", "broker_addr")  # a broker on an instance (5.x liveness key)

# Line types, named once by ``namesrv.events``.
REGISTERED: Final = BrokerRegistered.TYPE
RECOVERED: Final = BrokerRecovered.TYPE
HEARTBEAT: Final = BrokerHeartbeat.TYPE
REMOVED: Final = BrokerRemoved.TYPE
STARTED: Final = ServerStarted.TYPE
STOPPED: Final = ServerStopped.TYPE
SNAPSHOT: Final = Snapshot.TYPE
TOPIC_REMOVED: Final = TopicRemoved.TYPE
ROUTE_QUERIES: Final = RouteQueries.TYPE
# The pipeline's own end reason: a run that ended without server_stopped (a crash).
LOST: Final = "server_lost"

RUN_COLUMNS: Final = (
    "run_start_ts",
    "run_end_ts",
    "run_end_reason",
    "run_stop_key",
    "ns_last_ts",
)


def key(prefix: str = "") -> Column:
    """The order of an event within its instance, as one comparable value."""
    return F.struct(F.col(f"{prefix}ts").alias("ts"), F.col(f"{prefix}seq").alias("seq"))


def complete_snapshots(events: DataFrame) -> DataFrame:
    """The ``snapshot`` lines of ``events`` that belong to a complete snapshot, with
    ``snapshot_seq``: the ``seq`` of its first piece, which with ``ns`` and ``ts`` names the
    snapshot (docs/journal.md, ``snapshot``: piece ``part`` of ``parts``, consecutive lines of
    one ``ts``; a line without ``part`` is a whole snapshot). A set missing a piece (a crash
    cut it) is left out: readers take the complete snapshot before it."""
    part = F.coalesce(F.col("part"), F.lit(1))
    parts = F.coalesce(F.col("parts"), F.lit(1))
    first = F.col("seq") - part + F.lit(1)
    whole = Window.partitionBy("ns", "ts", "snapshot_seq")
    return (
        events.where(F.col("type") == SNAPSHOT)
        .withColumn("snapshot_seq", first)
        .withColumn("pieces_seen", F.size(F.collect_set(part).over(whole)))
        .where(F.col("pieces_seen") == parts)
        .drop("pieces_seen")
    )


def lifecycle_of(events: DataFrame) -> DataFrame:
    """ns, ts, seq, type of the ``server_started`` / ``server_stopped`` events."""
    return events.where(F.col("type").isin(STARTED, STOPPED)).select("ns", "ts", "seq", "type")


def run_keys(lifecycle: DataFrame) -> DataFrame:
    """ns, run (1, 2, …), from_key, until_key (the next start; null = unbounded)."""
    by_ns = Window.partitionBy("ns").orderBy("ts", "seq")
    return lifecycle.where(F.col("type") == STARTED).select(
        "ns",
        F.row_number().over(by_ns).alias("run"),
        key().alias("from_key"),
        F.lead(key()).over(by_ns).alias("until_key"),
    )


def tag_runs(events: DataFrame, keys: DataFrame) -> DataFrame:
    """``events`` with the ``run`` each belongs to (0 before the instance's first start)."""
    r = F.broadcast(keys.alias("r"))
    e = events.alias("e")
    ts, seq = F.col("e.ts"), F.col("e.seq")
    # (ts, seq) >= from and < until, spelled with scalars: this runs once per event, and two
    # structs per event and comparison cost more than the comparisons.
    after_start = (ts > F.col("r.from_key.ts")) | (
        (ts == F.col("r.from_key.ts")) & (seq >= F.col("r.from_key.seq"))
    )
    before_next = (
        F.col("r.until_key").isNull()
        | (ts < F.col("r.until_key.ts"))
        | ((ts == F.col("r.until_key.ts")) & (seq < F.col("r.until_key.seq")))
    )
    inside = (F.col("e.ns") == F.col("r.ns")) & after_start & before_next
    joined = e.join(r, inside, "left")
    return joined.select("e.*", F.coalesce(F.col("r.run"), F.lit(0)).alias("run"))


def run_hours(tagged: DataFrame) -> DataFrame:
    """ns, run, hour_ms, first_ts, last_ts, lines: each run's events summed per hour."""
    return tagged.groupBy(
        "ns", "run", (F.floor(F.col("ts") / HOUR_MS) * HOUR_MS).cast("long").alias("hour_ms")
    ).agg(
        F.min("ts").alias("first_ts"),
        F.max(F.coalesce("last_ts", "ts")).alias("last_ts"),
        F.sum(F.coalesce("lines", F.lit(1))).cast("long").alias("lines"),
    )


def running_intervals(keys: DataFrame, hours: DataFrame, lifecycle: DataFrame) -> DataFrame:
    """One row per run: ns, run, from_key, until_key, start_ts, end_ts, end_reason
    (``server_stopped``, ``server_lost`` or null = still running at the end of the data),
    stop_key (the ``server_stopped`` that ended it) and ns_last_ts.

    Small (one row per start); callers cache and broadcast it.
    """
    stats = hours.groupBy("ns", "run").agg(
        F.min("first_ts").alias("start_ts"), F.max("last_ts").alias("last_ts")
    )
    stops = (
        tag_runs(lifecycle.where(F.col("type") == STOPPED), keys)
        .groupBy("ns", "run")
        .agg(F.min(key()).alias("stop_key"))
    )
    first_start = keys.groupBy("ns").agg(F.min("from_key").alias("first_key"))
    runs = (
        stats.join(keys, ["ns", "run"], "left")
        .join(stops, ["ns", "run"], "left")
        .join(F.broadcast(first_start), "ns", "left")
        .withColumn(
            "until_key",
            F.when(F.col("run") == 0, F.col("first_key")).otherwise(F.col("until_key")),
        )
    )
    by_run = Window.partitionBy("ns").orderBy("run")
    has_next = F.lead("run").over(by_run).isNotNull()
    return runs.select(
        "ns",
        "run",
        "from_key",
        "until_key",
        "start_ts",
        F.coalesce(F.col("stop_key.ts"), F.col("last_ts")).alias("end_ts"),
        F.when(F.col("stop_key").isNotNull(), F.lit(STOPPED))
        .when(has_next, F.lit(LOST))
        .alias("end_reason"),
        "stop_key",
        F.max("last_ts").over(Window.partitionBy("ns")).alias("ns_last_ts"),
    )


def with_runs(tagged: DataFrame, runs: DataFrame) -> DataFrame:
    """Tagged events with run_start_ts, run_end_ts, run_end_reason, run_stop_key, ns_last_ts."""
    columns = runs.select(
        "ns",
        "run",
        F.col("start_ts").alias("run_start_ts"),
        F.col("end_ts").alias("run_end_ts"),
        F.col("end_reason").alias("run_end_reason"),
        F.col("stop_key").alias("run_stop_key"),
        "ns_last_ts",
    )
    return tagged.join(F.broadcast(columns), ["ns", "run"], "left")


def day_start(ms: Column) -> Column:
    """Midnight UTC of the day holding ``ms`` (epoch ms; arithmetic, no time zone)."""
    return F.floor(ms / F.lit(DAY_MS)).cast("long") * F.lit(DAY_MS)


def days_of(start: Column, end: Column) -> Column:
    """Midnights of every UTC day that ``[start, end]`` touches (for ``explode``)."""
    return F.sequence(day_start(start), day_start(end), F.lit(DAY_MS).cast("long"))


def overlap_ms(start: Column, end: Column, lo: Column, hi: Column) -> Column:
    """Length of ``[start, end) ∩ [lo, hi)`` in ms, never negative."""
    return F.greatest(F.least(end, hi) - F.greatest(start, lo), F.lit(0).cast("long"))


def as_date(midnight_ms: Column) -> Column:
    """A UTC midnight in ms as a DATE, independent of the session time zone."""
    return F.date_from_unix_date((midnight_ms / F.lit(DAY_MS)).cast("int"))
