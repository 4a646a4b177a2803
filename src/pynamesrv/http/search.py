"""Topic search that never holds the serving loop: route answers come first.

The HTTP port shares the event loop with the remoting port. A search over every topic done in
one step held that loop for as long as the scan took: 64 connections searching 300,000
topics back to back cut route answers to 5 %, and with 1,000,000 topics one route query waited
17 s (issue 32). So a search is work done in slices:

* it walks the live topic table in chunks of ``CHUNK`` names and yields to the loop once a
  slice has run ``SLICE_S`` (1 ms): a route query that arrives meanwhile waits at most one
  slice per running search; then it rests nine times as long (``SHARE``), so searches cannot
  take the CPU the routes need either (a slice bounds how long one route query waits, the
  rest how often);
* at most ``httpMaxSearches`` searches run at once (``SearchGate``), more are refused (429),
  so the wait of a route query stays bounded by (searches running) x ``SLICE_S`` whatever the
  number of connections;
* it keeps only the ``limit`` smallest names seen so far and a count, never the whole match;
* the answer is of one state of the tables: the walk notes ``routes_version`` when it starts
  and starts over if a change was applied between two slices (the dict iterator would also
  fail if the table changed size). After ``MAX_RESTARTS`` such starts (the tables keep
  changing), it walks a copy of the names instead (one O(n) copy, about 12 ms per million
  topics) and drops from the answer the topics that left meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import Final, Protocol

SLICE_S: Final = 0.001  # one slice of a scan, then the loop serves what waits
CHUNK: Final = 512  # names between two looks at the clock (~0.1-0.3 ms)
SHARE: Final = 0.1  # of the loop's time one search may use (it rests 9x each slice)
MAX_RESTARTS: Final = 2


class SearchBusy(Exception):
    """``httpMaxSearches`` scans (searches, broker listings) are running already."""


class SearchGate:
    """How many scans (topic searches, /api/clusters) run at once; one more is refused, not
    queued (a queue would let the connections that fill it delay every later scan without
    bound)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self.refused = 0

    @contextmanager
    def enter(self) -> Iterator[None]:
        if self.running >= self.limit:
            self.refused += 1
            raise SearchBusy(
                f"{self.running} topic searches or broker listings are running "
                f"(httpMaxSearches {self.limit}); retry in a moment"
            )
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1


@dataclass(slots=True)
class Found:
    """The first ``limit`` matching names (sorted) and how many names matched."""

    names: list[str]
    matched: int


@dataclass(slots=True)
class _Scan:
    needle: str  # lower case; empty: every name matches
    limit: int
    matched: int = 0
    best: list[str] = field(default_factory=list)  # sorted, at most ``limit``

    def feed(self, names: list[str]) -> None:
        needle = self.needle
        hits = [t for t in names if needle in t.lower()] if needle else names
        self.matched += len(hits)
        best = self.best
        if len(best) >= self.limit:
            worst = best[-1]
            hits = [t for t in hits if t < worst]
        if hits:
            best.extend(hits)
            best.sort()
            del best[self.limit :]


class Slices:
    """The pace of one scan on the serving loop: ``step`` after each piece of work; past
    ``SLICE_S`` of work it rests in proportion (at most ``SHARE`` of the loop's time)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    async def step(self) -> bool:
        """Whether it rested (the tables may have changed meanwhile)."""
        spent = time.perf_counter() - self.started
        if spent < SLICE_S:
            return False
        await asyncio.sleep(spent * (1 / SHARE - 1))
        self.started = time.perf_counter()
        return True


async def _walk(names: Iterator[str], scan: _Scan, topics: Topics, version: int | None) -> bool:
    """Feed ``names`` to ``scan`` in slices; False if the tables changed from ``version`` at
    a yield (the caller starts over). ``version`` None: a copy is walked, nothing to check."""
    slices = Slices()
    while True:
        part = list(islice(names, CHUNK))
        if not part:
            return True
        scan.feed(part)
        rested = await slices.step()
        if rested and version is not None and topics.routes_version != version:
            return False


class Topics(Protocol):
    """What a search reads (``NamesrvView`` is one; tests pass a plain table)."""

    @property
    def routes_version(self) -> int: ...

    def topic_names(self) -> Iterator[str]: ...

    def topic_names_snapshot(self) -> list[str]: ...

    def has_topic(self, topic: str) -> bool: ...


async def find_topics(topics: Topics, query: str, limit: int) -> Found:
    """Names containing ``query`` (any case), the first ``limit`` by name, and their count."""
    needle = query.lower()
    for _ in range(MAX_RESTARTS + 1):
        version = topics.routes_version
        scan = _Scan(needle, limit)
        try:
            if await _walk(topics.topic_names(), scan, topics, version):
                return Found(scan.best, scan.matched)
        except RuntimeError:  # the dict changed size under its iterator: start over
            continue
    scan = _Scan(needle, limit)
    await _walk(iter(topics.topic_names_snapshot()), scan, topics, None)
    return Found([t for t in scan.best if topics.has_topic(t)], scan.matched)
