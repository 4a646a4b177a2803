"""State changes read as sentences: one line per broker, ISO times, no reprs."""

from __future__ import annotations

import logging

import pytest

from pynamesrv.namesrv.eventlog import EventLog, iso_ms
from pynamesrv.namesrv.events import BrokerRegistered, BrokerRemoved, KvChanged, TopicRemoved
from pynamesrv.wording import count


def test_a_removal_that_takes_topics_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pynamesrv")
    removed = BrokerRemoved(
        "C", "b", 0, "10.0.0.1:10911", "expired", 1_795_000_000_123, True, topics_gone=500
    )
    EventLog()([removed, TopicRemoved(topic="X", reason="deleted")])
    assert [r.getMessage() for r in caplog.records] == [
        "broker removed (expired): C/b id=0 at 10.0.0.1:10911, last heartbeat "
        "2026-11-18T11:06:40.123Z; 500 topics lost their last route",
        "topic X removed (deleted)",
    ]
    caplog.clear()
    removed.topics_gone = 1
    EventLog()([removed])
    assert [r.getMessage() for r in caplog.records] == [
        "broker removed (expired): C/b id=0 at 10.0.0.1:10911, last heartbeat "
        "2026-11-18T11:06:40.123Z; 1 topic lost its last route",
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
        "new broker registered: C/b id=0 at h:1 (ha -), 1 topic",
        "broker C/b id=0 at h:1 re-registered: 1 topic added, 1 changed, "
        "dataVersion 3@2026-11-18T11:06:40.000Z",
    ]


def test_unknown_times_are_a_dash() -> None:
    assert iso_ms(None) == "-"


def test_remote_names_are_escaped_and_truncated(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 24: a newline in a broker or cluster name forged a log line."""
    caplog.set_level(logging.INFO, logger="pynamesrv")
    forged = "C\n2026-11-18 11:06:40,000 INFO  pynamesrv - forged"
    version = {"counter": 1, "timestamp": 1_795_000_000_000}
    EventLog()(
        [
            BrokerRegistered(forged, "b\r", 0, "h:1\n", "x" * 1000, True, version),
            BrokerRemoved(forged, "b", 0, "h:1", "expired", 1_795_000_000_123),
            TopicRemoved(topic="T\nforged", reason="deleted"),
        ]
    )
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert not any("\n" in m or "\r" in m for m in messages), messages
    assert messages[0].startswith("new broker registered: C\\n2026-11-18 11:06:40,000 INFO")
    assert "/b\\r id=0 at h:1\\n (ha " + "x" * 255 + "...)" in messages[0]
    assert messages[2] == "topic T\\nforged removed (deleted)"


def test_counts_are_singular_for_one() -> None:
    assert [count(n, "broker group") for n in (0, 1, 2)] == [
        "0 broker groups", "1 broker group", "2 broker groups"
    ]  # fmt: skip
