"""When live brokers expire: a heap of heartbeat deadlines that heartbeats never grow.

The live entry of a key is the one ``_queued`` names; it may be early (the broker heartbeated
since) and is then pushed back with the real deadline when popped, so a heartbeat costs
nothing here and a check costs O(1) when nothing expires. A re-registration with a shorter
timeout queues an earlier entry, and the later one left behind is skipped as stale when it
surfaces.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class DeadlineQueue(Generic[K]):
    """Deadlines (ms) by key; keys must be orderable, as equal deadlines leave in key order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, K]] = []
        self._queued: dict[K, int] = {}

    def schedule(self, key: K, deadline: int) -> None:
        """Make sure ``key`` is looked at by ``deadline``: queue it unless an entry at or
        before it is queued already (a later real deadline is found when that one pops)."""
        queued = self._queued.get(key)
        if queued is None or queued > deadline:
            heapq.heappush(self._heap, (deadline, key))
            self._queued[key] = deadline

    def due(self, now_ms: int, deadline_of: Callable[[K], int | None]) -> Iterator[K]:
        """The keys whose real deadline (``deadline_of``, None when the key is gone) is
        before ``now_ms``, in (deadline, key) order, each taken off the queue.

        An entry whose key was refreshed since it was queued goes back with the real
        deadline, even if that passed too, so that keys always leave in (deadline, key)
        order however their entries were queued (a registry rebuilt from the journal
        agrees). ``deadline_of`` is asked as each entry pops, so the caller may change the
        tables between two keys."""
        heap = self._heap
        while heap and heap[0][0] < now_ms:
            deadline, key = heapq.heappop(heap)
            if self._queued.get(key) != deadline:
                continue  # superseded by an earlier entry for the same key
            del self._queued[key]
            current = deadline_of(key)
            if current is None:
                continue
            if current != deadline:
                self.schedule(key, current)
                continue
            yield key

    def next_ms(self) -> int | None:
        """A moment at or before the earliest deadline (never later)."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        """Entries in the heap, stale ones included."""
        return len(self._heap)

    def clear(self) -> None:
        self._heap.clear()
        self._queued.clear()
