"""The journal as a Spark DataFrame: one explicit schema, one reader (docs/journal.md).

An explicit schema instead of inference: inference reads all input twice and guesses types
per file (an empty ``counts`` map would become a struct). Malformed lines, such as the torn
last line a crash leaves, are dropped, never fatal.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

QUEUE_CONFIG = StructType(
    [
        StructField("read", LongType()),
        StructField("write", LongType()),
        StructField("perm", LongType()),
    ]
)
SNAPSHOT_BROKER = StructType(
    [
        StructField("cluster", StringType()),
        StructField("broker_name", StringType()),
        StructField("broker_id", LongType()),
        StructField("broker_addr", StringType()),
        StructField("last_heartbeat_ts", LongType()),
    ]
)
SNAPSHOT_QUEUE = StructType(
    [
        StructField("broker_name", StringType()),
        StructField("read", LongType()),
        StructField("write", LongType()),
        StructField("perm", LongType()),
    ]
)

JOURNAL_SCHEMA = StructType(
    [
        StructField("ts", LongType()),
        StructField("ns", StringType()),
        StructField("seq", LongType()),
        StructField("type", StringType()),
        # broker events
        StructField("cluster", StringType()),
        StructField("broker_name", StringType()),
        StructField("broker_id", LongType()),
        StructField("broker_addr", StringType()),
        StructField("ha_addr", StringType()),
        StructField("first", BooleanType()),
        StructField("data_version", MapType(StringType(), LongType())),
        StructField("topics_added", ArrayType(StringType())),
        StructField("topics_removed", ArrayType(StringType())),
        StructField("topics_changed", ArrayType(StringType())),
        StructField("topic_count", LongType()),
        StructField("topic_configs", MapType(StringType(), QUEUE_CONFIG)),
        StructField("reason", StringType()),
        StructField("last_heartbeat_ts", LongType()),
        # topic, perm, kv and config events
        StructField("topic", StringType()),
        StructField("queues", ArrayType(SNAPSHOT_QUEUE)),
        StructField("op", StringType()),
        StructField("namespace", StringType()),
        StructField("key", StringType()),
        StructField("value", StringType()),
        # route_queries
        StructField("window_ms", LongType()),
        StructField("counts", MapType(StringType(), LongType())),
        StructField("misses", MapType(StringType(), LongType())),
        # snapshot
        StructField("brokers", ArrayType(SNAPSHOT_BROKER)),
        StructField("topics", MapType(StringType(), ArrayType(SNAPSHOT_QUEUE))),
        # server_started / server_stopped
        StructField("version", StringType()),
        StructField("config", MapType(StringType(), StringType())),
    ]
)

EVENT_TYPES = (
    "server_started",
    "server_stopped",
    "broker_registered",
    "broker_heartbeat",
    "broker_removed",
    "topic_removed",
    "topic_queues_changed",
    "perm_changed",
    "kv_changed",
    "config_changed",
    "route_queries",
    "snapshot",
)


CORRUPT = "_corrupt_record"
# The journal schema plus the column Spark fills with a line it cannot parse, so that malformed
# and torn lines are counted (PERMISSIVE mode) instead of silently dropped.
PARSE_SCHEMA = StructType([*JOURNAL_SCHEMA.fields, StructField(CORRUPT, StringType())])

# File names the writer uses: events-YYYYMMDD-HH.jsonl, gzip-compressed once the hour closed.
JOURNAL_FILE_GLOB = "events-*.{jsonl,jsonl.gz}"


def read_journal(
    spark: SparkSession,
    paths: Sequence[str],
    *,
    from_ts: int | None = None,
    to_ts: int | None = None,
) -> DataFrame:
    """All well-formed events under ``paths`` (files, directories or globs, any Spark FS),
    parsed straight from the journal files, with the ``file`` each line came from.

    Directories are searched recursively for ``events-*.jsonl`` and ``events-*.jsonl.gz``;
    an empty directory gives an empty frame. Keeps ``from_ts <= ts < to_ts`` when given.
    Order within an instance is (``ts``, ``seq``); callers sort or window by ``ns`` with
    those. The job itself reads through the event store (``store.py``); this reader serves
    tests and one-off questions.
    """
    frame = (
        spark.read.schema(JOURNAL_SCHEMA)
        .option("mode", "DROPMALFORMED")
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", JOURNAL_FILE_GLOB)
        .json(list(paths))
    )
    frame = frame.where(
        F.col("ts").isNotNull() & F.col("ns").isNotNull() & F.col("type").isNotNull()
    )
    if from_ts is not None:
        frame = frame.where(F.col("ts") >= F.lit(from_ts))
    if to_ts is not None:
        frame = frame.where(F.col("ts") < F.lit(to_ts))
    return frame.withColumn("seq", F.coalesce(F.col("seq"), F.lit(0))).withColumn(
        "file", F.col("_metadata.file_path")
    )
