"""The journal's lines applied to the route tables (warm restart, time travel), and the
``snapshot`` the journal takes of them.

A line is read back as its event (``Event.from_record``: a field of the wrong type or out of
range raises RecordError, since a journal is a file anyone may have edited) and applied by
the same ``RouteChanges.apply`` that applied it live, without a connection: a recovered
broker is *provisional* (channel RECOVERED) and leaves by its deadline unless a registration
replaces it. The two lines that are not a change of their own are applied here: a
``snapshot`` replaces the whole state, a ``server_started`` is what that start did to it.
Which lines to take, and in what order, is ``namesrv.recovery``'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from sys import intern
from typing import Any, Final

from pynamesrv.namesrv.events import (
    BrokerRegistered,
    Event,
    RecordError,
    ServerStarted,
    Snapshot,
    event_classes,
    queue_mapping,
    queue_table,
    timestamp,
)
from pynamesrv.namesrv.model import QueueData, TopicQueueMappingInfo
from pynamesrv.namesrv.routes.changes import ROUTE_EVENTS
from pynamesrv.namesrv.routes.registry import RouteRegistry
from pynamesrv.namesrv.routes.tables import QueueValues, queue_records, shared_queue_data

# Every line type that changes the routes, by name: the events ``RouteChanges`` applies, and
# the two lines applied here. Every other type changes no route.
_REPLAYED: tuple[type[Event], ...] = (*ROUTE_EVENTS, Snapshot, ServerStarted)
REPLAYED_EVENTS: Final[dict[str, type[Event]]] = {cls.TYPE: cls for cls in _REPLAYED}
assert set(REPLAYED_EVENTS.values()) <= set(event_classes())


class JournalReplay(RouteRegistry):
    """The registry, able to take its state from the journal and to write it there whole."""

    def snapshot(self) -> dict[str, Any]:
        """The whole state as the journal's ``snapshot`` event records it: what
        ``restore_snapshot`` needs to answer every route query as this registry does now.

        Brokers are listed group by group, in the order the groups joined, so that a restored
        registry lists groups and clusters in the same order (cluster info is not sorted)."""
        order = {name: index for index, name in enumerate(self.broker_addr_table)}
        last = len(order)
        brokers = []
        for (cluster, addr), live in sorted(
            self.broker_live_table.items(), key=lambda item: order.get(item[1].broker_name, last)
        ):
            group = self.broker_addr_table.get(live.broker_name)
            brokers.append(
                {
                    "cluster": cluster,
                    "broker_name": live.broker_name,
                    "broker_id": live.broker_id,
                    "broker_addr": addr,
                    "last_heartbeat_ts": live.last_update_ms,
                    "timeout_ms": live.timeout_ms,
                    "ha_addr": live.ha_server_addr,
                    "data_version": live.data_version.to_json(),
                    "zone_name": group.zone_name if group is not None else None,
                    "enable_acting_master": group is not None and group.enable_acting_master,
                }
            )
        shared: dict[int, dict[str, Any]] = {}  # the QueueData are alive while this runs
        topics = {
            topic: queue_records(queues, shared) for topic, queues in self.topic_queue_table.items()
        }
        mappings = {
            topic: {name: info.to_record() for name, info in per_group.items()}
            for topic, per_group in self.topic_queue_mapping.items()
        }
        return {"brokers": brokers, "topics": topics, "mappings": mappings}

    def apply_record(self, record: Mapping[str, Any]) -> Event | None:
        """Apply one journal line (a dict, or a Spark row with absent fields as None) as of
        its ``ts``; the event it held, or None for a type that changes no route."""
        event_type = REPLAYED_EVENTS.get(record.get("type"))  # type: ignore[arg-type]
        if event_type is None:
            return None
        ts = timestamp(record.get("ts"), f"{event_type.TYPE}: ts")
        if event_type is Snapshot:
            if (record.get("parts") or 1) != 1:
                raise RecordError("snapshot: one piece of several (see namesrv.recovery)")
            self.restore_snapshot(record)
            return None
        event = event_type.from_record(record)
        if isinstance(event, ServerStarted):
            self.apply_started(event, ts)
        else:
            self.apply(event, ts)
        return event

    def apply_started(self, event: ServerStarted, ts_ms: int) -> None:
        """A run that began empty empties the table; one that recovered dropped the brokers
        past their deadline at its start (and, with none left, everything)."""
        if event.recovered is not None:
            self.expire(ts_ms)
        if event.recovered is None or not self.broker_live_table:
            self.reset()

    def restore_snapshot(self, *pieces: Mapping[str, Any]) -> None:
        """A journal ``snapshot`` (its lines: one, or every piece of a set in order)
        replaces the whole state; every broker is provisional. Each broker joins its group as
        a registration read back would make it (``apply``); the topics, hundreds of thousands
        of entries, are filled in bulk. Which pieces make a complete set is the reader's
        business (``namesrv.recovery``): here they are taken as given."""
        snapshots = [Snapshot.from_record(record) for record in pieces]
        # Everything checked before anything changes: a damaged snapshot leaves the state.
        joined: list[tuple[BrokerRegistered, int]] = []
        for entry in (broker for snapshot in snapshots for broker in snapshot.brokers):
            if type(entry) is not dict:
                raise RecordError("snapshot: a broker is not an object")
            last = timestamp(entry.get("last_heartbeat_ts"), "snapshot: last_heartbeat_ts")
            # A snapshot's broker is a registration of no topics (older ones lack the version).
            event = BrokerRegistered.from_record(
                {**entry, "first": True, "data_version": entry.get("data_version") or {}}
            )
            joined.append((event, last))
        shared: dict[str, dict[QueueValues, QueueData]] = {}  # installed after the reset
        share = partial(shared_queue_data, shared)
        topics = {
            topic: queue_table(topic, queues, share)
            for snapshot in snapshots
            for topic, queues in snapshot.topics.items()
        }
        mappings: list[tuple[str, TopicQueueMappingInfo]] = []
        for topic, per_group in (m for snapshot in snapshots for m in snapshot.mappings.items()):
            if type(per_group) is not dict:
                raise RecordError("snapshot: mappings of a topic are not an object")
            mappings += [(topic, queue_mapping(info, "snapshot")) for info in per_group.values()]
        self.reset()
        self._queue_datas.update(shared)
        for event, last in joined:
            self.apply(event, last)
        by_broker = self._topics_by_broker
        for topic, queues in topics.items():  # into empty tables: no old data to replace
            if queues:
                topic = intern(topic)  # as a registration's new topics (``_diff_topic_configs``)
                self.topic_queue_table[topic] = queues
                for name in queues:
                    topics_of = by_broker.get(name)
                    if topics_of is None:
                        topics_of = by_broker[name] = set()
                    topics_of.add(topic)
        for topic, info in mappings:
            self._store_mappings({topic: info})
        self.answers.forget_all()
