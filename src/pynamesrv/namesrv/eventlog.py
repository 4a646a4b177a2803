"""State changes as log lines: a listener beside the journal (the journal keeps every detail,
the log tells an operator what happened in a sentence).

Why a module of its own: the controller hands every batch of events to its listeners and
should not know how each is worded. The rules: one line per broker that came or went (a
removal that took topics with it is still one line, with how many), times as ISO-8601 and
ages in seconds rather than epoch milliseconds, no Python reprs.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import orjson

from pynamesrv.namesrv.events import (
    BrokerRegistered,
    BrokerRemoved,
    Event,
    PermChanged,
    TopicRemoved,
)
from pynamesrv.remoting.logtext import name
from pynamesrv.wording import count

log = logging.getLogger("pynamesrv")


def iso_ms(ts_ms: int | None) -> str:
    """Epoch milliseconds as ``2026-11-23T07:02:44.123Z`` (``-`` when unknown)."""
    if ts_ms is None:
        return "-"
    return datetime.fromtimestamp(ts_ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _version(data_version: dict[str, int]) -> str:
    return f"{data_version.get('counter', 0)}@{iso_ms(data_version.get('timestamp'))}"


class EventLog:
    """The listener, called with each batch of events the controller emits."""

    def __call__(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, BrokerRegistered):
                _registered(event)
            elif isinstance(event, BrokerRemoved):
                _removed(event, event.topics_gone)
            elif isinstance(event, TopicRemoved):
                log.info("topic %s removed (%s)", name(event.topic), event.reason)
            elif isinstance(event, PermChanged) and event.reason == "master_gone":
                log.info(
                    "broker group %s has no master: write permission of its %s removed "
                    "(enableActingMaster)",
                    name(event.broker_name),
                    count(event.topic_count, "topic"),
                )
            elif log.isEnabledFor(logging.DEBUG):
                log.debug("%s %s", event.TYPE, orjson.dumps(event.to_record()).decode())


def _registered(event: BrokerRegistered) -> None:
    if event.first:
        log.info(
            "new broker registered: %s/%s id=%d at %s (ha %s), %s",
            name(event.cluster),
            name(event.broker_name),
            event.broker_id,
            name(event.broker_addr),
            name(event.ha_addr or "-"),
            count(event.topic_count, "topic"),
        )
    else:
        log.info(
            "broker %s/%s id=%d at %s re-registered: %s added, %d changed, dataVersion %s",
            name(event.cluster),
            name(event.broker_name),
            event.broker_id,
            name(event.broker_addr),
            count(len(event.topics_added), "topic"),
            len(event.topics_changed),
            _version(event.data_version),
        )


def _removed(event: BrokerRemoved, topics_gone: int) -> None:
    lost = "topic lost its" if topics_gone == 1 else "topics lost their"
    gone = f"; {topics_gone} {lost} last route" if topics_gone else ""
    log.info(
        "broker removed (%s): %s/%s id=%d at %s, last heartbeat %s%s",
        event.reason,
        name(event.cluster),
        name(event.broker_name),
        event.broker_id,
        name(event.broker_addr),
        iso_ms(event.last_heartbeat_ts),
        gone,
    )
