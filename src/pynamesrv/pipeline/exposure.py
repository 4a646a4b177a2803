"""stale_route_exposure: route answers that still listed a silent broker (pipeline-semantics.md).

Plan, and why it stays on the DataFrame API:
1. Stale intervals per session, from one window over each broker's heartbeats in a run:
   ``[h_i + H, min(h_{i+1}, session end))``. ``lead`` gives the next heartbeat (or the removal
   that ends the session); a running ``last(ignorenulls)`` of start/end markers tells whether a
   heartbeat is inside a session. The heartbeats are the bulk of the journal; this is the
   only sort they go through.
2. Topic membership per broker name as intervals: each registration naming the topic opens
   one, the next ``topic_removed`` of the topic (or the end of the run) closes it (a window
   per topic).
3. Stale ∩ membership (an equi-join on broker name, a range filter), cut at minute borders
   with ``sequence`` + ``explode``.
4. Union length per topic-minute: sort by start, keep a running max of the ends of the rows
   before; each row adds ``max(0, end - max(start, running max))``. No collect().
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.pipeline.runs import HEARTBEAT, MINUTE_MS, REGISTERED, REMOVED

EXPOSURE_COLUMNS = (
    "ns",
    "topic",
    "minute",
    "stale_brokers",
    "queries",
    "stale_seconds",
    "exposed_queries",
)


def stale_intervals(events: DataFrame, heartbeat_interval_s: float) -> DataFrame:
    """ns, cluster, broker_name, broker_addr, stale_from, stale_until (epoch ms, non-empty).

    ``events`` carry run columns. Sessions never cross a run, so the window is per broker
    identity and run; a heartbeat with no next event in its run is followed by the run's end
    (``server_stopped``, the last event before a crash, or the instance's last event when the
    session is still open).
    """
    interval_ms = round(heartbeat_interval_s * 1000)
    beats = events.where(F.col("type").isin(REGISTERED, HEARTBEAT, REMOVED))
    in_order = Window.partitionBy("ns", "cluster", "broker_addr", "run").orderBy("ts", "seq")
    marker = F.when((F.col("type") == REGISTERED) & F.col("first"), F.lit(True)).when(
        F.col("type") == REMOVED, F.lit(False)
    )
    in_session = F.last(marker, ignorenulls=True).over(
        in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    following = F.coalesce(F.lead("ts").over(in_order), F.col("run_end_ts"))
    frame = beats.select(
        "ns",
        "cluster",
        "broker_name",
        "broker_addr",
        "type",
        in_session.alias("in_session"),
        (F.col("ts") + F.lit(interval_ms)).alias("stale_from"),
        following.alias("stale_until"),
    )
    return frame.where(
        (F.col("type") != REMOVED)
        & F.coalesce(F.col("in_session"), F.lit(False))
        & (F.col("stale_from") < F.col("stale_until"))
    ).drop("type", "in_session")


def membership(events: DataFrame) -> DataFrame:
    """ns, broker_name, topic, member_from, member_until: when a broker name has a topic.

    Opened by any registration of the name that adds or changes the topic, closed by the first
    later ``topic_removed`` of the topic or by the end of the instance's running interval,
    whichever comes first; openings that share their close merge into one interval.

    The run end is a reading the semantics page does not state ("until the first later
    topic_removed"): a restarted name server starts with an empty route table, so a topic is
    not on a broker's route until a registration after the restart names it again. The
    generator's ground truth reads it the same way. ``events`` carry run columns.
    """
    named = F.array_union(
        F.coalesce(F.col("topics_added"), F.array().cast("array<string>")),
        F.coalesce(F.col("topics_changed"), F.array().cast("array<string>")),
    )
    opens = events.where((F.col("type") == REGISTERED) & (F.size(named) > 0)).select(
        "ns",
        "ts",
        "seq",
        "broker_name",
        F.explode(named).alias("topic"),
        F.lit(True).alias("open"),
        "run_end_ts",
    )
    closes = events.where(F.col("type") == "topic_removed").select(
        "ns",
        "ts",
        "seq",
        F.lit(None).cast("string").alias("broker_name"),
        "topic",
        F.lit(False).alias("open"),
        "run_end_ts",
    )
    later = (
        Window.partitionBy("ns", "topic")
        .orderBy("ts", "seq")
        .rowsBetween(1, Window.unboundedFollowing)
    )
    close = F.min(F.when(~F.col("open"), F.col("ts"))).over(later)
    until = F.least(F.coalesce(close, F.col("run_end_ts")), F.col("run_end_ts"))
    spans = (
        opens.unionByName(closes)
        .withColumn("member_until", until)
        .where(F.col("open"))
        .groupBy("ns", "broker_name", "topic", "member_until")
        .agg(F.min("ts").alias("member_from"))
    )
    return spans.where(F.col("member_from") < F.col("member_until"))


def stale_route_exposure(events: DataFrame, heartbeat_interval_s: float = 30.0) -> DataFrame:
    """One row per (ns, topic, minute) with stale seconds > 0."""
    stale = stale_intervals(events, heartbeat_interval_s).alias("s")
    member = membership(events).alias("m")
    overlapping = (
        (F.col("s.ns") == F.col("m.ns"))
        & (F.col("s.broker_name") == F.col("m.broker_name"))
        & (F.col("s.stale_from") < F.col("m.member_until"))
        & (F.col("m.member_from") < F.col("s.stale_until"))
    )
    start = F.greatest(F.col("s.stale_from"), F.col("m.member_from"))
    end = F.least(F.col("s.stale_until"), F.col("m.member_until"))
    routed = stale.join(member, overlapping).select(
        F.col("s.ns").alias("ns"),
        F.col("m.topic").alias("topic"),
        F.col("s.broker_addr").alias("broker_addr"),
        start.alias("a"),
        end.alias("b"),
    )
    minute_of = F.floor(F.col("a") / F.lit(MINUTE_MS)).cast("long") * F.lit(MINUTE_MS)
    last_minute = F.floor((F.col("b") - 1) / F.lit(MINUTE_MS)).cast("long") * F.lit(MINUTE_MS)
    pieces = routed.select(
        "ns",
        "topic",
        "broker_addr",
        "a",
        "b",
        F.explode(F.sequence(minute_of, last_minute, F.lit(MINUTE_MS).cast("long"))).alias(
            "minute"
        ),
    ).select(
        "ns",
        "topic",
        "broker_addr",
        "minute",
        F.greatest("a", "minute").alias("a"),
        F.least("b", F.col("minute") + F.lit(MINUTE_MS)).alias("b"),
    )
    by_start = (
        Window.partitionBy("ns", "topic", "minute")
        .orderBy("a", "b")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    reach = F.coalesce(F.max("b").over(by_start), F.col("a"))
    added = F.greatest(F.col("b") - F.greatest(F.col("a"), reach), F.lit(0).cast("long"))
    per_minute = (
        pieces.select("ns", "topic", "minute", "broker_addr", added.alias("added_ms"))
        .groupBy("ns", "topic", "minute")
        .agg(
            F.sum("added_ms").alias("stale_ms"),
            F.countDistinct("broker_addr").alias("stale_brokers"),
        )
        .where(F.col("stale_ms") > 0)
    )
    queries = (
        events.where(F.col("type") == "route_queries")
        .select(
            "ns",
            (F.col("ts") - F.lit(MINUTE_MS)).alias("minute"),
            F.explode("counts").alias("topic", "n"),
        )
        .groupBy("ns", "topic", "minute")
        .agg(F.sum("n").alias("queries"))
    )
    stale_seconds = F.col("stale_ms") / 1000.0
    query_count = F.coalesce(F.col("queries"), F.lit(0).cast("long"))
    return per_minute.join(queries, ["ns", "topic", "minute"], "left").select(
        "ns",
        "topic",
        "minute",
        "stale_brokers",
        query_count.alias("queries"),
        stale_seconds.alias("stale_seconds"),
        (query_count * stale_seconds / 60.0).alias("exposed_queries"),
    )
