"""broker_sessions, broker_availability and detection_latency (pipeline-semantics.md).

The three answer one question from different sides: when was a broker routed, and how did
routing end. Sessions are computed once from the few boundary events (first registrations,
``broker_recovered`` lines and removals) and reused by availability, exposure and divergence,
so the bulk of the journal (heartbeats) is never sorted here.

Incremental runs (``derive.py``) recompute the days from R on. A session is filed under the day
it can no longer change (``settle_ms``): its end, or, while it is open or an outage still
waits for the broker to come back (its mean time to recover), the instance's last event. A
run that reads new data of an instance therefore finds, in the partitions it recomputes,
every session the new data can change.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.pipeline.runs import (
    DAY_MS,
    IDENTITY,
    LOST,
    RECOVERED,
    REGISTERED,
    REMOVED,
    STOPPED,
    as_date,
    day_start,
    days_of,
    overlap_ms,
)

# A broker as one instance saw it: the key of every table of this module.
BROKER_ON_INSTANCE = ("ns", "cluster", "broker_name", "broker_id", "broker_addr")

# broker_sessions.start_reason: a first registration, or a warm restart's broker_recovered.
START_REGISTERED = "registered"
START_RECOVERED = "recovered"

# What a later run takes over of a session (``derive.Carry``): its start, end and what
# follows it. ``run`` is found again from the start's (ts, seq).
STATE_COLUMNS = (
    *BROKER_ON_INSTANCE,
    "start_ts",
    "start_seq",
    "start_reason",
    "end_ts",
    "end_reason",
    "eff_end_ts",
    "next_start_ts",
)

SESSION_COLUMNS = (
    *BROKER_ON_INSTANCE,
    "start_ts",
    "start_reason",
    "end_ts",
    "end_reason",
    "duration_s",
)
AVAILABILITY_COLUMNS = (
    *BROKER_ON_INSTANCE,
    "day",
    "routed_s",
    "routed_fraction",
    "outages",
    "mttr_s",
)
LATENCY_COLUMNS = (
    *BROKER_ON_INSTANCE,
    "removed_ts",
    "last_heartbeat_ts",
    "latency_s",
    "reason",
)
BROKER = ("ns", "cluster", "broker_name", "broker_id", "broker_addr")


def is_start(type_: Column, first: Column) -> Column:
    """A line that starts a session: a first registration or a warm restart's
    ``broker_recovered`` (a ``broker_registered`` with ``recovered`` true is first=false: the
    session it continues began at the broker_recovered line)."""
    return ((type_ == REGISTERED) & F.coalesce(first, F.lit(False))) | (type_ == RECOVERED)


def marks(events: DataFrame) -> DataFrame:
    """The events that start or end sessions: first registrations, ``broker_recovered``
    lines and removals."""
    return events.where(is_start(F.col("type"), F.col("first")) | (F.col("type") == REMOVED))


def sessions_full(marks: DataFrame) -> DataFrame:
    """Every session started by ``marks`` with the internal columns other tables need.

    ``marks`` (see ``marks``) carry run columns (``runs.with_runs``). Adds to the documented
    columns: start_seq, run, eff_end_ts (end_ts, or the instance's last event for an open
    session).

    A removal ends a session only when it is the identity's next mark after the start,
    inside the session's run and before its ``server_stopped``: a removal in a later run
    belongs to a later life of the instance, and a removal with no session open (its session
    already ended with its run) ends nothing.
    """
    in_order = Window.partitionBy(*IDENTITY).orderBy("ts", "seq")
    following = F.lead(
        F.struct("ts", "seq", F.col("run").alias("run"), "reason", F.col("type").alias("type"))
    ).over(in_order)
    starts = marks.withColumn("removal", following).where(is_start(F.col("type"), F.col("first")))
    ends_here = (
        F.col("removal").isNotNull()
        & (F.col("removal.type") == REMOVED)
        & (F.col("removal.run") == F.col("run"))
        & (
            F.col("run_stop_key").isNull()
            | (
                F.struct(F.col("removal.ts").alias("ts"), F.col("removal.seq").alias("seq"))
                < F.col("run_stop_key")
            )
        )
    )
    end_ts = F.when(ends_here, F.col("removal.ts")).when(
        F.col("run_end_reason").isNotNull(), F.col("run_end_ts")
    )
    end_reason = F.when(ends_here, F.col("removal.reason")).otherwise(F.col("run_end_reason"))
    start_reason = F.when(F.col("type") == RECOVERED, F.lit(START_RECOVERED)).otherwise(
        F.lit(START_REGISTERED)
    )
    return starts.select(
        *BROKER_ON_INSTANCE,
        F.col("ts").alias("start_ts"),
        start_reason.alias("start_reason"),
        end_ts.alias("end_ts"),
        end_reason.alias("end_reason"),
        ((end_ts - F.col("ts")) / 1000.0).alias("duration_s"),
        F.col("seq").alias("start_seq"),
        "run",
        F.coalesce(end_ts, F.col("run_end_ts")).alias("eff_end_ts"),
    )


def is_outage(end_ts: Column, end_reason: Column) -> Column:
    """A session that ended for a reason of the broker's (not a stop or crash of the server)."""
    return end_ts.isNotNull() & ~end_reason.isin(STOPPED, LOST)


def with_next_start(sessions: DataFrame) -> DataFrame:
    """Adds next_start_ts: the start of the identity's next session (null: none yet)."""
    following = Window.partitionBy(*IDENTITY).orderBy("start_ts", "start_seq")
    return sessions.withColumn("next_start_ts", F.lead("start_ts").over(following))


def settle_ms(end_ts: Column, end_reason: Column, eff_end_ts: Column, next_start: Column,
              ns_last_ts: Column) -> Column:  # fmt: skip
    """When a session's rows stop changing: its end; while open, or while an outage waits
    for the next start (its time to recover), the instance's last event."""
    outage = is_outage(end_ts, end_reason)
    return (
        F.when(end_ts.isNull(), eff_end_ts)
        .when(outage & next_start.isNull(), ns_last_ts)
        .when(outage, next_start)
        .otherwise(end_ts)
    )


def broker_sessions(sessions: DataFrame) -> DataFrame:
    """The documented columns of ``sessions_full``, plus the partition ``day``: the UTC day
    of end_ts, or of the instance's last event while the session is open."""
    day = as_date(day_start(F.coalesce(F.col("end_ts"), F.col("eff_end_ts"))))
    return sessions.select(*SESSION_COLUMNS, day.alias("day"))


def detection_latency(events: DataFrame) -> DataFrame:
    """One row per ``broker_removed``; a null last heartbeat gives a null latency. Partition
    ``day``: the day of removed_ts."""
    return events.where(F.col("type") == REMOVED).select(
        *BROKER_ON_INSTANCE,
        F.col("ts").alias("removed_ts"),
        "last_heartbeat_ts",
        ((F.col("ts") - F.col("last_heartbeat_ts")) / 1000.0).alias("latency_s"),
        "reason",
        as_date(day_start(F.col("ts"))).alias("day"),
    )


def broker_availability(
    sessions: DataFrame, runs: DataFrame, start: int | None = None
) -> DataFrame:
    """Routed time, outages and mean time to recover per broker and UTC day (from the day of
    ``start`` on, when given: ``sessions`` then hold every session that reaches it).

    ``sessions`` carry next_start_ts (``with_next_start``). Sums are kept in integer ms and
    divided once, so the seconds are exact.
    """
    day = F.col("day_ms")
    next_day = day + F.lit(DAY_MS)
    lo = F.lit(start if start is not None else -(2**62)).cast("long")

    covered = (
        runs.where(F.col("end_ts") >= lo)
        .select(
            "ns",
            "start_ts",
            "end_ts",
            F.explode(days_of(F.greatest(F.col("start_ts"), lo), F.col("end_ts"))).alias("day_ms"),
        )
        .groupBy("ns", "day_ms")
        .agg(
            F.sum(overlap_ms(F.col("start_ts"), F.col("end_ts"), day, next_day)).alias("covered_ms")
        )
    )
    routed = (
        sessions.where(F.col("eff_end_ts") >= lo)
        .select(
            *BROKER,
            "start_ts",
            "eff_end_ts",
            F.explode(days_of(F.greatest(F.col("start_ts"), lo), F.col("eff_end_ts"))).alias(
                "day_ms"
            ),
        )
        .groupBy(*BROKER, "day_ms")
        .agg(
            F.sum(overlap_ms(F.col("start_ts"), F.col("eff_end_ts"), day, next_day)).alias(
                "routed_ms"
            )
        )
    )
    outages = outage_stats(sessions.where(F.col("end_ts") >= lo))
    rows = routed.join(outages, [*BROKER, "day_ms"], "full_outer").join(
        covered, ["ns", "day_ms"], "left"
    )
    routed_ms = F.coalesce(F.col("routed_ms"), F.lit(0).cast("long"))
    outage_count = F.coalesce(F.col("outages"), F.lit(0).cast("long"))
    return rows.where((routed_ms > 0) | (outage_count > 0)).select(
        *BROKER,
        as_date(day).alias("day"),
        (routed_ms / 1000.0).alias("routed_s"),
        F.when(F.col("covered_ms") > 0, routed_ms / F.col("covered_ms")).alias("routed_fraction"),
        outage_count.alias("outages"),
        (F.col("mttr_ms") / 1000.0).alias("mttr_s"),
    )


def outage_stats(sessions: DataFrame) -> DataFrame:
    """BROKER, day_ms, outages, mttr_ms: the outages that ended each day, and the mean gap
    from such an end to the next start (null when none has come yet)."""
    return (
        sessions.where(is_outage(F.col("end_ts"), F.col("end_reason")))
        .groupBy(*BROKER, day_start(F.col("end_ts")).alias("day_ms"))
        .agg(
            F.count(F.lit(1)).alias("outages"),
            F.avg(F.col("next_start_ts") - F.col("end_ts")).alias("mttr_ms"),
        )
    )
