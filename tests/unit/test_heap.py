"""The route tables are moved out of the garbage collector's sight (no GC pauses over them)."""

from __future__ import annotations

import gc
import os
import platform
import subprocess
import sys
import weakref

import pytest

from pynamesrv.namesrv.events import BrokerRegistered
from pynamesrv.namesrv.heap import FREEZE_AFTER_TOPICS, HeapKeeper, pin_malloc_thresholds


def registered(topics: int) -> BrokerRegistered:
    names = [f"T{i}" for i in range(topics)]
    return BrokerRegistered("C", "b", 0, "h:1", None, True, {}, names, topic_count=topics)


def test_many_new_topics_freeze_the_heap() -> None:
    keeper = HeapKeeper()
    try:
        keeper.on_events([registered(FREEZE_AFTER_TOPICS - 1)])
        assert keeper.freezes == 0
        frozen_before = gc.get_freeze_count()
        tables = [object() for _ in range(1000)]  # what the registrations built
        keeper.on_events([registered(1)])
        assert keeper.freezes == 1 and keeper.added_since_freeze == 0
        assert gc.get_freeze_count() >= frozen_before + len(tables)
    finally:
        gc.unfreeze()


def test_registrations_that_add_nothing_do_not_freeze() -> None:
    keeper = HeapKeeper()
    for _ in range(100):
        keeper.on_events([registered(0)])
    assert keeper.freezes == 0


class _Cycle:
    """Garbage only the cyclic collector can free: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def _collections() -> tuple[list[int], object]:
    """A list that gc.callbacks appends the generation of each collection to."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    return seen, callback


def test_a_burst_pauses_the_collector_and_restores_it() -> None:
    keeper = HeapKeeper()
    assert gc.isenabled()
    with keeper.burst():
        assert not gc.isenabled()
        with keeper.burst(large=True):  # nested: leaves it off, collects nothing
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with keeper.burst(large=True):
            assert not gc.isenabled()
        assert not gc.isenabled(), "a collector that was off stays off"
    finally:
        gc.enable()


def test_a_freeze_inside_a_large_burst_does_not_walk_what_the_burst_built() -> None:
    keeper = HeapKeeper()
    seen, callback = _collections()
    garbage = weakref.ref(_Cycle())  # cyclic garbage from before the burst
    gc.callbacks.append(callback)
    try:
        with keeper.burst(large=True):
            collected_at_start = list(seen)
            tables = [{"q": object()} for _ in range(1000)]  # what the registration builds
            frozen_before = gc.get_freeze_count()
            keeper.freeze()
            assert seen == collected_at_start, "no collection inside the burst"
            assert gc.get_freeze_count() >= frozen_before + len(tables)
    finally:
        gc.callbacks.remove(callback)
        gc.unfreeze()
    assert collected_at_start == [1], "the young generations, before the burst began"
    assert garbage() is None, "garbage from before the burst is collected, not frozen"


def test_a_freeze_outside_a_large_burst_collects_the_young_generations_first() -> None:
    keeper = HeapKeeper()
    seen, callback = _collections()
    gc.callbacks.append(callback)
    try:
        with keeper.burst():
            garbage = weakref.ref(_Cycle())
            keeper.freeze()
    finally:
        gc.callbacks.remove(callback)
        gc.unfreeze()
    assert seen == [1]
    assert garbage() is None


glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's malloc"
)


# Run in a fresh interpreter: in a process that has lived (the test suite), glibc serves a
# large block from a free chunk of its heap when it has one, whatever the threshold.
_MAPPED_PROBE = """
import ctypes
from pynamesrv.namesrv.heap import pin_malloc_thresholds

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = MallInfo2

def mapped():  # bytes in blocks mapped on their own (freed: unmapped at once)
    return mallinfo2().hblkhd

assert pin_malloc_thresholds()
size = 8 << 20
first = bytearray(size)
del first  # glibc's default raises its mmap threshold past 8 MB here
before = mapped()
second = bytearray(size)
print(mapped() - before >= size)
del second
print(mapped() - before < size)
"""


@glibc_only
def test_large_blocks_stay_mapped_after_one_was_freed() -> None:
    """The registration's frame, its body, a snapshot line: freed, they go back to the
    system, even after earlier ones were freed (glibc's default would serve them from its
    heap from then on, and keep that memory)."""
    chosen = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
    environment = {k: v for k, v in os.environ.items() if k not in chosen}
    result = subprocess.run(
        [sys.executable, "-c", _MAPPED_PROBE],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.split() == ["True", "True"]


def test_the_environment_chooses_the_thresholds_when_it_sets_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert not pin_malloc_thresholds()
