"""Keeps the garbage collector from pausing the event loop over the route tables.

Why a module of its own: CPython's cyclic collector walks every tracked object of the oldest
generation now and then; with a million route records (100 brokers x 10,000 topics) that walk
takes tens of milliseconds, all of it on the event loop, and shows as the p99 of route
queries. The tables hold no reference cycles (records are freed by reference counting), so
objects that survive into the tables are moved out of the collector's sight with
``gc.freeze()``: once after start, and again after registrations that added many topics.
Garbage that does form cycles is still collected (it is created after the last freeze).

The same walk makes a large registration quadratic while it runs: with the heap frozen the
oldest generation is nearly empty, so the collector's rule (a full collection once the
objects promoted since the last one exceed a quarter of it) fires again and again during
the burst, each time walking everything the registration has built so far (five full
collections, 40 % of a 100,000-topic registration). ``HeapKeeper.burst`` holds the collector
off for such a burst.

The C allocator (glibc's malloc) gets fixed thresholds at start (``pin_malloc_thresholds``):
see there why its defaults kept up to 100 MB of freed memory after large registrations.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from pynamesrv.namesrv.events import BrokerRegistered, Event

# glibc's mallopt parameters (malloc.h) and the values pynamesrv sets.
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD: Final = 1 << 20
TRIM_THRESHOLD: Final = 1 << 20
# Environment variables an operator sets to choose glibc's thresholds himself (then kept).
_MALLOC_ENV: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def pin_malloc_thresholds() -> bool:
    """Give glibc's malloc fixed thresholds (blocks of 1 MiB and more mapped on their own,
    free memory over 1 MiB at the heap's top returned); whether they were set.

    Why: glibc starts with a 128 KiB mmap threshold but raises it, up to 32 MiB, each time a
    mapped block is freed, and the trim threshold with it to twice that. A registration of
    100,000 topics frees blocks of 15 MB (its frame, its body, the journal line), so from then
    on every such block (each 30 s heartbeat's frame, each snapshot line) comes from the heap,
    whose freed top is kept up to 64 MB, and whose holes stay: 4 brokers re-sending 111,000
    topics each held 100 MB of freed memory (RSS 314-361 MB, 199-201 MB with fixed
    thresholds, before the other savings of issue 26). With fixed thresholds a big block is
    unmapped when freed. Large blocks are rare here (route answers are small and cached),
    so the extra mmap calls cost nothing measurable. Not on other C libraries (musl maps
    large blocks anyway), nor when the environment chooses the thresholds."""
    if not sys.platform.startswith("linux") or any(key in os.environ for key in _MALLOC_ENV):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018  # glibc only (musl has mallopt as a no-op)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


# Topics added by registrations since the last freeze that make the next one worth it.
FREEZE_AFTER_TOPICS: Final = 10_000


class HeapKeeper:
    """A listener: counts topics the registrations add and freezes the heap past a bound."""

    def __init__(self) -> None:
        self.added_since_freeze = 0
        self.freezes = 0
        self._young_collected = False  # inside a burst that began by collecting them

    @contextmanager
    def burst(self, *, large: bool = False) -> Iterator[None]:
        """No automatic collection inside the block: one synchronous registration (decode,
        tables, events). Safe because such a block makes no garbage cycles of its own
        (decoded JSON and temporaries are freed by reference counting) and is bounded by one
        request; the collector resumes after it, or ``freeze`` moves what it built away.

        A ``large`` one (a body that may add thousands of topics) first collects the young
        generations, which the collector's thresholds keep small (about a millisecond), so
        that a freeze inside it need not: that collection would walk everything the burst
        built (50 ms for 100,000 topics) to find no garbage. Nested, or with the collector
        already off, the block leaves the collector as it found it."""
        if not gc.isenabled():
            yield
            return
        if large:
            gc.collect(1)
        gc.disable()
        self._young_collected = large
        try:
            yield
        finally:
            self._young_collected = False
            gc.enable()

    def freeze(self) -> None:
        """Collect the young generations (unless a large burst did just before it began),
        then move everything out of the collector's generations (``gc.freeze``, constant
        time). Not a full collection: it would walk the whole heap (110 ms with 100,000
        topics) on the loop, inside the registration that triggered it; at most the cyclic
        garbage the oldest generation holds is frozen with the tables, and it is bounded by
        the collector's own thresholds."""
        if not self._young_collected:
            gc.collect(1)
        gc.freeze()
        self.added_since_freeze = 0
        self.freezes += 1

    def release(self) -> None:
        """At stop: give the frozen objects back to the collector (a process that runs
        several name servers, the tests, must be able to collect a stopped one)."""
        gc.unfreeze()

    def on_events(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, BrokerRegistered):
                self.added_since_freeze += len(event.topics_added)
        if self.added_since_freeze >= FREEZE_AFTER_TOPICS:
            self.freeze()
