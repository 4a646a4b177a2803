"""broker_sessions, broker_availability and detection_latency (pipeline-semantics.md).

The three answer one question from different sides: when was a broker routed, and how did
routing end. Sessions are computed once from the few boundary events (first registrations and
removals) and reused by availability, exposure and divergence, so the bulk of the journal
(heartbeats) is never sorted here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.pipeline.runs import (
    DAY_MS,
    IDENTITY,
    LOST,
    REGISTERED,
    REMOVED,
    STOPPED,
    as_date,
    day_start,
    days_of,
    overlap_ms,
)

SESSION_COLUMNS = (
    "ns",
    "cluster",
    "broker_name",
    "broker_id",
    "broker_addr",
    "start_ts",
    "end_ts",
    "end_reason",
    "duration_s",
)
AVAILABILITY_COLUMNS = (
    "ns",
    "cluster",
    "broker_name",
    "broker_id",
    "broker_addr",
    "day",
    "routed_s",
    "routed_fraction",
    "outages",
    "mttr_s",
)
LATENCY_COLUMNS = (
    "ns",
    "cluster",
    "broker_name",
    "broker_id",
    "broker_addr",
    "removed_ts",
    "last_heartbeat_ts",
    "latency_s",
    "reason",
)
BROKER = ("ns", "cluster", "broker_name", "broker_id", "broker_addr")


def sessions_full(events: DataFrame) -> DataFrame:
    """Every session with the internal columns other tables need.

    ``events`` carry run columns (``runs.with_runs``). Adds to the documented columns:
    start_seq, run, eff_end_ts (end_ts, or the instance's last event for an open session).

    A removal ends a session only inside the session's run and before its ``server_stopped``:
    a removal in a later run belongs to a later life of the instance.
    """
    marks = events.where(
        ((F.col("type") == REGISTERED) & F.col("first")) | (F.col("type") == REMOVED)
    )
    after = (
        Window.partitionBy(*IDENTITY).orderBy("ts", "seq").rowsBetween(1, Window.unboundedFollowing)
    )
    removal = F.min(
        F.when(
            F.col("type") == REMOVED,
            F.struct("ts", "seq", F.col("run").alias("run"), "reason"),
        )
    ).over(after)
    starts = marks.withColumn("removal", removal).where(F.col("type") == REGISTERED)
    ends_here = (
        F.col("removal").isNotNull()
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
    return starts.select(
        "ns",
        "cluster",
        "broker_name",
        "broker_id",
        "broker_addr",
        F.col("ts").alias("start_ts"),
        end_ts.alias("end_ts"),
        end_reason.alias("end_reason"),
        ((end_ts - F.col("ts")) / 1000.0).alias("duration_s"),
        F.col("seq").alias("start_seq"),
        "run",
        F.coalesce(end_ts, F.col("run_end_ts")).alias("eff_end_ts"),
    )


def broker_sessions(sessions: DataFrame) -> DataFrame:
    """The documented columns of ``sessions_full``."""
    return sessions.select(*SESSION_COLUMNS)


def detection_latency(events: DataFrame) -> DataFrame:
    """One row per ``broker_removed``; a null last heartbeat gives a null latency."""
    return events.where(F.col("type") == REMOVED).select(
        "ns",
        "cluster",
        "broker_name",
        "broker_id",
        "broker_addr",
        F.col("ts").alias("removed_ts"),
        "last_heartbeat_ts",
        ((F.col("ts") - F.col("last_heartbeat_ts")) / 1000.0).alias("latency_s"),
        "reason",
    )


def broker_availability(sessions: DataFrame, runs: DataFrame) -> DataFrame:
    """Routed time, outages and mean time to recover per broker and UTC day.

    Sums are kept in integer ms and divided once, so the seconds are exact.
    """
    day = F.col("day_ms")
    next_day = day + F.lit(DAY_MS)

    covered = (
        runs.select(
            "ns",
            "start_ts",
            "end_ts",
            F.explode(days_of(F.col("start_ts"), F.col("end_ts"))).alias("day_ms"),
        )
        .groupBy("ns", "day_ms")
        .agg(
            F.sum(overlap_ms(F.col("start_ts"), F.col("end_ts"), day, next_day)).alias("covered_ms")
        )
    )
    routed = (
        sessions.select(
            *BROKER,
            "start_ts",
            "eff_end_ts",
            F.explode(days_of(F.col("start_ts"), F.col("eff_end_ts"))).alias("day_ms"),
        )
        .groupBy(*BROKER, "day_ms")
        .agg(
            F.sum(overlap_ms(F.col("start_ts"), F.col("eff_end_ts"), day, next_day)).alias(
                "routed_ms"
            )
        )
    )
    following = Window.partitionBy(*IDENTITY).orderBy("start_ts", "start_seq")
    outages = (
        sessions.withColumn("next_start_ts", F.lead("start_ts").over(following))
        .where(F.col("end_ts").isNotNull() & ~F.col("end_reason").isin(STOPPED, LOST))
        .groupBy(*BROKER, day_start(F.col("end_ts")).alias("day_ms"))
        .agg(
            F.count(F.lit(1)).alias("outages"),
            F.avg(F.col("next_start_ts") - F.col("end_ts")).alias("mttr_ms"),
        )
    )
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
