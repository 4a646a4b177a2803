"""The journal as a Spark DataFrame: one explicit schema, one reader (docs/journal.md).

The lines are defined once, by ``namesrv.events`` (and the controller's own lifecycle,
snapshot and query-count lines); this is their Spark reading, with the nested shapes JSON
cannot name (queue entries, snapshot brokers) spelled out.

An explicit schema instead of inference: inference reads all input twice and guesses types
per file (an empty ``counts`` map would become a struct). Malformed lines, such as the torn
last line a crash leaves, are dropped, never fatal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

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

from pynamesrv.namesrv.events import event_classes

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
        StructField("timeout_ms", LongType()),  # its deadline at a warm start (null: default)
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
        StructField("group_gone", BooleanType()),  # broker_removed: it took its group's topics
        # broker_registered / broker_recovered: the heartbeat timeout (a warm start drops
        # the brokers past it)
        StructField("timeout_ms", LongType()),
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
        # snapshot (a piece of one: part of parts)
        StructField("part", LongType()),
        StructField("parts", LongType()),
        StructField("brokers", ArrayType(SNAPSHOT_BROKER)),
        StructField("topics", MapType(StringType(), ArrayType(SNAPSHOT_QUEUE))),
        # server_started / server_stopped
        StructField("version", StringType()),
        StructField("config", MapType(StringType(), StringType())),
        # server_started: what a warm start loaded (null: the run began empty), as JSON text
        # (``AS_TEXT``): a warm start is no base, a cold one is (routes-at, topic_distribution)
        StructField("recovered", StringType()),
    ]
)

# Fields read as their JSON text, whatever value a line holds: ``recovered`` is an object in
# ``server_started`` (what a warm restart loaded; null when the run began empty) and a
# boolean in ``broker_registered`` (a provisional broker registered again, "true"). One Spark
# column cannot type both; as text it holds either, and readers look at it only on
# ``server_started`` lines (``pipeline.history.replay_lines`` parses it back).
AS_TEXT: Final = frozenset({"recovered"})

# Every type a journal holds: ``namesrv.events`` defines each line, the controller's own
# (server_started, snapshot, ...) included.
EVENT_TYPES: Final = tuple(cls.TYPE for cls in event_classes())

# Event fields no table or routes-at reads, left out of the parse on purpose: every column in
# the schema is parsed from every line. ``namesrv.events`` stays the one definition of the
# lines; tests/pipeline/test_schema.py proves that every field it defines is either in
# JOURNAL_SCHEMA (with a type that reads it) or named here, so a new field is a decision.
UNREAD_FIELDS: Final = frozenset(
    {
        "caller",  # admin writes: audit trail (pynamesrv journal / logs read it)
        "access_key",
        "topic_mappings",  # 5.x static topics: not part of the canonical route
        # warm restart only (namesrv.recovery reads the files itself)
        "zone_name",
        "enable_acting_master",
        "min_broker_id",  # min_broker_id_changed: what brokers are told, not a route
        "min_broker_addr",
        "offline_broker_addr",
        "ha_broker_addr",
        "notify",
        "mappings",  # snapshot: static-topic mappings (warm restart)
        "damaged",  # server_started: what recovery had to skip
        "topics_gone",  # broker_removed: a count for the log and metrics (group_gone is read)
        "misses_other",  # route_queries: misses are not read either
        "misses_too_long",
        "counts_other",  # route_queries: hits past the line's cap, on no named topic
    }
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
