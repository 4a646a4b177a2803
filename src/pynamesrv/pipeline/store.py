"""The event store: journal hour files parsed once into Parquet, with a record of what was read.

JSON parsing is the largest cost of a run, and an operator keeps months of journals. So each
hour file is parsed once (again only if it changes: the open hour grows, a closed hour is
compressed) into ``<store>/day=…/instance=…/hour=…/version=<run>/``, heartbeats folded into
runs (``compact.py``), and every later run reads only the partitions it needs. A file's rows
are one version directory, written once by the run that parsed it; ingesting a file again
writes a new version, and the run's manifest names which version holds each file
(``FileStats.stored``), so a run that failed half-way leaves nothing a reader follows
(``publish.py``).

Files and their record:
- Names are the writer's: ``<instance dir>/events-YYYYMMDD-HH.jsonl``, or ``….jsonl.gz`` once
  the hour closed. A ``.jsonl`` and its ``.gz`` twin (both exist while the writer compresses)
  are one hour file: the ``.gz`` is read, never both. The writer completes the ``.gz`` before it
  removes the ``.jsonl``; a ``.gz`` read half-written fails the run loudly, never silently.
- A file is identified by instance directory and hour; it is ingested again when its path,
  size or modification time differ from the record (the open hour grows; a ``.gz`` replaces a
  ``.jsonl``).
- A file that disappears (retention deleted it) keeps its rows: history outlives the
  journals. A file is assumed to only grow; a journal rewritten in the middle needs
  ``--full``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from pynamesrv.namesrv.history import FILE_NAMES, hour_of_name
from pynamesrv.pipeline.compact import STORE_COLUMNS, STORE_SCHEMA, compact
from pynamesrv.pipeline.files import FileInfo, Files
from pynamesrv.pipeline.frames import local_frame
from pynamesrv.pipeline.paths import join_path
from pynamesrv.pipeline.schema import CORRUPT, PARSE_SCHEMA

HOUR_MS: Final = 3_600_000
PARTITIONS: Final = ("day", "instance", "hour", "version")
# The tail of a file URI: instance directory (URI-encoded), date, hour.
_TAIL: Final = r"([^/]+)/events-(\d{8})-(\d{2})\.jsonl(?:\.gz)?$"


class JournalError(ValueError):
    """The journal paths cannot be read as given (missing, or two files for one hour)."""


@dataclass(frozen=True, slots=True)
class JournalFile:
    """One hour file of one instance directory."""

    instance: str
    hour_ms: int
    path: str
    size: int
    mtime: int

    @property
    def key(self) -> str:
        """``instance/YYYY-MM-DDTHH``: the file's identity in the record."""
        return f"{self.instance}/{self.day}T{self.hour:02d}"

    @property
    def day(self) -> str:
        return datetime.fromtimestamp(self.hour_ms / 1000, UTC).strftime("%Y-%m-%d")

    @property
    def hour(self) -> int:
        return (self.hour_ms // HOUR_MS) % 24

    @property
    def compressed(self) -> bool:
        return self.path.endswith(".gz")


@dataclass(frozen=True, slots=True)
class FileStats:
    """What one ingested file held, as recorded in the manifest."""

    path: str
    size: int
    mtime: int
    lines: int  # events (heartbeats counted one by one) plus bad lines
    events: int
    malformed: int  # not JSON: a torn last line, garbage
    invalid: int  # JSON without ts, ns or type
    min_ts: int | None
    max_ts: int | None
    ns: tuple[str, ...]
    stored: str | None = None  # its version directory, relative to the store (None: no row)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ns": list(self.ns)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileStats:
        return cls(**{**data, "ns": tuple(data.get("ns") or ())})

    def same_file(self, file: JournalFile) -> bool:
        return (self.path, self.size, self.mtime) == (file.path, file.size, file.mtime)


def _hidden_below(path: str, root: str) -> bool:
    """True when a directory between ``root`` and the file starts with ``_`` or ``.`` (the
    pipeline's own output, editors' and Hadoop's scratch files)."""
    relative = path[len(root) :].strip("/").split("/")[:-1] if path.startswith(root) else []
    return any(part.startswith(("_", ".")) for part in relative)


def find_journal_files(fs: Files, patterns: Sequence[str]) -> list[JournalFile]:
    """The hour files under ``patterns`` (files, directories searched recursively, globs).

    A missing path raises ``JournalError``, and so do patterns that hold no hour file at all
    (a directory without journal files among others is fine): a run over nothing is a
    mistaken path, not an empty report.
    """
    found: dict[str, FileInfo] = {}
    for pattern in patterns:
        matches = fs.glob(pattern)
        if matches is None:
            raise JournalError(f"journal path not found: {pattern}")
        for uri, _ in matches:
            for info in fs.files(uri):
                if not _hidden_below(info.path, uri):
                    found.setdefault(info.path, info)
    files = choose(found.values())
    if not files:
        raise JournalError(f"no journal files ({FILE_NAMES}) under {', '.join(patterns)}")
    return files


def choose(infos: Iterable[FileInfo]) -> list[JournalFile]:
    """One ``JournalFile`` per instance directory and hour: the ``.gz`` of a twin pair.

    Two different directories of the same name holding the same hour (two copies of one
    instance's journal) would be read twice; that is refused.
    """
    by_hour: dict[tuple[str, int], JournalFile] = {}
    for info in infos:
        parent, _, name = info.path.rstrip("/").rpartition("/")
        hour_ms = hour_of_name(name)
        if hour_ms is None:
            continue
        instance = parent.rpartition("/")[2]
        candidate = JournalFile(instance, hour_ms, info.path, info.size, info.mtime)
        current = by_hour.get((instance, hour_ms))
        if current is None:
            by_hour[(instance, hour_ms)] = candidate
            continue
        same_dir = current.path.rpartition("/")[0] == parent
        if not same_dir:
            raise JournalError(
                f"two journal files for instance {instance} hour {candidate.key}: "
                f"{current.path} and {candidate.path}"
            )
        if candidate.compressed and not current.compressed:
            by_hour[(instance, hour_ms)] = candidate
    return sorted(by_hour.values(), key=lambda f: (f.hour_ms, f.instance))


def changed_files(files: Sequence[JournalFile], record: dict[str, FileStats]) -> list[JournalFile]:
    """Files not in ``record`` or different from what it says (path, size, mtime)."""
    return [f for f in files if f.key not in record or not record[f.key].same_file(f)]


def partition_path(file: JournalFile, run_id: str) -> str:
    """The version directory of ``file`` written by ``run_id``, relative to the store."""
    return f"day={file.day}/instance={_escape(file.instance)}/hour={file.hour}/version={run_id}"


def _escape(value: str) -> str:
    """A partition value as Spark writes it in a directory name (ExternalCatalogUtils)."""
    special = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(0x20)}
    return "".join(f"%{ord(c):02X}" if c in special else c for c in value)


# How the store's Parquet is written. Version 2 pages encode long columns as deltas
# (DELTA_BINARY_PACKED) where version 1 falls back to plain 8-byte values once a column's
# dictionary fills; beat times rise ~30 s at a time and with sequence numbers they are ~95 %
# of the store: an hour of 1,000 brokers takes a third of the bytes (2.6 MB -> 0.9 MB) and
# reads back faster. Their dictionaries are skipped (a dictionary of distinct times never
# pays). Every Spark since 3.3 and pyarrow read such pages.
STORE_WRITE_OPTIONS: Final = {
    "parquet.writer.version": "v2",
    **{f"parquet.enable.dictionary#{c}.list.element": "false" for c in ("beat_ts", "beat_seq")},
}


def ingest(
    spark: SparkSession, fs: Files, files: Sequence[JournalFile], store: str, run_id: str
) -> dict[str, FileStats]:
    """Parse ``files`` into new version directories of the store (appended: nothing older is
    touched) and return their stats."""
    if not files:
        return {}
    rows = with_partitions(compact(parse(spark, [f.path for f in files])), run_id)
    (
        rows.repartition(*PARTITIONS)
        .write.mode("append")
        .options(**STORE_WRITE_OPTIONS)
        .partitionBy(*PARTITIONS)
        .parquet(store)
    )
    return file_stats(spark, fs, store, files, run_id)


def parse(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Journal lines as the store reads them: every journal field, the ``file`` each line came
    from, and the text of a line Spark cannot parse (counted, never fatal)."""
    return (
        spark.read.schema(PARSE_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(list(paths))
        .withColumn("file", F.col("_metadata.file_path"))
    )


def instance_dir(file_uri: Column) -> Column:
    """The instance directory of a journal file, from its URI as Spark reports it
    (``_metadata.file_path``: URI-encoded, where a ``+`` is a plus)."""
    encoded = F.regexp_extract(file_uri, _TAIL, 1)
    return F.url_decode(F.regexp_replace(encoded, r"\+", "%2B"))


def with_partitions(rows: DataFrame, run_id: str) -> DataFrame:
    """Store rows with day / instance / hour taken from their file's name, and the run."""
    tail = F.col("file")
    instance = instance_dir(tail)
    day = F.regexp_extract(tail, _TAIL, 2)
    date = F.concat_ws("-", F.substring(day, 1, 4), F.substring(day, 5, 2), F.substring(day, 7, 2))
    return rows.select(
        *STORE_COLUMNS,
        date.alias("day"),
        instance.alias("instance"),
        F.regexp_extract(tail, _TAIL, 3).cast("int").alias("hour"),
        F.lit(run_id).alias("version"),
    )


def file_stats(
    spark: SparkSession, fs: Files, store: str, files: Sequence[JournalFile], run_id: str
) -> dict[str, FileStats]:
    """Line counts and time range of ``files`` as ``run_id`` stored them (read back)."""
    keys = {(f.day, f.instance, f.hour): f for f in files}
    stored = {f.key: partition_path(f, run_id) for f in files}
    paths = [join_path(store, p) for p in stored.values() if fs.exists(join_path(store, p))]
    found = {}
    if paths:
        rows = (
            read_store(spark, store, paths)
            .groupBy("day", "instance", "hour")
            .agg(
                F.sum(F.when(F.col("type").isNotNull(), F.col("lines"))).alias("events"),
                F.sum(F.coalesce("malformed", F.lit(0))).alias("malformed"),
                F.sum(F.coalesce("invalid", F.lit(0))).alias("invalid"),
                F.min("ts").alias("min_ts"),
                F.max("last_ts").alias("max_ts"),
                F.array_sort(F.collect_set("ns")).alias("ns"),
            )
            .collect()
        )
        found = {(r["day"], r["instance"], int(r["hour"])): r for r in rows}
    out = {}
    for key, file in keys.items():
        row = found.get(key)
        events = int(row["events"] or 0) if row else 0
        malformed = int(row["malformed"] or 0) if row else 0
        invalid = int(row["invalid"] or 0) if row else 0
        out[file.key] = FileStats(
            path=file.path,
            size=file.size,
            mtime=file.mtime,
            lines=events + malformed + invalid,
            events=events,
            malformed=malformed,
            invalid=invalid,
            min_ts=row["min_ts"] if row else None,
            max_ts=row["max_ts"] if row else None,
            ns=tuple(row["ns"]) if row else (),
            stored=stored[file.key] if row else None,
        )
    return out


# The store as read back: partition values as written (no type inference over thousands of
# directories, and the schema holds even for a store with no file yet).
READ_SCHEMA: Final = StructType(
    [
        *STORE_SCHEMA.fields,
        StructField("day", StringType()),
        StructField("instance", StringType()),
        StructField("hour", IntegerType()),
        StructField("version", StringType()),
    ]
)


def read_store(spark: SparkSession, store: str, partitions: Sequence[str]) -> DataFrame:
    """The rows of the given version directories (``partition_path``), which must exist;
    without the ``version`` column (which version a row came from is the manifest's business)."""
    if not partitions:
        return local_frame(spark, READ_SCHEMA).drop("version")
    frame = spark.read.schema(READ_SCHEMA).option("basePath", store).parquet(*partitions)
    return frame.drop("version")
