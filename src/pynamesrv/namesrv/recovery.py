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

Bounds: a clean stop loses nothing (its last lines are a snapshot and ``server_stopped``), a
kill -9 at most the last flush interval. Brokers come back *provisional* (live, with the
recorded last heartbeat, without a connection) and leave by the normal deadline rule; those
whose deadline passed while the server was down are dropped at load, so a server that was
down for longer than its brokers' timeouts starts empty, as it always did.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any, Final

import orjson

from pynamesrv.namesrv.events import ServerStarted, Snapshot
from pynamesrv.namesrv.journal import JournalDamage, complete_lines, journal_files
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.routes.replay import REPLAYED_EVENTS

log = logging.getLogger("pynamesrv")

SNAPSHOT: Final = Snapshot.TYPE
STARTED: Final = ServerStarted.TYPE
# The line types that change routes (derived from the events the registry applies); every
# other type (route_queries, kv_changed, config_changed, server_stopped, …) does not.
REPLAYED: Final = frozenset(REPLAYED_EVENTS)
# Journal.record writes ``{"ts":…,"ns":…,"seq":…,"type":"…"`` first (ns is at most a
# 128-character name or host:port), so a line's type is read from its head without parsing
# the line: a snapshot of 100,000 topics is megabytes that only the last one needs parsing.
_HEAD_BYTES: Final = 512
_TYPE: Final = re.compile(rb'"type"\s*:\s*"([a-z_]{1,64})"')


@dataclass(slots=True)
class ReplayResult:
    """What ``replay`` applied: the base snapshot's time (None when the lines began with a
    run that started empty), the lines applied after it, and the newest line's time."""

    snapshot_ts: int | None = None
    events: int = 0
    last_ts: int | None = None


def replay(
    records: Iterable[Mapping[str, Any]],
    routes: RouteInfoManager,
    damage: JournalDamage | None = None,
) -> ReplayResult:
    """Apply one instance's journal lines to ``routes``, in journal order.

    The rules, line by line:

    * ``snapshot`` replaces the whole state (``restore_snapshot``);
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
    result = ReplayResult()
    for record in records:
        kind = record.get("type")
        if kind not in REPLAYED:
            continue
        ts = record.get("ts")
        try:
            event = routes.apply_record(record)
        except ValueError:  # RecordError, or a value no table can hold
            if damage is None:
                raise
            damage.add("lines_invalid")
            continue
        if kind == SNAPSHOT:
            result = ReplayResult(snapshot_ts=ts, last_ts=ts)
            continue
        if isinstance(event, ServerStarted):
            if event.recovered is None:
                result = ReplayResult()
            result.last_ts = ts
            continue  # not a route change of its own: not counted
        result.events += 1
        result.last_ts = ts
    return result


# ---------------------------------------------------------------------------- the files


def read_tail(
    directory: Path, instance: str | None = None, damage: JournalDamage | None = None
) -> list[dict[str, Any]] | None:
    """The lines ``replay`` needs to rebuild the newest state of one instance directory: the
    last *base* (a ``snapshot``, or the ``server_started`` of a run that began empty) and
    every route-changing line after it, in journal order (hour files in time order, lines in
    the order they were written). None when no base is left (no journal; retention deleted
    it; every snapshot torn).

    Lines of another instance (``ns`` other than ``instance``), torn lines and lines that do
    not parse are skipped, as every journal reader does. A snapshot torn by a crash and ended
    with a newline by the next start is a complete line that does not parse: the snapshot
    before it is used then."""
    files = journal_files(directory, damage) if directory.is_dir() else []
    newer: list[bytes] = []  # replayed lines of the files after the one being read
    for file in reversed(files):
        for keep in (2, None):  # the last two bases, or (both unusable) every one
            lines, bases, more = _scan(file, keep_bases=keep, damage=damage)
            for index in reversed(bases):
                base = _parse(lines[index], instance)
                if base is not None:
                    return [
                        base,
                        *_parse_all(lines[index + 1 :], instance, damage),
                        *_parse_all(newer, instance, damage),
                    ]
            if not more:
                break
        newer[:0] = lines
    return None


def _scan(
    file: Path, keep_bases: int | None, damage: JournalDamage | None = None
) -> tuple[list[bytes], list[int], bool]:
    """One hour file's complete lines of replayed types, from the ``keep_bases``-th last base
    candidate on (None: all), the candidates' positions in that list, and whether earlier
    candidates were dropped. Memory stays at about two snapshots and the lines between."""
    lines: list[bytes] = []
    bases: list[int] = []
    dropped = False
    # The second scan of a file (every base) reads it again: its damage is counted once.
    for raw in complete_lines(file, damage if keep_bases is not None else None):
        kind = _kind(raw)
        if kind not in REPLAYED:
            continue
        if kind == SNAPSHOT or (kind == STARTED and _began_empty(raw)):
            if keep_bases is not None and len(bases) == keep_bases:
                del lines[: bases[1]]
                bases = [b - bases[1] for b in bases[1:]]
                dropped = True
            bases.append(len(lines))
        lines.append(raw)
    return lines, bases, dropped


def _kind(raw: bytes) -> str | None:
    """A line's type from its head; a line written another way is parsed to find out."""
    match = _TYPE.search(raw, 0, _HEAD_BYTES)
    if match is not None:
        return match[1].decode()
    record = _loads(raw)
    kind = record.get("type") if record is not None else None
    return kind if isinstance(kind, str) else None


def _began_empty(raw: bytes) -> bool:
    """A ``server_started`` line of a run that did not recover (a few KiB: parsed)."""
    record = _loads(raw)
    return record is not None and record.get("recovered") is None


def _loads(raw: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def _parse(
    raw: bytes, instance: str | None, damage: JournalDamage | None = None
) -> dict[str, Any] | None:
    """A line of ``instance`` (any, when None); one that does not parse is counted."""
    record = _loads(raw)
    if record is None:
        if damage is not None:
            damage.add("lines_unparsable")
        return None
    if instance is not None and record.get("ns") != instance:
        return None
    return record


def _parse_all(
    lines: Iterable[bytes], instance: str | None, damage: JournalDamage | None = None
) -> list[dict[str, Any]]:
    return [r for r in (_parse(raw, instance, damage) for raw in lines) if r is not None]


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
        tail = read_tail(directory, instance, damage)
        result = replay(tail, routes, damage) if tail is not None else None
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
