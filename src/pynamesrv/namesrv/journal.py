"""The route-change journal: every state change as a JSON line (docs/journal.md).

Each instance appends to ``<dir>/<instance>/events-YYYYMMDD-HH.jsonl`` (UTC hour files; ``:``
in the instance is written ``_`` because Hadoop paths cannot hold a colon; the ``ns`` field
keeps ``host:port``). Records come from the events that the registry, KV store and config
return: there is no second source of truth.

Writes never block the event loop: ``record`` encodes the line and appends it to a list;
a flusher hands the list to one worker thread at least once a second and at stop, so lines
reach the files in the order they happened. A crash can tear only the last line of a file,
which ``read_records`` (and the pipeline) skip. A ``broker_registered`` line is the
exception to encoding at once: it can carry 100,000 topic configs, so the event itself waits
in the list (its time and sequence number taken) and the worker thread encodes it, after the
registration has been answered. Events are never changed once emitted, so the line says what
it would have said when recorded.

Heartbeats: a ``broker_heartbeat`` that repeats what its hour file last said in full about
the same broker (``cluster``, ``broker_addr``) is written compactly, without ``broker_name``,
``broker_id`` and ``data_version`` (``HeartbeatMemory``). The choice is made by the worker
thread per open file, so a compact line always follows its full line in the same file, even
when lines are dropped or a write fails; ``read_records`` gives readers the full form back.

A full disk: the worker keeps the lines it could not write encoded, in order, with the count
of bytes that reached the file, so a retry resumes right after them (never a line twice);
``max_pending_bytes`` caps what waits (new lines dropped and counted in ``dropped`` by cause,
twice the cap for snapshots and server lines), and ``stop`` never raises.

Reading never trusts the files (``journal_files``, ``complete_lines``, ``read_records``):
only regular files, lines of at most ``MAX_LINE_BYTES``, archives inflated within a bound,
any read error ends that file; ``JournalDamage`` counts what was skipped.

Retention: when an hour closes, its file is gzip-compressed to ``events-…-HH.jsonl.gz`` (by
a second thread, so appends never wait for it) and readers take either form. Files older
than ``retention_hours``, and the oldest closed hours while the journal is over
``max_bytes``, are deleted; if the open hour alone exceeds ``max_bytes`` (a flood of junk
events), further lines of that hour are dropped and counted rather than filling the disk.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import logging
import os
import re
import shutil
import stat
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Final

import orjson

from pynamesrv.namesrv import snapshot_pieces
from pynamesrv.namesrv.events import BrokerRegistered, Event, Snapshot, event_classes

log = logging.getLogger(__name__)


def instance_dir_name(instance: str) -> str:
    return instance.replace(":", "_")


HOUR_MS = 3_600_000


def hour_file_name(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("events-%Y%m%d-%H.jsonl")


HEARTBEAT: Final = "broker_heartbeat"
# What a compact heartbeat keeps besides ts/ns/seq/type: the registry's liveness key, which is
# all that recovery applies and what the pipeline groups a broker's lines by.
HEARTBEAT_KEY: Final = ("cluster", "broker_addr")
# Every line type the server writes (docs/journal.md, "Event types"): every line is an event
# class of ``namesrv.events``, the one list of them.
LINE_TYPES: Final = tuple(cls.TYPE for cls in event_classes())

# The one line limit, newline included: the writer never writes a longer line, and every
# reader (read_records, recovery, journal tail, routes-at; the pipeline reads what they
# accept) takes lines up to it and skips longer ones without holding them whole. A snapshot
# is written in pieces to stay under it (``snapshot_lines``); a registration's line is
# bounded by its frame (frameMaxLength, topic names of at most 127 characters), and a line
# that would pass the limit anyway is not written (``too_long``) and a snapshot follows.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024
# What one snapshot piece aims at: far under the limit, so that a reader parses a few MiB
# at a time and a piece with one large entry still fits.
SNAPSHOT_PIECE_BYTES: Final = 8 * 1024 * 1024
_HEAD_ROOM: Final = 4096  # a piece's head (ts, ns, seq, type, part, parts) and newline

COMPRESSED_SUFFIX = ".gz"
DEFAULT_RETENTION_HOURS = 168
DEFAULT_MAX_BYTES = 10 * 1024**3


def encode_line(ts: int, ns: str, seq: int, type_: str, fields: dict[str, Any]) -> bytes:
    """One journal line: ``ts``, ``ns``, ``seq``, ``type`` first (readers find the type in a
    line's head without parsing it), then the event's fields. The newline is orjson's (a
    snapshot line of 20 MB is not copied to add it)."""
    head = {"ts": ts, "ns": ns, "seq": seq, "type": type_}
    return exact_size(orjson.dumps(head | fields, option=orjson.OPT_APPEND_NEWLINE))


def exact_size(data: bytes) -> bytes:
    """``data`` in an allocation of its own size, for bytes that wait in memory.

    orjson (3.12 on) returns its output in the buffer it grew, rounded up and never shrunk,
    and the pages are resident: a 200-byte line keeps 4 KiB (110,000 such lines waiting
    for one flush held 450 MB), a 1.5 MB registration line ~5 MB (a full disk's backlog of
    them held 4x the pending budget). The copy costs ~0.2 µs for a heartbeat, ~0.3 ms per
    MB for a long line, on the thread that encoded it."""
    return bytes(memoryview(data))


def snapshot_lines(
    ts: int, ns: str, first_seq: int, snapshot: dict[str, Any], piece_bytes: int
) -> tuple[list[bytes], list[str]]:
    """A ``snapshot`` as its journal lines: piece ``part`` of ``parts``, consecutive ``seq``
    from ``first_seq``, one ``ts``, each line at most ``MAX_LINE_BYTES`` (docs/journal.md,
    ``snapshot``); and the entries left out because no line could hold one of them."""
    pieces = snapshot_pieces.cut(snapshot, piece_bytes, MAX_LINE_BYTES - _HEAD_ROOM)
    parts = len(pieces.bodies)
    lines = []
    for index, body in enumerate(pieces.bodies):
        head = {"ts": ts, "ns": ns, "seq": first_seq + index, "type": Snapshot.TYPE}
        head |= {"part": index + 1, "parts": parts}
        lines.append(b"".join((orjson.dumps(head)[:-1], b",", memoryview(body)[1:], b"\n")))
    return lines, pieces.left_out


@dataclass(frozen=True, slots=True)
class UnencodedLine:
    """A line whose encoding is left to the worker thread: the event and what the loop took
    for it when it was recorded (``ts`` stays beside it in the pending list)."""

    ns: str
    seq: int
    event: Event

    def encode(self, ts: int) -> bytes:
        payload = self.event.to_record()
        return encode_line(ts, self.ns, self.seq, payload.pop("type"), payload)


@dataclass(frozen=True, slots=True)
class CompactHeartbeat:
    """The short form of one heartbeat line, and what decides whether it may be written."""

    key: tuple[str, str]  # (cluster, broker_addr)
    said: bytes  # every field of the full form but ts/ns/seq/type, encoded: equal or not
    line: bytes  # the compact line


def compact_heartbeat(
    ts: int, ns: str, seq: int, fields: dict[str, Any]
) -> CompactHeartbeat | None:
    """The compact form of a ``broker_heartbeat`` with ``fields``; None when the fields lack
    the key (then only the full form is written)."""
    cluster, addr = fields.get("cluster"), fields.get("broker_addr")
    if not isinstance(cluster, str) or not isinstance(addr, str):
        return None
    line = encode_line(ts, ns, seq, HEARTBEAT, {"cluster": cluster, "broker_addr": addr})
    return CompactHeartbeat((cluster, addr), exact_size(orjson.dumps(fields)), line)


class HeartbeatMemory:
    """One hour file's memory of the last full heartbeat of each broker, for the writer.

    A heartbeat may be written compactly only when the file already holds a full one of the
    same key saying the same: every file stands alone (a reader of one hour needs no other),
    and a new process starts a new memory even when it appends to the same hour's file."""

    __slots__ = ("_said",)

    def __init__(self) -> None:
        self._said: dict[tuple[str, str], bytes] = {}

    def repeats(self, beat: CompactHeartbeat) -> bool:
        """True: write ``beat.line``. False: write the full line, which is remembered."""
        if self._said.get(beat.key) == beat.said:
            return True
        self._said[beat.key] = beat.said
        return False


class HeartbeatExpander:
    """One file's compact heartbeats back in their full form, for readers.

    A ``broker_heartbeat`` without ``broker_name`` is compact: each field it lacks has the
    value of the last full heartbeat of the same ``cluster`` and ``broker_addr`` before it in
    the file. A compact line with no full one before it (a file cut by hand) stays as read."""

    __slots__ = ("_full",)

    def __init__(self) -> None:
        self._full: dict[tuple[Any, Any], dict[str, Any]] = {}

    def expand(self, record: dict[str, Any]) -> dict[str, Any]:
        if record.get("type") != HEARTBEAT:
            return record
        key = (record.get("cluster"), record.get("broker_addr"))
        if "broker_name" in record:
            self._full[key] = dict(record)  # a copy: callers may change what they are given
            return record
        full = self._full.get(key)
        return record if full is None else {**full, **record}  # the full form's field order


# Lines worth keeping over the pending cap (up to twice it): recovery and every reader start
# from the newest snapshot, and a run's first and last lines say where it begins and ends.
VALUABLE_TYPES: Final = frozenset({"server_started", "server_stopped", "snapshot"})
# Why lines were not written (Journal.dropped, pynamesrv_journal_dropped_lines_total).
DROPPED_SIZE_CAP: Final = "size_cap"  # the directory is at journalMaxBytes
DROPPED_PENDING_CAP: Final = "pending_cap"  # journalMaxPendingBytes waiting (writes failing)
DROPPED_UNENCODABLE: Final = "unencodable"  # a bug: an event orjson cannot encode
DROPPED_AT_STOP: Final = "stopped"  # still unwritten when the journal stopped
DROPPED_TOO_LONG: Final = "too_long"  # longer than MAX_LINE_BYTES: no reader would take it
DROP_CAUSES: Final = (
    DROPPED_PENDING_CAP,
    DROPPED_SIZE_CAP,
    DROPPED_UNENCODABLE,
    DROPPED_AT_STOP,
    DROPPED_TOO_LONG,
)
DEFAULT_MAX_PENDING_BYTES: Final = 64 * 1024 * 1024  # docs/journal.md says why
WARNING_INTERVAL_S: Final = 60.0  # at most one warning per cause this often


def estimated_size(event: BrokerRegistered) -> int:
    """Bytes an unencoded registration line will take, without encoding it (the loop must
    not): its topic names appear about twice (listed, then in ``topic_configs``)."""
    topics = len(event.topics_added) + len(event.topics_changed) + len(event.topics_removed)
    sample = next(iter(event.topics_added or event.topics_changed or event.topics_removed), "")
    return 1024 + topics * (2 * len(sample) + 80) + 1024 * len(event.topic_mappings)


# What the pending journal counts against journalMaxPendingBytes is memory, not line bytes:
# a waiting line also costs its bytes object's header, the pending entry (a tuple with its
# ``ts``) and the list's slot (measured: ~130 bytes, as much as a heartbeat line itself).
LINE_OVERHEAD: Final = 136
# A heartbeat's compact form beside it: the object, its key, two more bytes objects.
BEAT_OVERHEAD: Final = 200
# An unencoded registration holds its event until the worker encodes it: per topic the
# routed row (a 5-tuple), two list slots and the name itself (shared with the routes while
# the group is routed, its own once the group left), on top of the line it becomes.
TOPIC_HELD: Final = 150


def held_size(event: BrokerRegistered) -> int:
    """Memory a registration waiting in the pending journal holds: its event, then its line
    (both while the worker encodes it)."""
    topics = len(event.topics_added) + len(event.topics_changed) + len(event.topics_removed)
    sample = next(iter(event.topics_added or event.topics_changed or event.topics_removed), "")
    return estimated_size(event) + topics * (len(sample) + TOPIC_HELD)


def line_size(line: bytes, beat: CompactHeartbeat | None) -> int:
    """Memory one encoded line holds while it waits (``LINE_OVERHEAD``, ``BEAT_OVERHEAD``)."""
    size = len(line) + LINE_OVERHEAD
    if beat is not None:
        size += len(beat.said) + len(beat.line) + BEAT_OVERHEAD
    return size


# A line this long is written as a chunk of its own: joined with its neighbours it would be
# copied (registrations of 100,000 topics and snapshots are lines of 10-30 MB).
LONG_LINE_BYTES: Final = 1 << 20


def _runs(lines: list[bytes]) -> Iterator[tuple[int, bytes, int]]:
    """The lines of one hour file as the chunks to write, in order: consecutive lines joined,
    a long line alone; each as (index of its first line, bytes, line count)."""
    start = 0
    for index, line in enumerate(lines):
        if len(line) >= LONG_LINE_BYTES:
            if start < index:
                yield start, b"".join(lines[start:index]), index - start
            yield index, line, 1
            start = index + 1
    if start < len(lines):
        yield start, b"".join(lines[start:]), len(lines) - start


@dataclass(slots=True)
class _Chunk:
    """Encoded lines of one hour file waiting to be written (worker thread only), and how
    many of their bytes reached the file: a failed write resumes right after them, so a line
    is never written twice nor encoded again."""

    name: str
    data: bytes
    lines: int
    first_ts: int
    written: int = 0


class Journal:
    def __init__(
        self,
        root: Path,
        instance: str,
        *,
        flush_interval_s: float = 1.0,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        retention_hours: int = DEFAULT_RETENTION_HOURS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    ) -> None:
        self.instance = instance
        self.directory = root / instance_dir_name(instance)
        self.flush_interval_s = flush_interval_s
        self.clock_ms = clock_ms
        self.retention_hours = retention_hours
        self.max_bytes = max_bytes
        self.max_pending_bytes = max_pending_bytes
        # (ts, full line or one the worker encodes, compact form of a heartbeat or None), in
        # the order of recording; not yet handed to the worker (event loop only)
        self._pending: list[tuple[int, bytes | UnencodedLine, CompactHeartbeat | None]] = []
        self._pending_bytes = 0  # the memory they hold (``line_size``, ``held_size``)
        self._handed_bytes = 0  # size of the batches the worker is taking right now
        self._oldest_pending_ms: int | None = None
        # Encoded lines the worker took but could not write yet (a failed write), in order.
        self._backlog: deque[_Chunk] = deque()
        self._backlog_bytes = 0  # unwritten bytes of the backlog (worker writes, loop reads)
        self._backlog_oldest_ms: int | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        self._archiver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal-gzip")
        self._files: dict[str, int] = {}  # hour file name -> open descriptor (worker only)
        self._heartbeats: dict[str, HeartbeatMemory] = {}  # per hour file (worker only)
        self._sizes: dict[str, int] = {}  # size of each file in the directory (worker only)
        self.dropped: Counter[str] = Counter()  # lines not written, by cause (DROP_CAUSES)
        self.write_errors = 0  # flushes that failed (the lines wait in the backlog)
        self._dropping = False
        self._failing = False  # the last flush failed (warned; told when writes resume)
        self._warned_at: dict[str, float] = {}  # cause -> monotonic time of its last warning
        self._drops_warned = 0  # pending-cap drops already in a warning
        self._flusher: asyncio.Task[None] | None = None
        self.lines_written = 0
        self.snapshot_piece_bytes = SNAPSHOT_PIECE_BYTES
        # Called on the event loop after a flush when a line was too long to write: the
        # controller records a snapshot then (``_too_long``).
        self.on_snapshot_wanted: Callable[[], None] | None = None
        self._snapshot_wanted = False
        self._seq = 0  # orders lines of equal ts; restarts with the process (readers: ns, ts, seq)

    @property
    def dropped_lines(self) -> int:
        """Lines not written, every cause together."""
        return sum(self.dropped.values())

    @property
    def pending_bytes(self) -> int:
        """Memory of the lines recorded but not yet written: waiting on the loop (with their
        objects), being taken by the worker, and encoded in its backlog (capped by
        ``max_pending_bytes``)."""
        return self._pending_bytes + self._handed_bytes + self._backlog_bytes

    # ------------------------------------------------------------------ recording

    def record(self, type_: str, *, ts: int | None = None, **fields: Any) -> None:
        """Append one line ``{ts, ns, type, **fields}`` (buffered); ``ts`` defaults to now."""
        if ts is None:
            ts = self.clock_ms()
        self._seq += 1  # a dropped line leaves a gap in seq
        if self._over_cap(type_):
            return
        line = encode_line(ts, self.instance, self._seq, type_, fields)
        if len(line) > MAX_LINE_BYTES:
            self._too_long(type_, len(line))
            return
        beat = (
            compact_heartbeat(ts, self.instance, self._seq, fields) if type_ == HEARTBEAT else None
        )
        self._enqueue(ts, line, beat, line_size(line, beat))

    def record_snapshot(self, snapshot: dict[str, Any], *, ts: int | None = None) -> None:
        """Append a ``snapshot`` of ``snapshot`` (``JournalReplay.snapshot``) as its pieces
        (``snapshot_lines``): consecutive lines of one ``ts``, each under the line limit.
        All pieces are kept or all dropped (the pending cap), so a set is incomplete only
        when a crash cut it; readers then take the snapshot before it."""
        if ts is None:
            ts = self.clock_ms()
        if self._over_cap(Snapshot.TYPE):
            self._seq += 1
            return
        lines, left_out = snapshot_lines(
            ts, self.instance, self._seq + 1, snapshot, self.snapshot_piece_bytes
        )
        self._seq += len(lines)
        for line in lines:
            self._enqueue(ts, line, None, line_size(line, None))
        if left_out and self._due("snapshot_left_out"):
            log.warning(
                "journal %s: %d entries left out of the snapshot, each longer than a journal "
                "line may be (%d bytes): %s",
                self.directory,
                len(left_out),
                MAX_LINE_BYTES,
                "; ".join(left_out[:3]),
            )

    def _too_long(self, type_: str, size: int) -> None:
        """A line longer than ``MAX_LINE_BYTES`` is not written (no reader would take it):
        counted, warned about once a minute, and a snapshot is asked for so that a warm
        restart still rebuilds what the line changed (any thread)."""
        self.dropped[DROPPED_TOO_LONG] += 1
        self._snapshot_wanted = True
        if self._due(DROPPED_TOO_LONG):
            log.warning(
                "journal %s: a %s line of %d bytes is longer than any reader takes (%d): not "
                "written; the next snapshot holds what it changed",
                self.directory,
                type_,
                size,
                MAX_LINE_BYTES,
            )

    def _over_cap(self, type_: str) -> bool:
        """True (and counted) when a line of ``type_`` is dropped: ``max_pending_bytes`` are
        waiting already (twice that for ``VALUABLE_TYPES``). The newest lines go: those
        waiting keep their order and the heartbeat memory of their files stays true."""
        limit = self.max_pending_bytes * (2 if type_ in VALUABLE_TYPES else 1)
        if self.pending_bytes < limit:
            return False
        self.dropped[DROPPED_PENDING_CAP] += 1
        return True

    def _enqueue(
        self,
        ts: int,
        line: bytes | UnencodedLine,
        beat: CompactHeartbeat | None = None,
        size: int = 0,
    ) -> None:
        """Hand a line to the next flush, noting how long the oldest one waits (lag)."""
        if self._oldest_pending_ms is None:
            self._oldest_pending_ms = ts
        self._pending.append((ts, line, beat))
        self._pending_bytes += size

    def on_events(self, events: Iterable[Event]) -> None:
        """The controller's listener: one line per event (a registration's encoded later, by
        the worker thread)."""
        for event in events:
            if isinstance(event, BrokerRegistered):
                self._seq += 1
                if not self._over_cap(event.TYPE):
                    line = UnencodedLine(self.instance, self._seq, event)
                    self._enqueue(event.ts_or(self.clock_ms()), line, size=held_size(event))
                continue
            payload = event.to_record()
            self.record(payload.pop("type"), ts=event.ts_or(self.clock_ms()), **payload)

    def lag_seconds(self) -> float:
        """Age of the oldest line not yet written (0 when all are written)."""
        oldest = [t for t in (self._oldest_pending_ms, self._backlog_oldest_ms) if t is not None]
        if not oldest:
            return 0.0
        return max(0.0, (self.clock_ms() - min(oldest)) / 1000)

    # ------------------------------------------------------------------ flushing

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self._scan_directory)
        current = hour_file_name(self.clock_ms())
        for name in sorted(self._sizes):  # hours a crash or a stop left uncompressed
            if name.endswith(".jsonl") and name < current:
                self._archiver.submit(self._archive, name)
        self._flusher = asyncio.create_task(self._flush_forever())

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await self.flush()
            except OSError as exc:
                self._warn_failing(exc)
            else:
                if self._failing:
                    self._failing = False
                    log.warning("journal writes to %s resumed", self.directory)
            self._warn_drops()
            if self._snapshot_wanted and self.on_snapshot_wanted is not None:
                self._snapshot_wanted = False
                self.on_snapshot_wanted()

    def _due(self, cause: str) -> bool:
        """Whether a warning about ``cause`` may be logged now (one per interval)."""
        now = time.monotonic()
        last = self._warned_at.get(cause)
        if last is not None and now - last < WARNING_INTERVAL_S:
            return False
        self._warned_at[cause] = now
        return True

    def _warn_failing(self, exc: OSError) -> None:
        """A failed flush: one warning when writes start failing, then one per interval."""
        first = not self._failing
        self._failing = True
        if first or self._due("write"):
            if first:
                self._warned_at["write"] = time.monotonic()
            log.warning(
                "journal write to %s failed (%s): %d bytes wait for the next try; over %d "
                "(journalMaxPendingBytes) new lines are dropped",
                self.directory,
                exc.strerror or exc,
                self.pending_bytes,
                self.max_pending_bytes,
            )

    def _warn_drops(self) -> None:
        """Lines dropped over the pending cap: one warning per interval, with the count."""
        dropped = self.dropped[DROPPED_PENDING_CAP]
        if dropped > self._drops_warned and self._due(DROPPED_PENDING_CAP):
            log.warning(
                "journal %s: %d lines dropped, %d bytes waiting to be written "
                "(journalMaxPendingBytes=%d); %d dropped since the start",
                self.directory,
                dropped - self._drops_warned,
                self.pending_bytes,
                self.max_pending_bytes,
                dropped,
            )
            self._drops_warned = dropped

    async def flush(self) -> None:
        """Hand every buffered line to the worker and wait until all lines are written.

        ``OSError`` when a write failed: the lines stay with the worker, encoded, and the
        next flush resumes after the last byte that reached the file (never writing a line
        twice)."""
        if not self._pending and not self._backlog:
            return
        batch, size = self._pending, self._pending_bytes
        self._pending, self._pending_bytes, self._oldest_pending_ms = [], 0, None
        self._handed_bytes += size
        try:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._write, batch)
        except OSError:
            self.write_errors += 1
            raise
        finally:
            self._handed_bytes -= size

    def _write(
        self, batch: list[tuple[int, bytes | UnencodedLine, CompactHeartbeat | None]]
    ) -> None:
        """Worker thread: take the batch into the backlog (encoded once), then write the
        backlog in order."""
        self._take(batch)
        self._drain()

    def _take(
        self, batch: list[tuple[int, bytes | UnencodedLine, CompactHeartbeat | None]]
    ) -> None:
        """Worker thread: encode the lines left to it and join each hour's lines into one
        chunk; a heartbeat takes its compact form when its file already says the rest (or
        will: the chunks before it are written first). Over ``max_bytes`` the chunk is
        dropped instead."""
        by_hour: dict[int, list[tuple[int, bytes, CompactHeartbeat | None]]] = {}
        batch.reverse()  # taken from the end: each event is let go once its line is encoded
        while batch:
            ts, pending, beat = batch.pop()
            if isinstance(pending, bytes):
                line = pending
            else:
                try:
                    line = pending.encode(ts)
                except (TypeError, ValueError):  # orjson's errors; a bug, not the disk's
                    log.exception("journal: cannot encode %s, line skipped", pending.event.TYPE)
                    self.dropped[DROPPED_UNENCODABLE] += 1
                    continue
                if len(line) > MAX_LINE_BYTES:
                    self._too_long(pending.event.TYPE, len(line))
                    continue
            by_hour.setdefault(ts // HOUR_MS, []).append((ts, line, beat))
        for hour, items in by_hour.items():
            name = hour_file_name(hour * HOUR_MS)
            for older in [n for n in self._heartbeats if n < name]:
                del self._heartbeats[older]  # closed before this chunk: a reopening starts afresh
            memory = self._heartbeats.get(name)
            if memory is None:
                memory = self._heartbeats[name] = HeartbeatMemory()
            lines = [
                beat.line if beat is not None and memory.repeats(beat) else line
                for _, line, beat in items
            ]
            need = self._backlog_bytes + sum(map(len, lines))
            if sum(self._sizes.values()) + need > self.max_bytes:
                self._enforce_retention(keep=name, need=need)
                if sum(self._sizes.values()) + need > self.max_bytes:
                    if not self._dropping:
                        log.warning(
                            "journal %s is over its size cap (%d bytes): dropping lines "
                            "until the next hour",
                            self.directory,
                            self.max_bytes,
                        )
                    self._dropping = True
                    self.dropped[DROPPED_SIZE_CAP] += len(lines)
                    self._heartbeats[name] = HeartbeatMemory()  # it remembered dropped lines
                    continue
            self._dropping = False
            if not self._backlog:
                self._backlog_oldest_ms = items[0][0]
            for first, data, count in _runs(lines):
                self._backlog.append(_Chunk(name, data, count, items[first][0]))
                self._backlog_bytes += len(data)

    def _drain(self) -> None:
        """Worker thread: write the backlog in order; an ``OSError`` leaves the chunk being
        written at the first byte that did not reach its file."""
        backlog = self._backlog
        while backlog:
            chunk = backlog[0]
            fd = self._files.get(chunk.name)
            if fd is None:
                self._close_old_files(keep=chunk.name)
                fd = _open_for_append(self.directory / chunk.name)
                self._files[chunk.name] = fd
                self._sizes[chunk.name] = os.fstat(fd).st_size
            data = memoryview(chunk.data)
            while chunk.written < len(data):
                written = os.write(fd, data[chunk.written :])
                chunk.written += written
                self._sizes[chunk.name] = self._sizes.get(chunk.name, 0) + written
                self._backlog_bytes -= written
            backlog.popleft()
            self.lines_written += chunk.lines
            self._backlog_oldest_ms = backlog[0].first_ts if backlog else None

    def _drop_backlog(self, cause: str) -> int:
        """Worker thread: forget every unwritten line (counted under ``cause``); a line
        torn by the last failed write is ended by the next start."""
        lost = sum(chunk.lines for chunk in self._backlog)
        self.dropped[cause] += lost
        self._backlog.clear()
        self._backlog_bytes = 0
        self._backlog_oldest_ms = None
        self._heartbeats.clear()
        return lost

    def _close_old_files(self, keep: str) -> None:
        """Close the hour files before ``keep`` and hand them to the archiver."""
        for name in [n for n in self._files if n < keep]:
            os.close(self._files.pop(name))
            self._heartbeats.pop(name, None)
            self._archiver.submit(self._archive, name)
        self._enforce_retention(keep=keep, need=0)

    def _scan_directory(self) -> None:
        """Worker thread at start: the files there, their sizes, leftovers of a crash. Only
        regular files count: a symlink, FIFO or device named like an hour file is left alone
        (never opened, compressed or deleted: readers skip it too) and named in the log."""
        self._sizes.clear()
        odd: list[str] = []
        with os.scandir(self.directory) as entries:
            names = {e.name: e for e in entries}
        for name, entry in names.items():
            try:
                regular = entry.is_file(follow_symlinks=False)
            except OSError:
                regular = False
            if name.endswith(".tmp"):
                if regular:
                    Path(entry.path).unlink(missing_ok=True)  # an interrupted compression
            elif _is_hour_file_name(name):
                if not regular:
                    odd.append(name)
                    continue
                packed = names.get(name + COMPRESSED_SUFFIX)
                if packed is not None and packed.is_file(follow_symlinks=False):
                    Path(entry.path).unlink()  # compressed, then killed before the removal
                    continue
                self._sizes[name] = entry.stat(follow_symlinks=False).st_size
        if odd:
            log.warning(
                "journal %s: %d entries named like hour files are not regular files and are "
                "left alone (not read, not written): %s",
                self.directory,
                len(odd),
                ", ".join(sorted(odd)[:5]),
            )
        self._enforce_retention(keep=hour_file_name(self.clock_ms()), need=0)

    def _archive(self, name: str) -> None:
        """Archiver thread: gzip a closed hour file atomically, then remove the plain one."""
        plain = self.directory / name
        packed = plain.with_name(name + COMPRESSED_SUFFIX)
        partial = plain.with_name(name + COMPRESSED_SUFFIX + ".tmp")
        try:
            with plain.open("rb") as source, gzip.open(partial, "wb", compresslevel=6) as target:
                shutil.copyfileobj(source, target, 1 << 20)
            with partial.open("rb+") as written:
                os.fsync(written.fileno())
            os.replace(partial, packed)
        except FileNotFoundError:
            return  # deleted by retention meanwhile
        except OSError:
            log.exception("compressing journal file %s failed; it stays uncompressed", plain)
            partial.unlink(missing_ok=True)
            return
        self._writer.submit(self._archived, name, packed.stat().st_size)

    def _archived(self, name: str, packed_size: int) -> None:
        """Worker thread: the compressed file replaces the plain one (unless retention
        deleted the hour meanwhile: then it goes too)."""
        packed = self.directory / (name + COMPRESSED_SUFFIX)
        if self._sizes.pop(name, None) is None:
            packed.unlink(missing_ok=True)
            return
        (self.directory / name).unlink(missing_ok=True)
        self._sizes[packed.name] = packed_size

    def _enforce_retention(self, keep: str, need: int) -> None:
        """Worker thread: delete hour files older than the retention, then the oldest closed
        ones while the journal plus ``need`` bytes is over ``max_bytes``; never ``keep``."""
        cutoff = hour_file_name(self.clock_ms() - self.retention_hours * HOUR_MS)
        for name in sorted(self._sizes):
            if name.removesuffix(COMPRESSED_SUFFIX) >= keep or name in self._files:
                break
            too_old = name.removesuffix(COMPRESSED_SUFFIX) < cutoff
            if not too_old and sum(self._sizes.values()) + need <= self.max_bytes:
                break
            try:
                (self.directory / name).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("cannot delete old journal file %s: %s", name, exc)
                continue
            del self._sizes[name]
            log.info("journal: deleted %s (%s)", name, "retention" if too_old else "size cap")

    async def stop(self) -> None:
        """Write what is left and close the files. Never raises: lines that cannot be
        written now (a full disk) are counted as dropped (``stopped``), with one warning."""
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        loop = asyncio.get_running_loop()
        try:
            await self.flush()
        except OSError as exc:
            lost = await loop.run_in_executor(self._writer, self._drop_backlog, DROPPED_AT_STOP)
            log.warning(
                "journal %s: %d lines could not be written at stop (%s) and are lost",
                self.directory,
                lost,
                exc.strerror or exc,
            )
        self._warn_drops()
        await loop.run_in_executor(None, self._archiver.shutdown)  # its last hand-offs first
        await loop.run_in_executor(self._writer, self._close_all)
        self._writer.shutdown(wait=True)

    def _close_all(self) -> None:
        """Worker thread: sync and close every open hour file (a failing sync is logged)."""
        for name, fd in self._files.items():
            try:
                os.fsync(fd)
            except OSError as exc:
                log.warning("journal: syncing %s failed at stop: %s", name, exc.strerror or exc)
            os.close(fd)
        self._files.clear()
        self._heartbeats.clear()


def _open_for_append(path: Path) -> int:
    """Open an hour file for appending, first ending a torn last line (a crash or a failed
    write left it) so that the next line is not glued to the fragment and lost with it. A
    symlink or any other non-regular file in its place is refused (``OSError``): the journal
    writes only its own regular files."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | _NOT_FOLLOWED, 0o644)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        size = info.st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
    except OSError:
        os.close(fd)
        raise
    return fd


_NOT_FOLLOWED: Final = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


# ---------------------------------------------------------------------------- reading

# A compressed hour is read up to this many times its compressed size, at least
# MIN_INFLATED_LIMIT: journal lines compress 10-30 times, deflate at most ~1,000 times, so
# only a gzip bomb (or a flood of near-identical junk) reaches it. What was read counts.
MAX_INFLATION: Final = 256
MIN_INFLATED_LIMIT: Final = 256 * 1024 * 1024
_BLOCK: Final = 1024 * 1024  # the most one read of an hour file takes (line_blocks)
_DAMAGE_EXAMPLES: Final = 5


@dataclass(slots=True)
class JournalDamage:
    """What readers skipped, for a caller that wants to say so (once, not per line).

    Pass one to ``journal_files``, ``complete_lines`` or ``read_records``; each adds to it.
    ``files_skipped``: names of hour files that are not regular files (FIFOs, devices,
    symlinks: never opened); ``files_unreadable``: files whose reading ended early (a
    decompression or read error, a file that could not be opened, or a compressed hour past
    its inflation bound) -- the lines read before count; ``lines_too_long``: lines longer
    than ``MAX_LINE_BYTES``, skipped unread; ``lines_unparsable``: complete lines that are
    not a JSON object (``read_records`` only). A torn last line is a crash's normal trace,
    not damage. ``files`` holds the first few damaged paths, for a log line."""

    files_skipped: int = 0
    files_unreadable: int = 0
    lines_too_long: int = 0
    lines_unparsable: int = 0
    lines_invalid: int = 0  # parsed, but not the shape its type has (recovery's replay)
    snapshots_incomplete: int = 0  # a snapshot's pieces cut short (a crash): not applied
    files: list[str] = field(default_factory=list)

    KINDS: ClassVar[tuple[str, ...]] = (
        "files_skipped",
        "files_unreadable",
        "lines_too_long",
        "lines_unparsable",
        "lines_invalid",
        "snapshots_incomplete",
    )

    def add(self, kind: str, n: int = 1, path: Path | str | None = None) -> None:
        """Count ``n`` of ``kind`` (one of ``KINDS``; anything else is a ``ValueError``)."""
        if kind not in self.KINDS:
            raise ValueError(f"unknown journal damage {kind!r}")
        setattr(self, kind, getattr(self, kind) + n)
        name = str(path) if path is not None else None
        if name is not None and name not in self.files and len(self.files) < _DAMAGE_EXAMPLES:
            self.files.append(name)

    def merge(self, other: JournalDamage) -> None:
        """Add what ``other`` counted, its example paths too (within the same bound)."""
        for kind, count in other.to_record().items():
            setattr(self, kind, getattr(self, kind) + count)
        for name in other.files:
            if name not in self.files and len(self.files) < _DAMAGE_EXAMPLES:
                self.files.append(name)

    @property
    def total(self) -> int:
        return sum(getattr(self, kind) for kind in self.KINDS)

    def __bool__(self) -> bool:
        return self.total > 0

    def to_record(self) -> dict[str, int]:
        """The non-zero counters, e.g. ``{"files_skipped": 1, "lines_too_long": 2}``."""
        return {kind: count for kind in self.KINDS if (count := getattr(self, kind))}

    def summary(self) -> str:
        """One line for an operator: what was skipped, and where (the first few files)."""
        if not self:
            return "no damage"

        def count(n: int, what: str) -> str:
            return f"{n} {what}{'' if n == 1 else 's'}"

        said = {
            "files_skipped": lambda n: f"{count(n, 'file')} skipped (not a regular file)",
            "files_unreadable": lambda n: f"{count(n, 'file')} read only up to damage",
            "lines_too_long": lambda n: f"{count(n, 'line')} over {MAX_LINE_BYTES} bytes skipped",
            "lines_unparsable": lambda n: f"{count(n, 'unparsable line')} skipped",
            "lines_invalid": lambda n: f"{count(n, 'invalid line')} skipped",
            "snapshots_incomplete": lambda n: f"{count(n, 'incomplete snapshot')} skipped",
        }
        parts = [said[kind](n) for kind, n in self.to_record().items()]
        where = f" (in {', '.join(self.files)})" if self.files else ""
        return "; ".join(parts) + where


def _count(damage: JournalDamage | None, kind: str, path: Path) -> None:
    if damage is not None:
        damage.add(kind, path=path)


def _is_hour_file_name(name: str) -> bool:
    return name.startswith("events-") and name.endswith((".jsonl", ".jsonl.gz"))


def _hour_files_under(directory: Path, damage: JournalDamage | None) -> list[Path]:
    """Regular files named like hour files under ``directory``, never following a symlink
    (to a file or a directory): the journal is read only where it was written."""
    found: list[Path] = []
    stack = [directory]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif _is_hour_file_name(entry.name):
                            if entry.is_file(follow_symlinks=False):
                                found.append(Path(entry.path))
                            else:  # a symlink, FIFO, socket or device named like one
                                _count(damage, "files_skipped", Path(entry.path))
                    except OSError:
                        _count(damage, "files_unreadable", Path(entry.path))
        except OSError:
            if current is not directory:
                _count(damage, "files_unreadable", current)
    return found


def journal_files(path: Path, damage: JournalDamage | None = None) -> list[Path]:
    """The hour files under ``path`` (a file, an instance directory or the journal root),
    plain or compressed, in time order; an hour present in both forms (a compression that
    was interrupted) is taken from the compressed file. Only regular files are listed:
    symlinks (even to a regular file), FIFOs and devices named like hour files are skipped
    and counted in ``damage``. ``path`` itself may be a symlink (the caller named it)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return []
    if stat.S_ISREG(mode):
        return [path]
    if not stat.S_ISDIR(mode):
        _count(damage, "files_skipped", path)
        return []
    found = _hour_files_under(path, damage)
    packed = {p for p in found if p.name.endswith(COMPRESSED_SUFFIX)}
    files = [p for p in found if p not in packed and p.with_name(p.name + ".gz") not in packed]
    files += packed
    return sorted(files, key=lambda p: (p.name.removesuffix(COMPRESSED_SUFFIX), str(p)))


_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open_regular(file: Path, damage: JournalDamage | None) -> BinaryIO | None:
    """``file`` opened for reading when it is a regular file, else None (counted). Opened
    without following a symlink and without blocking (a FIFO's open waits for a writer)."""
    try:
        fd = os.open(file, _OPEN_FLAGS)
    except OSError as exc:
        skipped = exc.errno in (errno.ELOOP, errno.ENXIO)  # a symlink; a socket
        _count(damage, "files_skipped" if skipped else "files_unreadable", file)
        return None
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        _count(damage, "files_skipped", file)
        return None
    return os.fdopen(fd, "rb")


def line_blocks(
    file: Path, damage: JournalDamage | None = None, *, max_line: int | None = None
) -> Iterator[bytes]:
    """An hour file's complete lines (plain or gzip-compressed) as blocks of whole lines, each
    ending with a newline: what ``complete_lines`` yields, joined. For a reader that looks for
    a few lines among many (time travel: the snapshots and route changes among a hundred
    thousand heartbeats an hour) with one search per block rather than a step per line.

    Bounded as ``complete_lines`` says: a torn last line is left out; a line longer than
    ``max_line`` is skipped, read in pieces and never held whole; a compressed file is
    inflated to at most ``MAX_INFLATION`` times its size; what was skipped is counted in
    ``damage``. A block is what one read gave (at most ``_BLOCK`` bytes), or one long line."""
    if max_line is None:
        max_line = MAX_LINE_BYTES
    raw = _open_regular(file, damage)
    if raw is None:
        return
    with raw:
        handle: BinaryIO = raw
        limit = None
        if file.name.endswith(COMPRESSED_SUFFIX):
            handle = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
            limit = max(MIN_INFLATED_LIMIT, MAX_INFLATION * os.fstat(raw.fileno()).st_size)
        lines = _Lines(max_line, file, damage)
        read = 0
        try:
            while True:
                # read1: what one read of the file (or one inflated piece of it) gave, so a
                # damaged archive yields the lines before the damage, as readline did.
                chunk = handle.read1(min(_BLOCK, max_line))  # type: ignore[attr-defined]
                if not chunk:
                    return  # what is left without a newline is a torn last line
                if limit is not None:
                    read += len(chunk)
                    if read > limit:
                        block = lines.take(chunk[: len(chunk) - (read - limit)])
                        if block:
                            yield block
                        _count(damage, "files_unreadable", file)
                        return
                block = lines.take(chunk)
                if block:
                    yield block
        except (OSError, EOFError, zlib.error):  # gzip.BadGzipFile is an OSError
            _count(damage, "files_unreadable", file)


class _Lines:
    """Pieces of a file in, blocks of whole lines out: the start of a line that continues in
    the next piece waits (as a list of pieces: a long line is joined once); one that passes
    the line limit is dropped and counted, and the rest of it skipped as it comes."""

    __slots__ = ("damage", "file", "max_line", "parts", "size", "skipping")

    def __init__(self, max_line: int, file: Path, damage: JournalDamage | None) -> None:
        self.max_line = max_line
        self.file = file
        self.damage = damage
        self.parts: list[bytes] = []  # the unfinished line
        self.size = 0
        self.skipping = False  # inside a line over the limit

    def take(self, chunk: bytes) -> bytes:
        if self.skipping:
            end = chunk.find(b"\n")
            if end < 0:
                return b""
            chunk, self.skipping = chunk[end + 1 :], False
        last = chunk.rfind(b"\n")
        if last < 0:
            if self.size + len(chunk) >= self.max_line:
                self._too_long()
            elif chunk:
                self.parts.append(chunk)
                self.size += len(chunk)
            return b""
        if self.parts:
            first = chunk.find(b"\n") + 1
            if self.size + first > self.max_line:
                self.parts, self.size = [], 0
                _count(self.damage, "lines_too_long", self.file)
                block = chunk[first : last + 1]
            else:
                block = b"".join((*self.parts, chunk[: last + 1]))
                self.parts, self.size = [], 0
        else:
            block = chunk[: last + 1] if last + 1 < len(chunk) else chunk
        rest = chunk[last + 1 :]
        if rest:
            self.parts, self.size = [rest], len(rest)
        return block

    def _too_long(self) -> None:
        self.parts, self.size = [], 0
        self.skipping = True
        _count(self.damage, "lines_too_long", self.file)


_NEWLINE: Final = ord("\n")
_EMPTY_LINES: Final = re.compile(rb"\n+")


def complete_lines(
    file: Path, damage: JournalDamage | None = None, *, max_line: int | None = None
) -> Iterator[bytes]:
    """An hour file's lines, plain or gzip-compressed, as written: a torn last line (a crash
    mid-write) is skipped; a damaged file yields its lines up to the damage, never fatal.

    Bounded: a line longer than ``max_line`` bytes is skipped, read in pieces and never held
    whole; a compressed file is inflated to at most ``MAX_INFLATION`` times its size (at
    least ``MIN_INFLATED_LIMIT``); a file that is not a regular file is not read. What was
    skipped is counted in ``damage``. ``max_line`` defaults to ``MAX_LINE_BYTES``. The lines
    of ``line_blocks``, one at a time, without empty ones: a writer never writes one, Spark's
    JSON reader skips them too, and a run of them is skipped at once (a compressed file of
    newlines cost a Python step and a parse error each: minutes within its inflation bound)."""
    for block in line_blocks(file, damage, max_line=max_line):
        start, size = 0, len(block)
        while start < size:
            if block[start] == _NEWLINE:
                start = _EMPTY_LINES.match(block, start).end()  # type: ignore[union-attr]
                continue
            end = block.index(b"\n", start) + 1
            yield block[start:end]
            start = end


def read_records(
    files: Iterable[Path], *, expand: bool = True, damage: JournalDamage | None = None
) -> Iterator[dict[str, Any]]:
    """Every well-formed line of ``complete_lines``. Compact heartbeats come in their full
    form unless ``expand`` is false. Complete lines that are not a JSON object are skipped
    (counted in ``damage`` as ``lines_unparsable``)."""
    for file in files:
        expander = HeartbeatExpander() if expand else None
        for raw in complete_lines(file, damage):
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                _count(damage, "lines_unparsable", file)
                continue
            if isinstance(record, dict):
                yield record if expander is None else expander.expand(record)
            else:
                _count(damage, "lines_unparsable", file)
