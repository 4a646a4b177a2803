"""The journal lines a point in time needs, read from as few hour files as possible.

``routes-at`` rebuilds a route table from an instance's last snapshot (or start) at or before
T plus the events after it. Snapshots are written every 10 minutes, so the answer is almost
always in the hour file of T and the one before: those are read first, and only an instance
whose base is not among them gets older files, twice as many each time. A day or a year of
journals costs the same two files.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pynamesrv.namesrv import recovery, snapshot_pieces
from pynamesrv.namesrv.events import BrokerRecovered
from pynamesrv.namesrv.journal import instance_dir_name
from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.runs import HEARTBEAT, HOUR_MS, STARTED, complete_snapshots, key
from pynamesrv.pipeline.schema import JOURNAL_SCHEMA
from pynamesrv.pipeline.store import JournalError, JournalFile, find_journal_files, instance_dir

# The route-changing lines warm restart replays, but heartbeats and broker_recovered: the
# bulk of a journal, and the restatement of what a warm start kept; they only move deadlines
# and make brokers provisional, which a rebuilt table at T never checks (removals are
# journaled), and their columns are not among those read.
REPLAYED: Final = tuple(sorted(recovery.REPLAYED - {HEARTBEAT, BrokerRecovered.TYPE}))
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
)
FIRST_FILES: Final = 2  # the hour of T and the one before


def _read(spark: SparkSession, files: Sequence[JournalFile], instance: str | None) -> DataFrame:
    frame = (
        spark.read.schema(JOURNAL_SCHEMA)
        .option("mode", "DROPMALFORMED")
        .json([f.path for f in files])
        .where(F.col("type").isin(*REPLAYED) & F.col("ns").isNotNull() & F.col("ts").isNotNull())
        .withColumn("seq", F.coalesce(F.col("seq"), F.lit(0)))
    )
    if instance is not None:
        frame = frame.where(F.col("ns") == instance)
    return frame.select(*COLUMNS, instance_dir(F.col("_metadata.file_path")).alias("dir"))


def _as_dict(row: Any) -> dict[str, Any]:
    return dict(row.asDict(recursive=True))


def _by_instance_dir(
    files: Sequence[JournalFile], instance: str | None
) -> dict[str, list[JournalFile]]:
    """Hour files per instance directory, oldest first (only the instance's own directory
    when there is one of its name)."""
    by_dir: dict[str, list[JournalFile]] = {}
    for file in files:
        by_dir.setdefault(file.instance, []).append(file)
    if instance is not None and instance_dir_name(instance) in by_dir:
        by_dir = {instance_dir_name(instance): by_dir[instance_dir_name(instance)]}
    return {d: sorted(fs, key=lambda f: f.hour_ms) for d, fs in by_dir.items()}


def covered(files: Sequence[JournalFile]) -> tuple[int, int]:
    """[start of the first hour, end of the last hour) the hour files stand for."""
    return min(f.hour_ms for f in files), max(f.hour_ms for f in files) + HOUR_MS


def check_time(files: Sequence[JournalFile], at_ms: int, instance: str | None = None) -> None:
    """Refuse a time the journals (of ``instance``'s directory, when it has one) do not
    cover: before their first hour nothing was recorded, and after their last hour the
    server may have changed anything or stopped. ``JournalError`` says the range."""
    own = _by_instance_dir(files, instance)
    chosen = [f for fs in own.values() for f in fs]
    start, end = covered(chosen)
    if start <= at_ms < end:
        return
    whose = f" of {instance}" if instance and instance_dir_name(instance) in own else ""
    side = "before" if at_ms < start else "after"
    raise JournalError(
        f"{iso_time(at_ms)} is {side} the journals{whose}: they cover {iso_time(start)} "
        f"to {iso_time(end)}"
    )


def iso_time(ms: int) -> str:
    """``2026-01-01T00:00:15Z`` (milliseconds only when there are some)."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    text = moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")


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
        for d, fs in _by_instance_dir(files, instance).items()
    }
    taken = {d: min(FIRST_FILES, len(fs)) for d, fs in before.items() if fs}
    while True:
        chosen = [f for d, n in taken.items() for f in before[d][-n:]]
        if not chosen:
            return {}, 0
        rows = [_as_dict(r) for r in since_base(_read(spark, chosen, instance), at_ms).collect()]
        based = {r["ns"] for r in rows if r["base"]}
        short = {r["dir"] for r in rows if r["ns"] not in based}
        grow = [d for d, n in taken.items() if d in short and n < len(before[d])]
        if not grow:
            break
        for d in grow:
            taken[d] = min(2 * taken[d], len(before[d]))
    by_ns: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["ns"], r["ts"], r["seq"])):
        del row["dir"], row["base"]
        by_ns.setdefault(row["ns"], []).append(row)
    return by_ns, len(chosen)


def since_base(events: DataFrame, at_ms: int | None = None) -> DataFrame:
    """Each instance's events up to ``at_ms`` (all: to the end of the data) from its last
    base (``snapshot`` or ``server_started``) on, all of them when it has none; ``base``
    tells which. One query: the files are read once, and only these rows reach the driver
    (``topic_distribution`` takes the routes at the end of the data the same way)."""
    upto = events if at_ms is None else events.where(F.col("ts") <= F.lit(at_ms))
    # A base is a start, or the first piece of a complete snapshot (a set a crash cut is
    # no base: the one before it is, and replay skips the cut set).
    firsts = (
        complete_snapshots(upto)
        .where(F.col("seq") == F.col("snapshot_seq"))
        .select("ns", "ts", "seq", F.lit(True).alias("snapshot_base"))
    )
    is_base = (F.col("type") == STARTED) | F.coalesce(F.col("snapshot_base"), F.lit(False))
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
