"""Compact heartbeats give the pipeline exactly what their full form gives.

Every table is derived from the event store's rows (``compact.compact``), the only stage that
reads heartbeats one by one; so equal store rows from a journal in both forms mean equal
tables. The forms are made from each other with the journal's own pieces: the generator
writes the compact form (its full form is ``read_records``' expansion), and hand-made
full-form journals are compacted as ``Journal`` would have written them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pynamesrv.namesrv.journal import (
    HEARTBEAT,
    HeartbeatMemory,
    compact_heartbeat,
    journal_files,
    read_records,
)
from pynamesrv.pipeline.compact import compact
from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.store import find_journal_files, ingest
from pynamesrv.testing import generate

from .journals import (
    heartbeat,
    registered,
    removed,
    snapshot,
    started,
    stopped,
    write_journal,
)

A1, A2, A3 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


def compacted_copy(source: Path, target: Path) -> int:
    """``source``'s full-form files as the writer lays them out compactly (a memory per file
    and per process); returns how many heartbeats took the compact form."""
    count = 0
    for file in journal_files(source):
        out = target / file.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        memory = HeartbeatMemory()
        lines = []
        for raw in file.read_bytes().splitlines(keepends=True):
            record = orjson.loads(raw)
            if record["type"] == "server_started":
                memory = HeartbeatMemory()
            if record["type"] == HEARTBEAT:
                fields = {k: v for k, v in record.items() if k not in ("ts", "ns", "seq", "type")}
                beat = compact_heartbeat(record["ts"], record["ns"], record["seq"], fields)
                if beat is not None and memory.repeats(beat):
                    lines.append(beat.line)
                    count += 1
                    continue
            lines.append(raw)
        out.write_bytes(b"".join(lines))
    return count


def expanded_copy(source: Path, target: Path) -> int:
    """``source``'s files in the full form (what the writer wrote before compact heartbeats);
    returns how many compact heartbeats were expanded."""
    count = 0
    for file in journal_files(source):
        out = target / file.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        raw = list(read_records([file], expand=False))
        count += sum(r["type"] == HEARTBEAT and "broker_name" not in r for r in raw)
        out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in read_records([file])))
    return count


def store_rows(spark: SparkSession, root: Path) -> list[dict[str, Any]]:
    """The event store's rows of the journal under ``root``, files named relative to it."""
    frame = read_journal(spark, [str(root)]).withColumn(
        "file", F.regexp_extract("file", r"([^/]+/[^/]+)$", 1)
    )
    return [row.asDict(recursive=True) for row in compact(frame).collect()]


def assert_same_store(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    def canonical(rows: list[dict[str, Any]]) -> list[bytes]:
        return sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in rows)

    assert canonical(actual) == canonical(expected)


def test_generated_journal_gives_the_same_store_rows_in_both_forms(
    spark: SparkSession, tmp_path: Path
) -> None:
    generate(tmp_path / "compact", brokers=8, instances=1, hours=1, seed=3)
    assert expanded_copy(tmp_path / "compact", tmp_path / "full") > 500
    rows = store_rows(spark, tmp_path / "compact")
    runs = [r for r in rows if r["type"] == HEARTBEAT]
    beats = sum(r["type"] == HEARTBEAT for r in read_records(journal_files(tmp_path / "compact")))
    assert sum(r["lines"] for r in runs) == beats > 10 * len(runs)  # folded into runs
    assert all(r["broker_name"] is not None for r in rows if r["type"] == HEARTBEAT)
    assert_same_store(rows, store_rows(spark, tmp_path / "full"))


def beat(t: float, cluster: str, name: str, addr: str, broker_id: int = 0, counter: int = 0):
    return {**heartbeat(t, cluster, name, addr, broker_id), "data_version": {"counter": counter}}


def test_edge_cases_give_the_same_store_rows_in_both_forms(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An address renamed within the hour, one address in two clusters, a new data version,
    heartbeats across the hour boundary, a restart appending to the same hour file, and a
    broker with nothing but heartbeats in an hour."""
    events = [
        started(0),
        snapshot(0),
        registered(10, "C", "b1", A1),
        registered(11, "C", "b2", A2),
        registered(12, "D", "d2", A2),
        registered(13, "C", "b3", A3),
        *[beat(t, "C", "b1", A1) for t in (40, 70, 100)],
        *[beat(t + 1, "C", "b2", A2) for t in (40, 70, 100)],
        *[beat(t + 2, "D", "d2", A2) for t in (40, 70, 100)],
        removed(120, "C", "b1", A1, "unregister", 100),
        registered(130, "C", "b1x", A1, broker_id=1),
        *[beat(t, "C", "b1x", A1, broker_id=1) for t in (160, 190, 220)],
        *[beat(t, "C", "b3", A3, counter=1 if t > 100 else 0) for t in range(40, 3700, 30)],
        *[beat(t, "C", "b2", A2) for t in range(3580, 3700, 30)],
        stopped(3705),
        started(3710),
        registered(3720, "C", "b2", A2),
        *[beat(t, "C", "b2", A2) for t in (3750, 3780, 3810)],
        *[beat(t, "C", "b3", A3, counter=1) for t in (3760, 3790)],
    ]
    write_journal(tmp_path / "full", "n1:1", events)
    assert compacted_copy(tmp_path / "full", tmp_path / "compact") > 100
    full = store_rows(spark, tmp_path / "full")
    assert_same_store(store_rows(spark, tmp_path / "compact"), full)
    names = {
        (r["broker_addr"], r["cluster"], r["broker_name"]) for r in full if r["type"] == HEARTBEAT
    }
    assert names == {(A1, "C", "b1"), (A1, "C", "b1x"), (A2, "C", "b2"), (A2, "D", "d2"),
                     (A3, "C", "b3")}  # fmt: skip


def test_the_store_keeps_beat_times_as_deltas(spark: SparkSession, tmp_path: Path) -> None:
    """Beat times and sequence numbers are most of the store: stored as deltas (Parquet
    version 2 pages) they take a third of the bytes plain 8-byte values took, and read back
    as they were. Ingestion alone: the rest of a run checks nothing here."""
    journal = tmp_path / "journal"
    generate(journal, brokers=8, instances=1, hours=1, seed=3)
    files = Files()
    store = files.uri(str(tmp_path / "store"))
    stats = ingest(spark, files, find_journal_files(files, [str(journal)]), store, "r1")
    stored = list((tmp_path / "store").rglob("*.parquet"))
    assert stored
    for file in stored:
        metadata = pq.ParquetFile(file).metadata
        for group in range(metadata.num_row_groups):
            columns = [metadata.row_group(group).column(i) for i in range(metadata.num_columns)]
            encodings = {c.path_in_schema: c.encodings for c in columns}
            for name in ("beat_ts.list.element", "beat_seq.list.element"):
                assert "DELTA_BINARY_PACKED" in encodings[name], (file, encodings[name])
    records = list(read_records(journal_files(journal)))
    assert sum(s.events for s in stats.values()) == len(records)
    beats = sum(r["type"] == HEARTBEAT for r in records)
    (row,) = spark.read.parquet(*map(str, stored)).select(F.sum(F.size("beat_ts"))).collect()
    assert row[0] == beats
