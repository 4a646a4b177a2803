"""State changes read as sentences: one line per broker, ISO times, no reprs."""

from __future__ import annotations

import logging

import pytest

from pynamesrv.namesrv.eventlog import EventLog, iso_ms
from pynamesrv.namesrv.events import BrokerRegistered, BrokerRemoved, KvChanged, TopicRemoved


def test_a_removal_that_takes_topics_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pynamesrv")
    removed = BrokerRemoved("C", "b", 0, "10.0.0.1:10911", "expired", 1_795_000_000_123)
    gone = [TopicRemoved(topic=f"T{i}", reason="no_broker") for i in range(500)]
    EventLog()([removed, *gone, TopicRemoved(topic="X", reason="deleted")])
    assert [r.getMessage() for r in caplog.records] == [
        "broker removed (expired): C/b id=0 at 10.0.0.1:10911, last heartbeat "
        "2026-11-18T11:06:40.123Z; 500 topics lost their last route",
        "topic X removed (deleted)",
    ]


def test_registrations_name_the_broker_and_the_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pynamesrv")
    version = {"counter": 3, "timestamp": 1_795_000_000_000}
    EventLog()(
        [
            BrokerRegistered("C", "b", 0, "h:1", None, True, version, ["T"], topic_count=1),
            BrokerRegistered("C", "b", 0, "h:1", "h:2", False, version, ["U"], [], ["T"]),
            KvChanged("ns", "k", "put"),
        ]
    )
    assert [r.getMessage() for r in caplog.records] == [
        "new broker registered: C/b id=0 at h:1 (ha -), 1 topics",
        "broker C/b id=0 at h:1 re-registered: 1 topics added, 1 changed, "
        "dataVersion 3@2026-11-18T11:06:40.000Z",
    ]


def test_unknown_times_are_a_dash() -> None:
    assert iso_ms(None) == "-"
