"""The registry's state: the tables of spec/state.md §1 and the indexes that keep them cheap.

Only the edits that must keep a table and its index in step live here (a connection's live
entries, a group's static-topic mappings); what a request or a journal line does with them is
``registry`` and ``replay``. The cached answers and the expiry deadlines are separate objects
(``answers.RouteAnswers``, ``expiry.DeadlineQueue``) that these tables own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from pynamesrv.namesrv.model import BrokerData, BrokerLiveInfo, QueueData, TopicQueueMappingInfo
from pynamesrv.namesrv.routes.answers import RouteAnswers
from pynamesrv.namesrv.routes.expiry import DeadlineQueue

DEFAULT_BROKER_TIMEOUT_MS: Final = 120_000  # BROKER_CHANNEL_EXPIRED_TIME
# The longest heartbeat timeout a broker may ask for (heartbeatTimeoutMillis). Java takes any
# long, and Long.MAX overflows its deadline; a recovered broker would stay routed for ever.
# Ten minutes is 60 times the 10 s that 5.x brokers send (brokerNotActiveTimeoutMillis).
MAX_BROKER_TIMEOUT_MS: Final = 600_000


def broker_timeout_ms(asked: int | None) -> int:
    """The heartbeat timeout a registration (or a recovered journal line) gets: the default
    when none (or 0) is asked, else the asked value within [1, MAX_BROKER_TIMEOUT_MS] (a
    negative one expires at the next scan, as Java's deadline in the past does)."""
    if not asked:
        return DEFAULT_BROKER_TIMEOUT_MS
    return min(max(asked, 1), MAX_BROKER_TIMEOUT_MS)


LiveKey = tuple[str, str]  # (cluster, broker address): 5.x BrokerAddrInfo
QueueValues = tuple[int, int, int, int]  # a QueueData's read, write, perm, sys_flag


def shared_queue_data(
    shared: dict[str, dict[QueueValues, QueueData]],
    broker_name: str,
    read: int,
    write: int,
    perm: int,
    sys_flag: int,
) -> QueueData:
    """The one QueueData of ``shared`` (by group, then values) with these values, made on
    first use."""
    per_group = shared.get(broker_name)
    if per_group is None:
        per_group = shared[broker_name] = {}
    values = (read, write, perm, sys_flag)
    queue_data = per_group.get(values)
    if queue_data is None:
        queue_data = per_group[values] = QueueData(broker_name, *values)
    return queue_data


class _NoConnection:
    """The connection of a broker recovered from the journal (warm restart): there is none
    until the broker registers again, so no connection close can remove it; it leaves by
    its heartbeat deadline or by a registration that replaces it with a real connection."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no connection: recovered>"


RECOVERED: Final = _NoConnection()


class RouteTables:
    """The tables plus two indexes that keep every operation cheap: topics by broker name
    (unregister and cache invalidation without a full scan) and live entries by connection
    (connection close without a scan).

    The table objects are created once and only ever cleared, never rebound: the route
    answers read the same dictionaries."""

    def __init__(self, *, java5: bool = True, support_acting_master: bool = False) -> None:
        """``java5``: broker data in answers take 5.x's shape (``enableActingMaster``)."""
        self.java5 = java5
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, dict[str, None]] = {}  # ordered set of broker names
        self.broker_live_table: dict[LiveKey, BrokerLiveInfo] = {}
        self.filter_server_table: dict[LiveKey, list[str]] = {}
        self._topics_by_broker: dict[str, set[str]] = {}
        self._live_by_channel: dict[object, set[LiveKey]] = {}
        # Live entries recovered from the journal that have not registered since (their
        # channel is RECOVERED): what /healthz calls provisional.
        self._provisional: set[LiveKey] = set()
        # Broker groups that lost queue data on the name server's side (DELETE_TOPIC): their
        # master's next registration must be decoded even if its bytes did not change, so that
        # the topics come back as in 5.x.
        self._pruned_brokers: set[str] = set()
        # Static-topic mappings (5.x): topic -> hosting broker name -> mapping
        self.topic_queue_mapping: dict[str, dict[str, TopicQueueMappingInfo]] = {}
        self._mapped_topics_by_broker: dict[str, set[str]] = {}
        # The queue data of each group by its values (read, write, perm, sys_flag), one
        # object for every topic the group serves alike: a group's 100,000 topics usually
        # have a handful of distinct ones (8 queues, read-write), and 4 groups x 111,000
        # topics kept 444,000 objects (35 MB) otherwise. Dropped with the group.
        self._queue_datas: dict[str, dict[QueueValues, QueueData]] = {}
        self.answers = RouteAnswers(
            self.topic_queue_table,
            self.broker_addr_table,
            self.filter_server_table,
            self.topic_queue_mapping,
            java5=java5,
            support_acting_master=support_acting_master,
        )
        self.deadlines: DeadlineQueue[LiveKey] = DeadlineQueue()
        # The hot reads (see ``RouteAnswers``), bound once: a route query makes no extra call.
        self.route_body = self.answers.route_body
        self.cached_route = self.answers.cached_route

    def reset(self) -> None:
        """Forget every broker, topic and mapping (the settings stay): an empty server."""
        for table in (
            self.topic_queue_table,
            self.broker_addr_table,
            self.cluster_addr_table,
            self.broker_live_table,
            self.filter_server_table,
            self._topics_by_broker,
            self._live_by_channel,
            self._provisional,
            self._pruned_brokers,
            self.topic_queue_mapping,
            self._mapped_topics_by_broker,
            self._queue_datas,
        ):
            table.clear()
        self.deadlines.clear()
        self.answers.forget_all()

    def queue_datas_of(self, broker_name: str) -> dict[QueueValues, QueueData]:
        """The group's shared queue data by values (see ``queue_data``), for loops that
        look them up themselves."""
        shared = self._queue_datas.get(broker_name)
        if shared is None:
            shared = self._queue_datas[broker_name] = {}
        return shared

    def queue_data(
        self, broker_name: str, read: int, write: int, perm: int, sys_flag: int
    ) -> QueueData:
        """The group's one QueueData with these values (made on first use)."""
        return shared_queue_data(self._queue_datas, broker_name, read, write, perm, sys_flag)

    def _invalidate(self, topics: Iterable[str]) -> None:
        self.answers.invalidate(topics)

    def _unlink_channel(self, channel: object, key: LiveKey) -> None:
        keys = self._live_by_channel.get(channel)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._live_by_channel[channel]

    def _store_mappings(self, mappings: dict[str, TopicQueueMappingInfo]) -> dict[str, Any]:
        """Keep a registration's static-topic mappings, by topic and hosting group (bname,
        as Java keys them); returns them as the journal records them."""
        stored: dict[str, Any] = {}
        for topic, info in mappings.items():
            if info.bname is None:
                continue  # Java would file it under a null broker name no client can use
            per_group = self.topic_queue_mapping.setdefault(topic, {})
            if per_group.get(info.bname) != info:
                per_group[info.bname] = info
                self._mapped_topics_by_broker.setdefault(info.bname, set()).add(topic)
                stored[topic] = info.to_record()
        return stored

    def _drop_mappings(self, broker_name: str, topics: Iterable[str] | None = None) -> None:
        """Forget a group's static-topic mappings (of ``topics``, or all of them).

        Java keeps them until it restarts, so a route could map logical queues to a group
        that is gone; pynamesrv drops them with the group or the topic."""
        mapped = self._mapped_topics_by_broker.get(broker_name)
        if not mapped:
            return
        for topic in list(mapped if topics is None else mapped.intersection(topics)):
            per_group = self.topic_queue_mapping.get(topic)
            if per_group is not None:
                per_group.pop(broker_name, None)
                if not per_group:
                    del self.topic_queue_mapping[topic]
            mapped.discard(topic)
        if not mapped:
            del self._mapped_topics_by_broker[broker_name]

    def _drop_topic_mappings(self, topic: str) -> None:
        """A topic left the routes entirely: its static-topic mappings go with it."""
        for name in list(self.topic_queue_mapping.get(topic, ())):
            self._drop_mappings(name, (topic,))


def queue_record(q: QueueData) -> dict[str, Any]:
    """One queue entry as the journal writes it."""
    return {
        "broker_name": q.broker_name,
        "read": q.read_queue_nums,
        "write": q.write_queue_nums,
        "perm": q.perm,
        "sys_flag": q.topic_sys_flag,
    }


def queue_records(
    queues: dict[str, QueueData], shared: dict[int, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """A topic's queue data as the journal writes it (snapshot entries, topic events).

    ``shared``: the records already made for this line, by the id of their (shared,
    live) QueueData: a snapshot of 4 groups x 111,000 topics then builds a handful of dicts,
    not 444,000 (135 MB on the event loop). Its records are read, never changed."""
    if shared is None:
        return [queue_record(q) for q in queues.values()]
    records = []
    for q in queues.values():
        record = shared.get(id(q))
        if record is None:
            record = shared[id(q)] = queue_record(q)
        records.append(record)
    return records
