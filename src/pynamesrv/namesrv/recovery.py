"""Warm restart: the route table rebuilt from this instance's journal (docs/journal.md).

Why a module of its own: the registry knows how one journal line changes its tables
(``RouteInfoManager.apply_*``); this module knows the journal as a whole: which lines to take
(the last *base* and everything after it), in what order, and what a restart in the middle
means. ``replay`` is pure (records in, registry changed), so anything that holds an
instance's lines can rebuild what the instance held, exactly as it answered: the server at
start (``recover``) and time travel over archived journals alike.

Why the journal and not a route file of its own: the journal already holds a ``snapshot``
every ``journalSnapshotIntervalMs`` (10 min) and at a clean stop, and every change after it,
flushed every ``journalFlushIntervalMs`` (1 s). Writing the whole table every second to lose
at most a second would cost far more than replaying at most ten minutes of lines at start.

Streaming, and why: recovery never holds the lines it replays. A flood of registrations and
closes once left a million lines after the last snapshot, and holding them (as bytes, then as
dicts) took 1.36 GB before the port opened: under a 1 GiB limit every start was killed and
replayed the same lines again. A first pass notes where each base begins from the lines'
heads alone; a second reads forward from the last one and applies each line as it is read
(``stream_replay``), so the peak is the routes rebuilt plus one line. A snapshot is written
in pieces (``journal.snapshot_lines``); a set of pieces a crash cut short is no base.

Bounds: a clean stop loses nothing (its last lines are a snapshot and ``server_stopped``), a
kill -9 at most the last flush interval. Brokers come back *provisional* (live, with the
recorded last heartbeat, without a connection) and leave by the normal deadline rule; those
whose deadline passed while the server was down are dropped at load, so a server that was
down for longer than its brokers' timeouts starts empty, as it always did.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any, Final

import orjson

from pynamesrv.namesrv.events import RecordError, ServerStarted, Snapshot, TopicRemoved
from pynamesrv.namesrv.journal import JournalDamage, complete_lines, journal_files
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.routes.replay import REPLAYED_EVENTS

log = logging.getLogger("pynamesrv")

SNAPSHOT: Final = Snapshot.TYPE
STARTED: Final = ServerStarted.TYPE
TOPIC_REMOVED: Final = TopicRemoved.TYPE
# The line types that change routes (derived from the events the registry applies); every
# other type (route_queries, kv_changed, config_changed, server_stopped, …) does not.
REPLAYED: Final = frozenset(REPLAYED_EVENTS)
# Journal.record writes ``{"ts":…,"ns":…,"seq":…,"type":"…"`` first (ns is at most a
# 128-character name or host:port), so a line's type is read from its head without parsing
# the line: a snapshot of 100,000 topics is megabytes that only the last one needs parsing.
_HEAD_BYTES: Final = 512
_TYPE: Final = re.compile(rb'"type"\s*:\s*"([a-z_]{1,64})"')
# The rest of a snapshot piece's head: where it belongs (docs/journal.md, ``snapshot``).
_TS: Final = re.compile(rb'"ts"\s*:\s*(-?[0-9]{1,20})\b')
_SEQ: Final = re.compile(rb'"seq"\s*:\s*(-?[0-9]{1,20})\b')
_PART: Final = re.compile(rb'"part"\s*:\s*([0-9]{1,20})\b')
_PARTS: Final = re.compile(rb'"parts"\s*:\s*([0-9]{1,20})\b')
_NS: Final = re.compile(rb'"ns"\s*:\s*("(?:[^"\\]|\\.){0,400}")')


@dataclass(slots=True)
class ReplayResult:
    """What ``replay`` applied: the base snapshot's time (None when the lines began with a
    run that started empty), the lines applied after it, and the newest line's time."""

    snapshot_ts: int | None = None
    events: int = 0
    last_ts: int | None = None


def _piece_of(record: Mapping[str, Any]) -> tuple[int, int] | None:
    """(part, parts) of a ``snapshot`` line that is one piece of several; None for a whole
    one (no ``part``: older journals; or ``parts`` 1). RecordError for values no writer
    writes."""
    part, parts = record.get("part"), record.get("parts")
    if part is None and parts is None:
        return None
    if type(part) is not int or type(parts) is not int or not 1 <= part <= parts:
        raise RecordError("snapshot: part and parts are not 1 <= part <= parts")
    return None if parts == 1 else (part, parts)


class Replayer:
    """``replay`` one line at a time, for a reader that streams the lines (recovery) rather
    than holding them: what it holds is the routes plus, while a snapshot's pieces arrive,
    those pieces (the state being restored: a snapshot replaces everything only once it is
    complete). A set of pieces that another line interrupts, or that does not continue part
    by part (a crash cut it, a piece did not parse), is not applied and is counted as damage
    (``snapshots_incomplete``): the routes stay what the lines before it made them, which is
    what the set would have restated."""

    def __init__(self, routes: RouteInfoManager, damage: JournalDamage | None = None) -> None:
        self.routes = routes
        self.damage = damage
        self.result = ReplayResult()
        self.based = False  # a base (a snapshot, or a start that began empty) was applied
        self._pieces: list[Mapping[str, Any]] = []

    def feed(self, record: Mapping[str, Any] | None) -> None:
        """Apply the next line (None: a line of this instance that did not parse)."""
        if record is None:
            self._cut()
            return
        kind = record.get("type")
        if kind not in REPLAYED:
            return
        if kind == SNAPSHOT:
            try:
                piece = _piece_of(record)
            except RecordError:
                self._invalid()
                return
            if piece is not None:
                self._piece(record, *piece)
                return
        self._cut()
        ts = record.get("ts")
        if kind == TOPIC_REMOVED and self._gone(record):
            self.result.events += 1
            self.result.last_ts = ts
            return
        try:
            event = self.routes.apply_record(record)
        except ValueError:  # RecordError, or a value no table can hold
            self._invalid()
            return
        if kind == SNAPSHOT:
            self._based(ts)
            return
        if isinstance(event, ServerStarted):
            if event.recovered is None:
                self.result = ReplayResult()
                self.based = True
            self.result.last_ts = ts
            return  # not a route change of its own: not counted
        self.result.events += 1
        self.result.last_ts = ts

    def finish(self) -> ReplayResult:
        """The result, once every line was fed (a set of pieces still open is incomplete)."""
        self._cut()
        return self.result

    def _gone(self, record: Mapping[str, Any]) -> bool:
        """A ``topic_removed`` of a topic the routes no longer hold, which its apply would
        leave as it is: the lines that followed a broker's removal, one per topic, before
        removals were one event (journals of a flood hold a million). Not read back as an
        event (a fifth of the cost); its ``ts`` is still checked."""
        topic, ts = record.get("topic"), record.get("ts")
        return (
            type(topic) is str
            and type(ts) is int
            and topic not in self.routes.topic_queue_table
            and topic not in self.routes.topic_queue_mapping
        )

    def _based(self, ts: Any) -> None:
        self.result = ReplayResult(snapshot_ts=ts, last_ts=ts)
        self.based = True

    def _invalid(self) -> None:
        if self.damage is None:
            raise RecordError("a line without its documented shape")
        self.damage.add("lines_invalid")

    def _cut(self) -> None:
        """The open set of pieces ends incomplete (counted; nothing applied)."""
        if self._pieces:
            self._pieces = []
            if self.damage is not None:
                self.damage.add("snapshots_incomplete")

    def _piece(self, record: Mapping[str, Any], part: int, parts: int) -> None:
        if self._pieces:
            last = self._pieces[-1]
            seq, last_seq = record.get("seq"), last.get("seq")
            if not (
                part == last["part"] + 1
                and parts == last["parts"]
                and record.get("ts") == last.get("ts")
                and (type(seq) is not int or type(last_seq) is not int or seq == last_seq + 1)
            ):
                self._cut()
        if not self._pieces and part != 1:
            if self.damage is not None:
                self.damage.add("snapshots_incomplete")
            return
        self._pieces.append(record)
        if part < parts:
            return
        pieces, self._pieces = self._pieces, []
        try:
            self.routes.restore_snapshot(*pieces)
        except ValueError:
            self._invalid()
            return
        self._based(record.get("ts"))


def replay(
    records: Iterable[Mapping[str, Any]],
    routes: RouteInfoManager,
    damage: JournalDamage | None = None,
) -> ReplayResult:
    """Apply one instance's journal lines to ``routes``, in journal order.

    The rules, line by line:

    * ``snapshot`` replaces the whole state (``restore_snapshot``), once every piece of it
      arrived (a snapshot written in pieces: ``Replayer``);
    * ``server_started`` of a run that began empty (no ``recovered``) empties the table; of a
      run that recovered, the brokers whose deadline had passed at its start leave, and if
      none is left the table is empty (what ``recover`` did at that start);
    * every other line that changes routes is read back as its event and applied by
      ``RouteChanges.apply``, the code that applied it live;
    * every other type changes no route and is skipped.

    Lines may be plain dicts or rows with every column (absent fields as None). Recovered
    brokers are provisional (``RouteInfoManager.is_provisional``). A line of a replayed type
    without the documented shape raises ``RecordError`` (a ``ValueError``), or with
    ``damage`` is skipped and counted there (``lines_invalid``): the server serves what
    survived rather than nothing (a line is checked whole before it changes anything).
    """
    replayer = Replayer(routes, damage)
    for record in records:
        replayer.feed(record)
    return replayer.finish()


# ---------------------------------------------------------------------------- the files


@dataclass(frozen=True, slots=True)
class _Base:
    """Where a usable base starts: its file (index in the file list), the line (index among
    that file's complete lines), and how many replayed lines it is (a snapshot's pieces)."""

    file: int
    line: int
    size: int


@dataclass(slots=True)
class _OpenSet:
    """A snapshot's pieces seen so far by the first pass (heads only)."""

    base: _Base
    ts: int
    seq: int
    part: int
    parts: int


def _head_int(pattern: re.Pattern[bytes], head: bytes) -> int | None:
    match = pattern.search(head)
    return int(match[1]) if match is not None else None


def _head_ns(head: bytes) -> str | None:
    match = _NS.search(head)
    if match is None:
        return None
    try:
        value = orjson.loads(match[1])
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _candidates(
    files: list[Path], instance: str | None, damage: JournalDamage | None
) -> Iterator[_Base]:
    """First pass: the usable bases, newest first, an hour file at a time from the newest
    (``_bases_in``): a start reads only the files from its base on, never the whole
    retention, and holds nothing but these positions."""
    for file_index in range(len(files) - 1, -1, -1):
        yield from reversed(_bases_in(files, file_index, instance, damage))


def _bases_in(
    files: list[Path], file_index: int, instance: str | None, damage: JournalDamage | None
) -> list[_Base]:
    """Where every usable base of one hour file starts, in order, from the lines' heads
    alone (a ``server_started`` is parsed: a few KiB), one line at a time. A snapshot counts
    once every piece of it was seen, part after part (its pieces are consecutive replayed
    lines of one ``ts``, hence of one file); whether its pieces parse is known only when the
    second pass reads them."""
    bases: list[_Base] = []
    open_set: _OpenSet | None = None
    for line_index, raw in enumerate(complete_lines(files[file_index], damage)):
        kind = _kind(raw)
        if kind not in REPLAYED:
            continue
        head = raw[:_HEAD_BYTES]
        if kind == STARTED:
            open_set = None
            record = _loads(raw)
            if (
                record is not None
                and record.get("recovered") is None
                and (instance is None or record.get("ns") == instance)
            ):
                bases.append(_Base(file_index, line_index, 1))
            continue
        if kind != SNAPSHOT:
            open_set = None
            continue
        if instance is not None and _head_ns(head) != instance:
            continue  # another instance's: skipped as the second pass skips it
        ts, seq = _head_int(_TS, head), _head_int(_SEQ, head)
        part, parts = _head_int(_PART, head), _head_int(_PARTS, head)
        if part is None or parts is None or parts == 1:
            open_set = None
            bases.append(_Base(file_index, line_index, 1))
            continue
        if part == 1:
            start = _Base(file_index, line_index, parts)
            open_set = _OpenSet(start, ts or 0, seq or 0, part=1, parts=parts)
        elif (
            open_set is None
            or part != open_set.part + 1
            or parts != open_set.parts
            or ts != open_set.ts
            or seq != open_set.seq + 1
        ):
            open_set = None
            continue
        else:
            open_set.part, open_set.seq = part, seq or 0
        if open_set.part == open_set.parts:
            bases.append(open_set.base)
            open_set = None
    return bases


def _stream(
    files: list[Path], base: _Base, instance: str | None, damage: JournalDamage | None
) -> Iterator[dict[str, Any] | None]:
    """Second pass: the replayed lines of ``instance`` from ``base`` on, parsed one at a
    time (None for one that does not parse, counted)."""
    for file_index in range(base.file, len(files)):
        skip = base.line if file_index == base.file else 0
        # The first pass counted the files' damage: not again.
        for line_index, raw in enumerate(complete_lines(files[file_index])):
            if line_index < skip or _kind(raw) not in REPLAYED:
                continue
            record = _loads(raw)
            if record is None:
                if damage is not None:
                    damage.add("lines_unparsable")
                yield None
            elif instance is None or record.get("ns") == instance:
                yield record


def stream_replay(
    directory: Path,
    routes: RouteInfoManager,
    instance: str | None = None,
    damage: JournalDamage | None = None,
) -> ReplayResult | None:
    """Rebuild into ``routes`` (empty) the newest state of one instance directory, streaming:
    a first pass finds where the last usable base begins (``_bases``), a second reads
    forward from it and applies each line as it is read (``Replayer``). Peak memory is the
    routes plus one line and, while the base is restored, its pieces: never the lines after
    it. A base whose lines turn out not to parse or not to hold a snapshot (a piece torn by a
    crash and ended by the next start's newline) is given up for the one before it. None
    (``routes`` left empty) when no base is usable."""
    files = journal_files(directory, damage) if directory.is_dir() else []
    for base in _candidates(files, instance, damage):
        replayer = Replayer(routes, damage)
        for fed, record in enumerate(_stream(files, base, instance, damage), 1):
            replayer.feed(record)
            if fed == base.size and not replayer.based:
                break
        if replayer.based:
            return replayer.finish()
        routes.reset()
    return None


def read_tail(
    directory: Path, instance: str | None = None, damage: JournalDamage | None = None
) -> list[dict[str, Any]] | None:
    """The lines ``replay`` needs to rebuild the newest state of one instance directory: the
    last usable *base* (a ``snapshot`` -- every piece of it --, or the ``server_started`` of a
    run that began empty) and every route-changing line after it, in journal order. None when
    no base is left. For tools and tests over small journals: ``recover`` streams instead
    (``stream_replay``) and never holds these lines.

    Lines of another instance (``ns`` other than ``instance``), torn lines and lines that do
    not parse are skipped, as every journal reader does. A snapshot torn by a crash and ended
    with a newline by the next start is a complete line that does not parse: the snapshot
    before it is used then."""
    files = journal_files(directory, damage) if directory.is_dir() else []
    for base in _candidates(files, instance, damage):
        lines = list(_stream(files, base, instance, damage))
        head = lines[: base.size]
        if len(head) == base.size and all(r is not None for r in head):
            return [r for r in lines if r is not None]
    return None


@dataclass(frozen=True, slots=True)
class Head:
    """Where a line belongs, from its head (``Journal.record`` writes ts, ns, seq and type
    first; a snapshot piece's part and parts follow): time travel places the lines it reads
    with it and parses only those it applies. A line written another way is parsed."""

    type: str | None
    ns: str | None
    ts: int | None
    seq: int  # 0 when absent, as the pipeline orders lines
    part: int | None = None
    parts: int | None = None


def read_head(raw: bytes) -> Head:
    """``raw``'s ``Head`` (None for what the line does not say, or does not say as an
    integer or a string)."""
    head = raw[:_HEAD_BYTES]
    kind, ns, ts = _kind(raw), _head_ns(head), _head_int(_TS, head)
    if ns is not None and ts is not None:
        seq = _head_int(_SEQ, head) or 0
        return Head(kind, ns, ts, seq, _head_int(_PART, head), _head_int(_PARTS, head))
    record = _loads(raw) or {}

    def whole(name: str) -> int | None:
        value = record.get(name)
        return value if type(value) is int else None

    name = record.get("ns")
    return Head(
        kind,
        name if isinstance(name, str) else None,
        whole("ts"),
        whole("seq") or 0,
        whole("part"),
        whole("parts"),
    )


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """A line as the JSON object it holds, None when it holds none."""
    return _loads(raw)


def _kind(raw: bytes) -> str | None:
    """A line's type from its head; a line written another way is parsed to find out."""
    match = _TYPE.search(raw, 0, _HEAD_BYTES)
    if match is not None:
        return match[1].decode()
    record = _loads(raw)
    kind = record.get("type") if record is not None else None
    return kind if isinstance(kind, str) else None


def _loads(raw: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


# ---------------------------------------------------------------------------- at start


@dataclass(slots=True)
class Recovered:
    """What ``recover`` loaded, as ``server_started`` records it (``recovered``)."""

    from_ts: int | None  # the newest line replayed: the moment the recovered state describes
    snapshot_ts: int | None  # the snapshot it started from (None: a run that began empty)
    events: int  # lines replayed after the snapshot
    brokers: int  # broker addresses recovered, all provisional at start
    topics: int  # topics with a route
    expired_on_load: int  # brokers whose deadline passed while the server was down
    load_ms: int  # reading and replaying

    def to_record(self) -> dict[str, Any]:
        return {
            "from_ts": self.from_ts,
            "snapshot_ts": self.snapshot_ts,
            "events": self.events,
            "brokers": self.brokers,
            "topics": self.topics,
            "expired_on_load": self.expired_on_load,
            "load_ms": self.load_ms,
        }


def recover(
    directory: Path,
    routes: RouteInfoManager,
    now_ms: int,
    instance: str | None = None,
    damage: JournalDamage | None = None,
) -> Recovered | None:
    """Load the newest state of an instance's journal directory into ``routes`` (which must
    be empty and not yet serving), then drop the brokers past their deadline at ``now_ms``:
    nothing older than a broker's own timeout is kept. None when the journal holds no state
    to start from, or cannot be read (then ``routes`` is left empty and the reason logged).

    Never fails on what the files hold: damaged lines and files are skipped, counted in
    ``damage`` and logged once, and the rest is recovered."""
    started = perf_counter()
    damage = JournalDamage() if damage is None else damage
    try:
        result = stream_replay(directory, routes, instance, damage)
    except OSError as exc:  # the directory itself cannot be read
        routes.reset()
        log.warning("routes not recovered from the journal in %s: %s", directory, exc)
        return None
    if damage:
        log.warning("journal %s is damaged; recovered what survived: %s", directory,
                    damage.summary())  # fmt: skip
    if result is None:
        return None
    before = len(routes.broker_live_table)
    routes.expire(now_ms)
    expired = before - len(routes.broker_live_table)
    if not routes.broker_live_table:
        routes.reset()  # no broker left to route to: nothing else is worth keeping
    return Recovered(
        from_ts=result.last_ts,
        snapshot_ts=result.snapshot_ts,
        events=result.events,
        brokers=len(routes.broker_live_table),
        topics=len(routes.topic_queue_table),
        expired_on_load=expired,
        load_ms=round((perf_counter() - started) * 1000),
    )
