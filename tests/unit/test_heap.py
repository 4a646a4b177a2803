"""The route tables are moved out of the garbage collector's sight (no GC pauses over them)."""

from __future__ import annotations

import gc

from pynamesrv.namesrv.events import BrokerRegistered
from pynamesrv.namesrv.heap import FREEZE_AFTER_TOPICS, HeapKeeper


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
