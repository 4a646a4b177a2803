"""Time travel over journal files on this machine: the route tables instances held at a
past moment T, read from the hour files T needs with the reader (``journal.line_blocks``) and
the replay (``recovery.Replayer``) that warm restart uses. No Spark: ``pynamesrv pipeline
routes-at`` over a local directory and a running server answering for its own journal (the
JSON API, ``pynamesrv admin routeAt``) both come here; Spark reads journals on cluster
storage (``pipeline.history``) and must give the same bytes.

What is replayed (docs/pipeline-semantics.md, routes-at): per instance (the lines' ``ns``),
its last *base* at or before T -- a complete ``snapshot``, or the ``server_started`` of a run
that began empty (a warm start goes on from the base before it, as recovery does) -- and every
route-changing line after it up to and including T, in journal order. Heartbeats and
``broker_recovered`` lines are not read: they only move deadlines and make brokers
provisional, which a table rebuilt at T never checks (removals are journaled).

Which files, and why so few: snapshots are written every 10 minutes, so a base is almost
always in the hour file of T or the one before. Those two are read first, per instance
directory; only a directory where an instance has no base among them gets older files, twice
as many each time. A day or a year of journals costs the same two files.

How it stays fast: heartbeats are 99 % of an hour file (120,000 lines an hour for 1,000
brokers), and looking at each line costs ~0.2 s a file. The lines wanted are found instead
with one regular-expression search per block of lines for their ``"type"``, then placed by
their head (``recovery.read_head``) and parsed only when applied. A first pass notes where
each instance's bases are (positions, never lines); a second reads forward from the last one
and applies each line as it is read, so the memory is the routes rebuilt plus one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from pynamesrv.namesrv import recovery, snapshot_pieces, timetravel
from pynamesrv.namesrv.events import BrokerHeartbeat, BrokerRecovered
from pynamesrv.namesrv.journal import (
    COMPRESSED_SUFFIX,
    HOUR_MS,
    JournalDamage,
    instance_dir_name,
    journal_files,
    line_blocks,
)
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.timetravel import lacks_queue_data

# The line types time travel applies: what recovery replays but heartbeats and
# broker_recovered (see above); with them, when a warm start lies between the base and T
# (``DEADLINES``).
REPLAYED: Final = frozenset(recovery.REPLAYED - {BrokerHeartbeat.TYPE, BrokerRecovered.TYPE})
DEADLINES: Final = frozenset(recovery.REPLAYED)


def _finder(types: frozenset[str]) -> re.Pattern[bytes]:
    names = b"|".join(t.encode() for t in sorted(types))
    return re.compile(rb'"type"\s*:\s*"(?:' + names + rb')"')


_FINDERS: Final = {REPLAYED: _finder(REPLAYED), DEADLINES: _finder(DEADLINES)}
FIRST_FILES: Final = 2  # the hour of T and the one before
FILE_NAMES: Final = "events-YYYYMMDD-HH.jsonl[.gz]"  # what _NAME matches, for messages
_NAME: Final = re.compile(r"^events-(\d{8})-(\d{2})\.jsonl(\.gz)?$")


class OutsideJournals(ValueError):
    """T is not inside the hours the journals cover (the message says which they cover)."""


class HourFileLike(Protocol):
    """One hour file of one instance directory (``HourFile``; the pipeline's listing of
    files Spark reads has the same three fields)."""

    @property
    def instance(self) -> str: ...  # the directory's name

    @property
    def hour_ms(self) -> int: ...

    @property
    def path(self) -> str: ...


F = TypeVar("F", bound=HourFileLike)


@dataclass(frozen=True, slots=True)
class HourFile:
    """One local hour file: its instance directory's name, its hour, its path."""

    instance: str
    hour_ms: int
    path: str


def hour_of_name(name: str) -> int | None:
    """Epoch ms of the hour a journal file name stands for; None for other files."""
    match = _NAME.match(name)
    if match is None:
        return None
    day, hour = match.group(1), int(match.group(2))
    try:
        moment = datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC)
    except ValueError:
        return None
    if hour > 23:
        return None
    return round(moment.timestamp() * 1000) + hour * HOUR_MS


def hour_files(paths: Iterable[Path], damage: JournalDamage | None = None) -> list[HourFile]:
    """The hour files under ``paths`` (files, instance directories, journal roots), one per
    instance directory and hour (the compressed one of a pair: ``journal.journal_files``),
    oldest first."""
    found: dict[tuple[str, int], HourFile] = {}
    for path in paths:
        for file in journal_files(path, damage):
            hour = hour_of_name(file.name)
            if hour is not None:
                key = (file.parent.name, hour)
                current = found.get(key)
                if current is None or file.name.endswith(COMPRESSED_SUFFIX):
                    found[key] = HourFile(file.parent.name, hour, str(file))
    return sorted(found.values(), key=lambda f: (f.hour_ms, f.instance))


# ---------------------------------------------------------------------------- the range


_EPOCH_MS: Final = re.compile(r"^-?\d+$")


def parse_time(value: str) -> int:
    """Epoch milliseconds from ``1767225600000`` or ISO-8601 (``2026-01-01T00:00:00Z``,
    ``2026-01-01 00:00``, ``2026-01-01``); a time without a zone is UTC. ``ValueError`` for
    anything else."""
    text = value.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"not epoch ms or ISO-8601: {value!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def iso_time(ms: int) -> str:
    """``2026-01-01T00:00:15Z`` (milliseconds only when there are some)."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    text = moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")
    return text.replace("+00:00", "Z")


def by_instance_dir(files: Sequence[F], instance: str | None) -> dict[str, list[F]]:
    """Hour files per instance directory, oldest first (only the instance's own directory
    when there is one of its name)."""
    by_dir: dict[str, list[F]] = {}
    for file in files:
        by_dir.setdefault(file.instance, []).append(file)
    if instance is not None and instance_dir_name(instance) in by_dir:
        by_dir = {instance_dir_name(instance): by_dir[instance_dir_name(instance)]}
    return {d: sorted(fs, key=lambda f: f.hour_ms) for d, fs in by_dir.items()}


def covered(files: Sequence[HourFileLike]) -> tuple[int, int]:
    """[start of the first hour, end of the last hour) the hour files stand for."""
    return min(f.hour_ms for f in files), max(f.hour_ms for f in files) + HOUR_MS


def check_time(
    files: Sequence[HourFileLike],
    at_ms: int,
    instance: str | None = None,
    *,
    open_end: bool = False,
) -> None:
    """Refuse a time the journals (of ``instance``'s directory, when it has one) do not
    cover: before their first hour nothing was recorded, and after their last hour the
    server may have changed anything or stopped (``open_end``: the server is running and
    wrote every line it recorded, so nothing changed since). ``OutsideJournals`` says the
    range."""
    own = by_instance_dir(files, instance)
    chosen = [f for fs in own.values() for f in fs]
    if not chosen:
        raise OutsideJournals("no journal files")
    start, end = covered(chosen)
    if start <= at_ms and (at_ms < end or open_end):
        return
    whose = f" of {instance}" if instance and instance_dir_name(instance) in own else ""
    side = "before" if at_ms < start else "after"
    raise OutsideJournals(
        f"{iso_time(at_ms)} is {side} the journals{whose}: they cover {iso_time(start)} "
        f"to {iso_time(end)}"
    )


# ---------------------------------------------------------------------------- the lines


def _wanted_lines(
    path: str, damage: JournalDamage | None, types: frozenset[str] = REPLAYED
) -> Iterator[tuple[int, bytes, recovery.Head]]:
    """(offset, line, head) of the lines of one hour file whose type is one of ``types``,
    in order; the offset (among the file's complete lines) places a line for the second pass.
    A block is searched for the types' ``"type":"…"``; a hit counts only when it is the
    line's own type (``recovery.read_head``), so a value that looks like one is not taken
    for it."""
    finder = _FINDERS[types]
    offset = 0
    for block in line_blocks(Path(path), damage):
        taken = -1
        for match in finder.finditer(block):
            start = block.rfind(b"\n", 0, match.start()) + 1
            if start == taken:
                continue  # a second hit in a line already looked at
            taken = start
            raw = block[start : block.index(b"\n", match.end()) + 1]
            head = recovery.read_head(raw)
            if head.type in types:
                yield offset + start, raw, head
        offset += len(block)


@dataclass(frozen=True, slots=True, order=True)
class _Position:
    """A line's place in the files taken: the file, then its offset there."""

    file: int
    offset: int


@dataclass(slots=True)
class _Bases:
    """One instance's bases at or before T in the files taken (positions, oldest first),
    whether a warm start follows the last one, and the snapshot whose pieces are being
    seen."""

    found: list[_Position] = field(default_factory=list)
    warm_after: bool = False  # a warm start after the last base: deadlines matter
    open_at: _Position | None = None
    open_ts: int = 0
    open_seq: int = 0
    part: int = 0
    parts: int = 0

    def see(self, at: _Position, head: recovery.Head, raw: bytes) -> None:
        """One wanted line of this instance (at or before T), in order."""
        if head.type == recovery.STARTED:
            self.open_at = None
            record = recovery.parse_line(raw)
            if record is not None and record.get("recovered") is None:
                self._found(at)
            elif record is not None:
                self.warm_after = True
            return
        if head.type != recovery.SNAPSHOT:
            self.open_at = None
            return
        part, parts = head.part, head.parts
        if part is None or parts is None or parts == 1:
            self.open_at = None
            self._found(at)
            return
        if part == 1:
            self.open_at, self.open_ts, self.open_seq = at, head.ts or 0, head.seq
            self.part, self.parts = 1, parts
        elif (
            self.open_at is None
            or part != self.part + 1
            or parts != self.parts
            or head.ts != self.open_ts
            or head.seq != self.open_seq + 1
        ):
            self.open_at = None
            return
        else:
            self.part, self.open_seq = part, head.seq
        if self.part == self.parts and self.open_at is not None:
            self._found(self.open_at)
            self.open_at = None

    def _found(self, at: _Position) -> None:
        self.found.append(at)
        self.warm_after = False


def _bases(
    files: Sequence[str], at_ms: int, instance: str | None, damage: JournalDamage | None
) -> dict[str, _Bases]:
    """First pass over one directory's files taken: each instance with a line at or before
    T, and where its bases are."""
    out: dict[str, _Bases] = {}
    for index, path in enumerate(files):
        for offset, raw, head in _wanted_lines(path, damage):
            if head.ns is None or head.ts is None or head.ts > at_ms:
                continue
            if instance is not None and head.ns != instance:
                continue
            out.setdefault(head.ns, _Bases()).see(_Position(index, offset), head, raw)
    return out


def _stream(
    files: Sequence[str],
    start: _Position,
    ns: str,
    at_ms: int,
    types: frozenset[str],
    damage: JournalDamage | None,
) -> Iterator[dict[str, Any] | None]:
    """Second pass: the lines of ``types`` of ``ns`` from ``start`` up to T, parsed one at a
    time (None for one that does not parse, counted). The first pass counted the files'
    damage."""
    for index in range(start.file, len(files)):
        for offset, raw, head in _wanted_lines(files[index], None, types):
            if (index, offset) < (start.file, start.offset):
                continue
            if head.ns != ns or head.ts is None or head.ts > at_ms:
                continue
            record = recovery.parse_line(raw)
            if record is None and damage is not None:
                damage.add("lines_unparsable")
            yield record


def _replay(
    files: Sequence[str],
    start: _Position,
    ns: str,
    at_ms: int,
    types: frozenset[str],
    later: Mapping[str, Any] | None,
    damage: JournalDamage,
) -> tuple[RouteInfoManager, bool, bool]:
    """The registry ``ns``'s lines of ``types`` from ``start`` lead to (``recovery.Replayer``,
    as warm restart applies them); whether a base was applied; and whether a registration
    lacked a named topic's queue data (a journal written before ``topic_configs``: the
    caller replays again with the next snapshot as ``later``)."""
    registry = RouteInfoManager()
    replayer = recovery.Replayer(registry, damage)
    fallback = timetravel.QueueFallback(later)
    lacking = False
    for record in _stream(files, start, ns, at_ms, types, damage):
        if record is None:
            replayer.feed(None)  # as recovery: an open snapshot set ends incomplete
            continue
        lacking = lacking or lacks_queue_data(record)
        replayer.feed(fallback.completed(record))
    replayer.finish()
    return registry, replayer.based, lacking


def _next_snapshot(
    files: Sequence[HourFileLike], ns: str, at_ms: int, damage: JournalDamage | None
) -> dict[str, Any] | None:
    """The first complete snapshot of ``ns`` after T, merged (for journals written before
    ``topic_configs``), from the hour files of T on, in order."""
    hour = at_ms // HOUR_MS * HOUR_MS
    later = [f.path for f in sorted(files, key=lambda f: f.hour_ms) if f.hour_ms >= hour]
    pieces: list[Mapping[str, Any]] = []
    for path in later:
        for _, raw, head in _wanted_lines(path, damage):
            if head.ns != ns or head.ts is None or head.ts <= at_ms:
                continue
            if head.type != recovery.SNAPSHOT:
                pieces = []
                continue
            record = recovery.parse_line(raw)
            if record is None:
                pieces = []
                continue
            parts = head.parts or 1
            if (head.part or 1) == 1:
                pieces = [record]
            elif pieces and (head.part or 1) == len(pieces) + 1 and head.ts == pieces[0]["ts"]:
                pieces.append(record)
            else:
                pieces = []
                continue
            if len(pieces) == parts:
                return dict(snapshot_pieces.merged(pieces))
    return None


# ---------------------------------------------------------------------------- the answer


def registries_at(
    files: Sequence[HourFileLike],
    at_ms: int,
    *,
    instance: str | None = None,
    damage: JournalDamage | None = None,
    open_end: bool = False,
) -> dict[str, RouteInfoManager]:
    """``{instance: registry}``, instances sorted: each instance's (or only ``instance``'s)
    route tables as they were at ``at_ms`` (lines at exactly ``at_ms`` included), from the
    local hour files ``files``. A time they do not cover raises ``OutsideJournals``
    (``check_time``, ``open_end`` included). What was skipped of damaged files and lines is
    counted in ``damage``."""
    check_time(files, at_ms, instance, open_end=open_end)
    hour = at_ms // HOUR_MS * HOUR_MS
    out: dict[str, RouteInfoManager] = {}
    for directory in by_instance_dir(files, instance).values():
        before = [f.path for f in directory if f.hour_ms <= hour]
        if not before:
            continue
        taken = min(FIRST_FILES, len(before))
        while True:
            chosen = before[-taken:]
            seen = JournalDamage()  # of the files read this time (the last time counts)
            bases = _bases(chosen, at_ms, instance, seen)
            # Back further while an instance has no base here, or none has a line up to T
            # here (the files at hand hold only later lines, or are damaged).
            if taken == len(before) or (bases and all(b.found for b in bases.values())):
                break
            taken = min(2 * taken, len(before))
        if damage is not None:
            damage.merge(seen)
        for ns, found in bases.items():
            out[ns] = _rebuilt(files, chosen, ns, found, at_ms, damage)
    return dict(sorted(out.items()))


def _rebuilt(
    files: Sequence[HourFileLike],
    chosen: Sequence[str],
    ns: str,
    bases: _Bases,
    at_ms: int,
    damage: JournalDamage | None,
) -> RouteInfoManager:
    """``ns``'s registry at T: replayed from its last base; from the one before when that
    base does not restore (a snapshot piece that does not parse), as recovery gives it up;
    from the first line taken when there is none (the journal's start was lost). An invalid
    line is skipped and counted, never a failure: an archived journal is what it is.

    Heartbeats are replayed too when a warm start lies between the base and T: that start
    dropped the brokers whose deadline had passed, and the deadlines follow the heartbeats
    (the start's snapshot, written right after it, makes this rare: lines dropped at
    journalMaxBytes)."""
    counted = damage if damage is not None else JournalDamage()
    starts = list(reversed(bases.found)) or [_Position(0, 0)]
    registry = RouteInfoManager()
    for index, start in enumerate(starts):
        types = DEADLINES if bases.warm_after or index > 0 else REPLAYED
        registry, based, lacking = _replay(chosen, start, ns, at_ms, types, None, counted)
        if lacking:
            later = _next_snapshot(files, ns, at_ms, damage)
            if later is not None:
                registry, based, _ = _replay(chosen, start, ns, at_ms, types, later, counted)
        if based or not bases.found:
            break
    return registry


class NoRoute(LookupError):
    """The instance held no route of the topic at T (or no line of it is at or before T)."""


def route_at(
    directory: Path, instance: str, at_ms: int, topic: str, standard: bool = True
) -> dict[str, Any]:
    """A running server's answer about its own journal (the JSON API, ``pynamesrv admin
    routeAt``): ``routes-at --instance INSTANCE --topic TOPIC``'s document for the instance
    directory ``directory``, ``{instance: {"time", "topics": {topic: {"digest", "body"}}}}``,
    built by the same code. The server wrote every line it recorded before asking, so a
    time after its last hour file (nothing changed since) is answered too. Raises
    ``OutsideJournals`` for a time before the files, ``NoRoute`` when the topic had no
    route then."""
    damage = JournalDamage()
    files = hour_files([directory], damage)
    registries = registries_at(files, at_ms, instance=instance, damage=damage, open_end=True)
    registry = registries.get(instance)
    bodies = {} if registry is None else timetravel.route_bodies(registry, standard, topic)
    if topic not in bodies:
        raise NoRoute(f"no route of {topic} at {iso_time(at_ms)}")
    return timetravel.describe({instance: bodies}, at_ms, topic)
