"""The journal lines a point in time needs, read through Spark from as few hour files as
possible: time travel over journals on cluster storage, or with --master / --remote.

Journals on this machine are read without Spark by ``namesrv.history``, which says which
lines (each instance's last base at or before T and the route changes after it), from which
files (the hour of T and the one before, more only when a base is further back) and why; this
module takes the same lines the same way, and the same replay rebuilds the routes from them
(a test compares both answers byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import orjson
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pynamesrv.namesrv import history, snapshot_pieces
from pynamesrv.namesrv.history import FIRST_FILES, by_instance_dir, check_time
from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.runs import HOUR_MS, STARTED, complete_snapshots, key
from pynamesrv.pipeline.schema import JOURNAL_SCHEMA
from pynamesrv.pipeline.store import READ_SCHEMA, JournalFile, find_journal_files, instance_dir

# The lines the local reader applies (``namesrv.history.REPLAYED``): the route-changing
# lines warm restart replays, but heartbeats and broker_recovered; those too for an instance
# with a warm start between its base and T (``DEADLINES``: its deadlines follow them).
REPLAYED: Final = tuple(sorted(history.REPLAYED))
DEADLINES: Final = tuple(sorted(history.DEADLINES - history.REPLAYED))
# The fields replay reads. ``server_started``'s ``recovered`` (JSON text, ``schema.AS_TEXT``;
# null: the run began empty) tells a base from a warm start; ``timeout_ms`` (registrations,
# ``broker_recovered``) and the heartbeats' times are the deadlines a warm start applies.
# The event store keeps every one of them, so that topic_distribution replays as this does.
COLUMNS: Final = (
    "ns",
    "ts",
    "seq",
    "type",
    "cluster",
    "broker_name",
    "broker_id",
    "broker_addr",
    "topics_added",
    "topics_removed",
    "topics_changed",
    "topic_configs",
    "topic",
    "queues",
    "op",
    "reason",
    "part",
    "parts",
    "brokers",
    "topics",
    "data_version",
    "last_heartbeat_ts",
    "timeout_ms",
    "recovered",
)
assert set(COLUMNS) <= {f.name for f in READ_SCHEMA.fields}, "the store must keep them"
Key = tuple[int, int]  # (ts, seq): a line's place in its instance's journal


def _read(
    spark: SparkSession,
    files: Sequence[JournalFile],
    instance: str | None,
    types: Sequence[str] = REPLAYED,
) -> DataFrame:
    frame = (
        spark.read.schema(JOURNAL_SCHEMA)
        .option("mode", "DROPMALFORMED")
        .json([f.path for f in files])
        .where(F.col("type").isin(*types) & F.col("ns").isNotNull() & F.col("ts").isNotNull())
        .withColumn("seq", F.coalesce(F.col("seq"), F.lit(0)))
    )
    if instance is not None:
        frame = frame.where(F.col("ns") == instance)
    return frame.select(*COLUMNS, instance_dir(F.col("_metadata.file_path")).alias("dir"))


def _as_dict(row: Any) -> dict[str, Any]:
    return dict(row.asDict(recursive=True))


def collected(frame: DataFrame) -> list[dict[str, Any]]:
    """``frame``'s rows on the driver, as plain dicts (nested rows too)."""
    return [_as_dict(r) for r in frame.collect()]


def rows_since_base(
    spark: SparkSession, paths: Sequence[str], at_ms: int, instance: str | None = None
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Each instance's replayed events from its last ``snapshot`` / ``server_started`` at or
    before ``at_ms`` up to ``at_ms``, in order; and how many hour files were read."""
    files = find_journal_files(Files(), paths)
    check_time(files, at_ms, instance)
    hour = at_ms // HOUR_MS * HOUR_MS
    before = {
        d: [f for f in fs if f.hour_ms <= hour]
        for d, fs in by_instance_dir(files, instance).items()
    }
    taken = {d: min(FIRST_FILES, len(fs)) for d, fs in before.items() if fs}
    while True:
        chosen = [f for d, n in taken.items() for f in before[d][-n:]]
        if not chosen:
            return {}, 0
        rows = collected(since_base(_read(spark, chosen, instance), at_ms))
        based = {r["ns"] for r in rows if r["base"]}
        # Back further where an instance has no base, or none has a line up to T.
        short = {r["dir"] for r in rows if r["ns"] not in based} | (
            set(taken) - {r["dir"] for r in rows}
        )
        grow = [d for d, n in taken.items() if d in short and n < len(before[d])]
        if not grow:
            break
        for d in grow:
            taken[d] = min(2 * taken[d], len(before[d]))
    warm = warm_since(rows)
    if warm:
        upto = _read(spark, chosen, instance, DEADLINES).where(F.col("ts") <= F.lit(at_ms))
        rows += collected(deadline_lines(upto, warm))
    return replay_lines(rows), len(chosen)


def warm_since(rows: Iterable[Mapping[str, Any]]) -> dict[str, Key | None]:
    """The instances whose lines from their last base on (collected ``since_base`` rows)
    hold a warm start, each with where those lines begin (None: it has no base, all of its
    lines count). That start dropped the brokers whose deadline had passed, and the
    deadlines follow the heartbeats and ``broker_recovered`` lines, so replay needs those
    too (``deadline_lines``), as the local reader does (``namesrv.history``)."""
    first: dict[str, Key] = {}
    based: dict[str, bool] = {}
    warm: set[str] = set()
    for row in rows:
        ns, at = row["ns"], (row["ts"], row["seq"])
        first[ns] = min(first.get(ns, at), at)
        based[ns] = bool(row["base"])
        if row["type"] == STARTED and row["recovered"] is not None:
            warm.add(ns)
    return {ns: first[ns] if based[ns] else None for ns in sorted(warm)}


def deadline_lines(events: DataFrame, warm: Mapping[str, Key | None]) -> DataFrame:
    """The heartbeats and ``broker_recovered`` lines of ``events`` (one row per line) of
    the ``warm`` instances from where their lines begin on (``warm_since``): ``COLUMNS``
    and ``base`` (false)."""
    mine = F.lit(False)
    for ns, since in warm.items():
        theirs = F.col("ns") == F.lit(ns)
        if since is not None:
            ts, seq = (F.lit(v).cast("long") for v in since)
            theirs = theirs & (key() >= F.struct(ts.alias("ts"), seq.alias("seq")))
        mine = mine | theirs
    return events.where(F.col("type").isin(*DEADLINES) & mine).select(
        *COLUMNS, F.lit(False).alias("base")
    )


def replay_lines(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Collected rows (``since_base``'s and ``deadline_lines``') as each instance's lines
    in journal order, instances sorted, shaped as replay reads a line: ``COLUMNS``, with
    ``recovered`` parsed back on a ``server_started`` (what a warm start loaded) and left
    out elsewhere (``broker_registered``'s boolean of that name is text here, and no
    route depends on it)."""
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["ns"], r["ts"], r["seq"])):
        line = {c: row[c] for c in COLUMNS if c != "recovered"}
        if row["type"] == STARTED and row["recovered"] is not None:
            line["recovered"] = orjson.loads(row["recovered"])
        by_ns.setdefault(row["ns"], []).append(line)
    return by_ns


def since_base(events: DataFrame, at_ms: int | None = None) -> DataFrame:
    """Each instance's events up to ``at_ms`` (all: to the end of the data) from its last
    base (a complete ``snapshot``, or the ``server_started`` of a run that began empty: a
    warm start goes on from the base before it, as recovery and the local reader do) on, all
    of them when it has none; ``base`` tells which. One query: the files are read once, and
    only these rows reach the driver (``topic_distribution`` takes the routes at the end of
    the data the same way, from the event store)."""
    upto = events if at_ms is None else events.where(F.col("ts") <= F.lit(at_ms))
    # A base is a start, or the first piece of a complete snapshot (a set a crash cut is
    # no base: the one before it is, and replay skips the cut set).
    firsts = (
        complete_snapshots(upto)
        .where(F.col("seq") == F.col("snapshot_seq"))
        .select("ns", "ts", "seq", F.lit(True).alias("snapshot_base"))
    )
    cold_start = (F.col("type") == STARTED) & F.col("recovered").isNull()
    is_base = cold_start | F.coalesce(F.col("snapshot_base"), F.lit(False))
    last = F.max(F.when(is_base, key())).over(Window.partitionBy("ns"))
    return (
        upto.join(firsts, ["ns", "ts", "seq"], "left")
        .withColumn("last_base", last)
        .where(F.col("last_base").isNull() | (key() >= F.col("last_base")))
        .withColumn("base", F.col("last_base").isNotNull())
        .drop("last_base", "snapshot_base")
    )


def next_snapshot(
    spark: SparkSession, paths: Sequence[str], ns: str, at_ms: int
) -> dict[str, Any] | None:
    """The first snapshot of ``ns`` after ``at_ms`` (for journals written before
    ``topic_configs``), from the hour files after T, a few at a time."""
    files = find_journal_files(Files(), paths)
    hour = at_ms // HOUR_MS * HOUR_MS
    later = sorted((f for f in files if f.hour_ms >= hour), key=lambda f: f.hour_ms)
    count = FIRST_FILES
    done = 0
    while done < len(later):
        batch = later[done : done + count]
        snapshots = complete_snapshots(_read(spark, batch, ns).where(F.col("ts") > F.lit(at_ms)))
        first = snapshots.select(F.min(F.struct("ts", "snapshot_seq")).alias("k")).collect()
        if first and first[0]["k"] is not None:
            k = first[0]["k"]
            pieces = (
                snapshots.where(
                    (F.col("ts") == k["ts"]) & (F.col("snapshot_seq") == k["snapshot_seq"])
                )
                .orderBy("seq")
                .select("brokers", "topics")
                .collect()
            )
            return dict(snapshot_pieces.merged([_as_dict(p) for p in pieces]))
        done += len(batch)
        count *= 2
    return None
