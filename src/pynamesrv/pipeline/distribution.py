"""topic_distribution: how each topic's queues spread over brokers, from the last snapshot.

A snapshot is the only place the journal states queue numbers for every topic at once, so
the table is "as of the end of the data" = each instance's last snapshot. A topic held by a
single broker name is a single point of failure; skew (max / mean write queues per broker)
shows producers loading one broker more than the others.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.pipeline.runs import complete_snapshots

DISTRIBUTION_COLUMNS = (
    "ns",
    "topic",
    "brokers",
    "read_queues",
    "write_queues",
    "max_queues_per_broker",
    "mean_queues_per_broker",
    "skew",
    "single_broker",
)


def topic_distribution(events: DataFrame) -> DataFrame:
    """One row per (ns, topic) of the instance's last snapshot.

    ``skew`` is 1.0 when a topic has no write queues at all (max = mean = 0: even), where
    max / mean would be undefined.
    """
    latest_first = Window.partitionBy("ns").orderBy(
        F.col("ts").desc(), F.col("snapshot_seq").desc()
    )
    last = (  # every piece of the last complete snapshot
        complete_snapshots(events)
        .select("ns", "topics", F.dense_rank().over(latest_first).alias("rank"))
        .where(F.col("rank") == 1)
    )
    queues = (
        last.select("ns", F.explode("topics").alias("topic", "queues"))
        .select("ns", "topic", F.explode("queues").alias("q"))
        .groupBy("ns", "topic", F.col("q.broker_name").alias("broker_name"))
        .agg(F.sum("q.read").alias("read"), F.sum("q.write").alias("write"))
    )
    per_topic = queues.groupBy("ns", "topic").agg(
        F.count(F.lit(1)).alias("brokers"),
        F.sum("read").alias("read_queues"),
        F.sum("write").alias("write_queues"),
        F.max("write").alias("max_queues_per_broker"),
    )
    mean = F.col("write_queues") / F.col("brokers")
    return per_topic.select(
        "ns",
        "topic",
        "brokers",
        "read_queues",
        "write_queues",
        "max_queues_per_broker",
        mean.alias("mean_queues_per_broker"),
        F.when(mean == 0, F.lit(1.0))
        .otherwise(F.col("max_queues_per_broker") / mean)
        .alias("skew"),
        (F.col("brokers") == 1).alias("single_broker"),
    )
