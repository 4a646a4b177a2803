"""namesrv_divergence: when two name servers disagreed on a cluster's live brokers.

Change points, not time steps: every session start is +1 and every end -1 for its
(cluster, instance, address). For each pair of instances the two running counts of an
address say whether that address is live on one side only; the number of such addresses
changes only at those points. Summed per pair and time, a running sum gives the size of
the difference; run starts and ends (also +1/-1) say whether both instances are running.
A row is a maximal stretch where the difference is non-empty while both run: consecutive
change points with the same flag are grouped with a running count of flag changes
(gaps-and-islands), all with window functions.

The arrays name every address that was live on one side only at any moment of the
interval (not only at its start: a master that expires on one side seconds into it is one
of the differences); they come from a range join of the intervals with the per-address state
segments that overlap them, so nothing is collected.

From a start R (incremental runs, ``derive.py``): the sessions and runs that reach R are
clamped to begin at R, which gives the live sets and running state at R exactly; an interval
found open at R continues the one the previous run published across R (same pair), keeping
its start, its arrays joined with those found from R on (``continue_across``). Rows are
filed under the day of their end.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.pipeline.runs import as_date, day_start

DIVERGENCE_COLUMNS = (
    "cluster",
    "ns_a",
    "ns_b",
    "start_ts",
    "end_ts",
    "duration_s",
    "only_in_a",
    "only_in_b",
)
PAIR = ("cluster", "ns_a", "ns_b")


def cluster_instances(sessions: DataFrame) -> DataFrame:
    """cluster, ns: the instances that have sessions of each cluster (tiny)."""
    return sessions.select("cluster", "ns").distinct()


def _sides(present: DataFrame) -> DataFrame:
    """cluster, ns, ns_a, ns_b, is_a: each instance once per pair it is in, for the pairs of
    instances that both have sessions of the cluster (tiny: clusters x instances^2)."""
    pairs = (
        present.withColumnRenamed("ns", "ns_a")
        .join(present.withColumnRenamed("ns", "ns_b"), "cluster")
        .where(F.col("ns_a") < F.col("ns_b"))
    )
    return pairs.select(
        "cluster", F.col("ns_a").alias("ns"), "ns_a", "ns_b", F.lit(True).alias("is_a")
    ).unionByName(
        pairs.select(
            "cluster", F.col("ns_b").alias("ns"), "ns_a", "ns_b", F.lit(False).alias("is_a")
        )
    )


def namesrv_divergence(
    sessions: DataFrame,
    runs: DataFrame,
    present: DataFrame | None = None,
    start: int | None = None,
) -> DataFrame:
    """One row per maximal interval in which two instances' live sets of a cluster differ.

    ``present`` (``cluster_instances`` of all history) names the pairs; it defaults to the
    ``sessions`` given. With ``start``, ``sessions`` and ``runs`` must hold every session and
    run that reaches it, and the result starts there (see the module's docstring).
    """
    if present is None:
        present = cluster_instances(sessions)
    if start is not None:
        lo = F.lit(start).cast("long")
        sessions = sessions.where(F.col("end_ts").isNull() | (F.col("end_ts") >= lo)).withColumn(
            "start_ts", F.greatest(F.col("start_ts"), lo)
        )
        runs = runs.where(F.col("end_ts") >= lo).withColumn(
            "start_ts", F.greatest(F.col("start_ts"), lo)
        )
    zero = F.lit(0).cast("long")
    one = F.lit(1).cast("long")
    # Live-set changes (+1 at a session start, -1 at its end; open sessions never end, the
    # common running time cuts them) and running-time changes (+1 at a run start, -1 at its
    # end; address null), per cluster the instance has sessions of.
    starts = sessions.select(
        "cluster", "ns", "broker_addr", F.col("start_ts").alias("ts"), one.alias("d"),
        zero.alias("r"),
    )  # fmt: skip
    ends = sessions.where(F.col("end_ts").isNotNull()).select(
        "cluster", "ns", "broker_addr", F.col("end_ts").alias("ts"), (-one).alias("d"),
        zero.alias("r"),
    )  # fmt: skip
    run_bounds = runs.join(F.broadcast(present), "ns").select(
        "cluster", "ns", F.lit(None).cast("string").alias("broker_addr"), "start_ts", "end_ts"
    )
    run_starts = run_bounds.select(
        "cluster", "ns", "broker_addr", F.col("start_ts").alias("ts"), zero.alias("d"),
        one.alias("r"),
    )  # fmt: skip
    run_ends = run_bounds.select(
        "cluster", "ns", "broker_addr", F.col("end_ts").alias("ts"), zero.alias("d"),
        (-one).alias("r"),
    )  # fmt: skip
    changes = starts.unionByName(ends).unionByName(run_starts).unionByName(run_ends)

    side_a = F.col("is_a")
    per_addr = (
        changes.join(F.broadcast(_sides(present)), ["cluster", "ns"])
        .groupBy(*PAIR, "broker_addr", "ts")
        .agg(
            F.sum(F.when(side_a, F.col("d")).otherwise(zero)).alias("d_a"),
            F.sum(F.when(side_a, zero).otherwise(F.col("d"))).alias("d_b"),
            F.sum(F.when(side_a, F.col("r")).otherwise(zero)).alias("r_a"),
            F.sum(F.when(side_a, zero).otherwise(F.col("r"))).alias("r_b"),
        )
    )
    addr_order = Window.partitionBy(*PAIR, "broker_addr").orderBy("ts")
    upto = addr_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    live_a = F.sum("d_a").over(upto) > 0
    live_b = F.sum("d_b").over(upto) > 0
    states = per_addr.select(
        *PAIR,
        "broker_addr",
        "ts",
        "r_a",
        "r_b",
        F.lead("ts").over(addr_order).alias("until_ts"),
        live_a.alias("live_a"),
        live_b.alias("live_b"),
    ).withColumn(
        "differs",
        (F.col("broker_addr").isNotNull() & (F.col("live_a") != F.col("live_b"))).cast("int"),
    )
    steps = states.select(
        *PAIR,
        "ts",
        "r_a",
        "r_b",
        (F.col("differs") - F.coalesce(F.lag("differs").over(addr_order), F.lit(0))).alias("dd"),
    )
    points = steps.groupBy(*PAIR, "ts").agg(
        F.sum("dd").alias("dd"), F.sum("r_a").alias("r_a"), F.sum("r_b").alias("r_b")
    )
    pair_order = Window.partitionBy(*PAIR).orderBy("ts")
    pair_upto = pair_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    flagged = points.select(
        *PAIR,
        "ts",
        F.lead("ts").over(pair_order).alias("until_ts"),
        (
            (F.sum("dd").over(pair_upto) > 0)
            & (F.sum("r_a").over(pair_upto) > 0)
            & (F.sum("r_b").over(pair_upto) > 0)
        ).alias("flag"),
    )
    island = F.sum(
        (F.col("flag") != F.coalesce(F.lag("flag").over(pair_order), F.lit(False))).cast("int")
    ).over(pair_upto)
    intervals = (
        flagged.withColumn("island", island)
        .where(F.col("flag"))
        .groupBy(*PAIR, "island")
        .agg(F.min("ts").alias("start_ts"), F.max("until_ts").alias("end_ts"))
        .where(F.col("end_ts").isNotNull())
        .drop("island")
    )

    # Which addresses differ during each interval: the address segments overlapping it.
    i = intervals.alias("i")
    s = states.where(F.col("differs") == 1).alias("s")
    during = (
        (F.col("i.cluster") == F.col("s.cluster"))
        & (F.col("i.ns_a") == F.col("s.ns_a"))
        & (F.col("i.ns_b") == F.col("s.ns_b"))
        & (F.col("s.ts") < F.col("i.end_ts"))
        & (F.col("s.until_ts").isNull() | (F.col("i.start_ts") < F.col("s.until_ts")))
    )
    only = F.array_sort(F.collect_set(F.when(F.col("s.live_a"), F.col("s.broker_addr"))))
    only_b = F.array_sort(F.collect_set(F.when(F.col("s.live_b"), F.col("s.broker_addr"))))
    members = (
        i.join(s, during, "left")
        .groupBy(*[F.col(f"i.{c}").alias(c) for c in (*PAIR, "start_ts", "end_ts")])
        .agg(only.alias("only_in_a"), only_b.alias("only_in_b"))
    )
    return finish(members)


def finish(intervals: DataFrame) -> DataFrame:
    """The documented columns (duration from start and end) and the partition ``day``."""
    return intervals.select(
        *PAIR,
        "start_ts",
        "end_ts",
        ((F.col("end_ts") - F.col("start_ts")) / 1000.0).alias("duration_s"),
        "only_in_a",
        "only_in_b",
        as_date(day_start(F.col("end_ts"))).alias("day"),
    )


def continue_across(computed: DataFrame, published: DataFrame, start: int) -> DataFrame:
    """Join the intervals ``computed`` from ``start`` with those ``published`` earlier that
    were open across it (start < ``start`` <= end): one found open at ``start`` continues the
    published one (its start; the addresses of both parts); a published one without it ends
    at ``start``."""
    at = F.lit(start).cast("long")
    across = published.where((F.col("start_ts") < at) & (F.col("end_ts") >= at)).select(
        *PAIR, "start_ts", "only_in_a", "only_in_b"
    )
    opening = computed.where(F.col("start_ts") == at).select(
        *PAIR,
        "end_ts",
        F.col("only_in_a").alias("later_a"),
        F.col("only_in_b").alias("later_b"),
    )

    def joined(before: str, later: str) -> Column:
        both = F.concat(F.col(before), F.coalesce(F.col(later), F.array().cast("array<string>")))
        return F.array_sort(F.array_distinct(both)).alias(before)

    continued = across.join(opening, list(PAIR), "left").select(
        *PAIR,
        "start_ts",
        F.coalesce(F.col("end_ts"), at).alias("end_ts"),
        joined("only_in_a", "later_a"),
        joined("only_in_b", "later_b"),
    )
    rest = computed.join(across.select(*PAIR), list(PAIR), "left_anti").unionByName(
        computed.where(F.col("start_ts") != at).join(across.select(*PAIR), list(PAIR))
    )
    return finish(rest.select(*PAIR, "start_ts", "end_ts", "only_in_a", "only_in_b")
                  .unionByName(continued))  # fmt: skip
