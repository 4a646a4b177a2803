"""The sliced topic search (http/search.py): the same answer as one scan, of one state of the
tables even when they change between its slices."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from pynamesrv.http import search
from pynamesrv.http.search import find_topics


class Table:
    """A topic table and its version, as ``NamesrvView`` offers them."""

    def __init__(self, names: list[str]) -> None:
        self.table = dict.fromkeys(names, 1)
        self.routes_version = 0
        self.snapshots = 0

    def topic_names(self) -> Iterator[str]:
        return iter(self.table)

    def topic_names_snapshot(self) -> list[str]:
        self.snapshots += 1
        return list(self.table)

    def has_topic(self, topic: str) -> bool:
        return topic in self.table

    def change(self, add: str, remove: str) -> None:
        """One applied change: as many names as before (the dict iterator cannot tell)."""
        self.table[add] = 1
        del self.table[remove]
        self.routes_version += 1


def one_scan(names: list[str], query: str, limit: int) -> tuple[list[str], int]:
    matched = sorted(t for t in names if query.lower() in t.lower())
    return matched[:limit], len(matched)


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "SLICE_S", 0.0)
    monkeypatch.setattr(search, "CHUNK", 7)


@pytest.mark.parametrize(("query", "limit"), [("", 10), ("a", 1), ("AB", 50), ("zzz", 5)])
async def test_the_sliced_search_answers_what_one_scan_does(
    small_slices: None, query: str, limit: int
) -> None:
    rng = random.Random(7)
    names = ["".join(rng.choice("abcAB") for _ in range(rng.randint(1, 6))) for _ in range(900)]
    names = list(dict.fromkeys(names))
    found = await find_topics(Table(names), query, limit)
    assert (found.names, found.matched) == one_scan(names, query, limit)


async def test_a_change_between_slices_restarts_the_walk(small_slices: None) -> None:
    names = [f"t{n:03d}" for n in range(200)]
    table = Table(names)

    async def one_change() -> None:
        await asyncio.sleep(0)  # the search has walked its first slice
        table.change(add="t000a", remove="t000")  # t000 was walked already

    changing = asyncio.create_task(one_change())
    found = await find_topics(table, "t", 300)
    await changing
    assert (found.names, found.matched) == one_scan(list(table.table), "t", 300)
    assert table.snapshots == 0  # one restart was enough


async def test_tables_that_keep_changing_are_walked_from_a_copy(small_slices: None) -> None:
    names = [f"t{n:03d}" for n in range(200)]
    table = Table(names)
    stop = asyncio.Event()

    async def churn() -> None:
        n = 0
        while True:
            await asyncio.sleep(0)
            if stop.is_set():
                return
            table.change(add=f"new{n}", remove=next(iter(table.table)))
            n += 1

    churning = asyncio.create_task(churn())
    found = await find_topics(table, "t", 300)
    stop.set()
    await churning
    assert table.snapshots == 1
    # Only names still routed at the answer, in order, no duplicate.
    assert found.names == sorted(set(found.names))
    assert all(table.has_topic(t) for t in found.names)
