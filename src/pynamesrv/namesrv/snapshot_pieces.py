"""A ``snapshot`` cut into pieces that each fit the journal's one line limit (docs/journal.md).

Why a module of its own: the journal's writer decides *that* a snapshot is written in pieces
and what a piece's line looks like; this module only cuts the whole state (brokers, topics,
mappings) into consecutive shares whose encoding stays under a byte budget. At 100 brokers x
10,000 topics a snapshot is 87 MiB as one line, over what readers accept: they would skip
every snapshot and start from the journal's first empty start.

The plan, and why: the pieces are encoded as they are cut, so the state is encoded about
once (a first encoding of the whole to measure it would double the work on the event loop).
The number of entries per piece follows the size of the last piece (aiming at half the
budget, so one piece rarely needs cutting again); a piece over the budget is halved until it
fits. An entry that alone is larger than the longest line any reader takes (a topic whose
name is tens of MiB, a mapping as large as a huge frame) cannot be written at all: it is
left out and reported, so the rest of the snapshot stays readable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

SECTIONS: Final = ("brokers", "topics", "mappings")
_FIRST_STEP: Final = 4096  # entries in the first piece tried


@dataclass(slots=True)
class Pieces:
    """The encoded bodies of a snapshot's pieces (``{"brokers":…,"topics":…,"mappings":…}``,
    in order; at least one), and the entries left out as too large for any line."""

    bodies: list[bytes] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def _entries(snapshot: Mapping[str, Any]) -> list[tuple[int, Any]]:
    """Every entry of the snapshot as (section index, entry): brokers in their order, then
    topics, then mappings (a reader restores them in that order)."""
    entries: list[tuple[int, Any]] = [(0, b) for b in snapshot.get("brokers") or ()]
    entries += [(1, item) for item in (snapshot.get("topics") or {}).items()]
    entries += [(2, item) for item in (snapshot.get("mappings") or {}).items()]
    return entries


def _encode(entries: list[tuple[int, Any]]) -> bytes:
    brokers: list[Any] = []
    topics: dict[str, Any] = {}
    mappings: dict[str, Any] = {}
    for section, entry in entries:
        if section == 0:
            brokers.append(entry)
        else:
            (topics if section == 1 else mappings)[entry[0]] = entry[1]
    return orjson.dumps({"brokers": brokers, "topics": topics, "mappings": mappings})


def _describe(entry: tuple[int, Any], size: int) -> str:
    section, value = entry
    name = value.get("broker_addr") if section == 0 else value[0]
    text = str(name)
    shown = text if len(text) <= 64 else f"{text[:64]}… ({len(text)} characters)"
    return f"{SECTIONS[section]} entry {shown!r} ({size} bytes)"


def cut(snapshot: Mapping[str, Any], budget: int, max_entry: int) -> Pieces:
    """``snapshot`` (``JournalReplay.snapshot``) as pieces of at most ``budget`` bytes each,
    except that an entry too large for a piece of its own takes one alone when it is at most
    ``max_entry`` bytes, and is left out (``Pieces.left_out``) when it is larger."""
    entries = _entries(snapshot)
    pieces = Pieces()
    start, step = 0, _FIRST_STEP
    while start < len(entries):
        taken = entries[start : start + step]
        body = _encode(taken)
        if len(body) > budget and len(taken) > 1:
            step = max(1, len(taken) // 2)
            continue
        if len(body) > max_entry:  # one entry, larger than any line may be
            pieces.left_out.append(_describe(taken[0], len(body)))
        else:
            pieces.bodies.append(body)
        start += len(taken)
        step = max(1, min(4 * len(taken), len(taken) * (budget // 2) // max(len(body), 1)))
    if not pieces.bodies:
        pieces.bodies.append(_encode([]))
    return pieces


def merged(records: list[Mapping[str, Any]]) -> Iterator[tuple[str, Any]]:
    """The sections of a snapshot's pieces as one: (section, entries of every piece in
    order), for a reader that wants the whole state (the pipeline's ``next_snapshot``)."""
    brokers: list[Any] = []
    topics: dict[str, Any] = {}
    mappings: dict[str, Any] = {}
    for record in records:
        brokers += record.get("brokers") or ()
        topics.update(record.get("topics") or {})
        mappings.update(record.get("mappings") or {})
    yield from (("brokers", brokers), ("topics", topics), ("mappings", mappings))
