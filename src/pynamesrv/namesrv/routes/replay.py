"""The journal's lines applied to the route tables (warm restart, time travel), and the
``snapshot`` the journal takes of them.

A recovered broker is *provisional*: live, with the last heartbeat, timeout and data version
the journal recorded, but with no connection (RECOVERED), so it leaves by its deadline unless
a registration replaces it. Records are checked as they are read (a journal is a file anyone
may have edited): a field of the wrong type raises RecordError. Which lines to take, and in
what order, is ``namesrv.recovery``'s business; this module applies one line at a time with
the same rules the live registry uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pynamesrv.namesrv.events import RemovalReason
from pynamesrv.namesrv.model import (
    BrokerData,
    BrokerLiveInfo,
    DataVersion,
    QueueData,
    TopicQueueMappingInfo,
)
from pynamesrv.namesrv.routes.registry import RouteRegistry
from pynamesrv.namesrv.routes.tables import RECOVERED, broker_timeout_ms, queue_records


class RecordError(ValueError):
    """A journal line without the shape docs/journal.md gives it (read, never trusted)."""


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
        topics = {topic: queue_records(queues) for topic, queues in self.topic_queue_table.items()}
        mappings = {
            topic: {name: info.to_record() for name, info in per_group.items()}
            for topic, per_group in self.topic_queue_mapping.items()
        }
        return {"brokers": brokers, "topics": topics, "mappings": mappings}

    def restore_snapshot(self, record: Mapping[str, Any]) -> None:
        """A journal ``snapshot`` replaces the whole state; every broker is provisional."""
        brokers, topics = _field(record, "brokers", list), _field(record, "topics", dict)
        mappings = _optional(record, "mappings", dict) or {}
        self.reset()
        for entry in brokers:
            self._recover_broker(_record(entry), _field(entry, "last_heartbeat_ts", int))
        by_broker = self._topics_by_broker
        for topic, queue_list in topics.items():  # into empty tables: no old data to replace
            queues = _queue_table(queue_list)
            if queues:
                self.topic_queue_table[topic] = queues
                for name in queues:
                    topics_of = by_broker.get(name)
                    if topics_of is None:
                        topics_of = by_broker[name] = set()
                    topics_of.add(topic)
        for topic, per_group in mappings.items():
            for info in _record(per_group).values():
                self._store_mappings({topic: TopicQueueMappingInfo.from_json(info)})
        self.answers.forget_all()

    def apply_registered(self, record: Mapping[str, Any]) -> None:
        """A journal ``broker_registered``: the address (re)joins its group provisionally with
        the line's time as its last heartbeat; the topics it names take the recorded queue
        data (a journal older than ``topic_configs`` does not say: those are left as they
        were), the topics it dropped leave the group, its static-topic mappings are kept."""
        name = self._recover_broker(record, _field(record, "ts", int))
        dropped = _strings(record, "topics_removed")
        if dropped:
            self._drop_topics_of(name, dropped, "not_in_registration")
        configs = _optional(record, "topic_configs", dict) or {}
        broker_topics = self._topics_by_broker.setdefault(name, set())
        for topic in (*_strings(record, "topics_added"), *_strings(record, "topics_changed")):
            config = configs.get(topic)
            if config is not None:
                self.topic_queue_table.setdefault(topic, {})[name] = _queue_data(name, config)
                broker_topics.add(topic)
        mapped = _optional(record, "topic_mappings", dict) or {}
        self._store_mappings({t: TopicQueueMappingInfo.from_json(m) for t, m in mapped.items()})
        self._invalidate(broker_topics)

    def apply_heartbeat(self, record: Mapping[str, Any]) -> None:
        """A journal ``broker_heartbeat``: the line's time becomes the last heartbeat."""
        key = (_field(record, "cluster", str), _field(record, "broker_addr", str))
        live = self.broker_live_table.get(key)
        if live is not None:
            live.last_update_ms = _field(record, "ts", int)

    def apply_removed(self, record: Mapping[str, Any]) -> None:
        """A journal ``broker_removed``: ``unregister_broker``'s rules (the group's topics go
        with its last address; an acting-master group without master loses write perm)."""
        self.unregister_broker(
            _field(record, "cluster", str),
            _field(record, "broker_addr", str),
            _field(record, "broker_name", str),
            _field(record, "broker_id", int),
            reason=_optional(record, "reason", str) or RemovalReason.UNREGISTER,
        )

    def apply_topic_removed(self, record: Mapping[str, Any]) -> None:
        """A journal ``topic_removed``: the topic has no route left (nothing to do when its
        last broker's removal already took it)."""
        self.delete_topic(_field(record, "topic", str))

    def apply_topic_queues(self, record: Mapping[str, Any]) -> None:
        """A journal ``topic_queues_changed``: the topic's whole queue data, replaced."""
        self._set_queues(_field(record, "topic", str), _field(record, "queues", list))

    def apply_perm(self, record: Mapping[str, Any]) -> None:
        """A journal ``perm_changed``: wipe or add the write permission of a group."""
        op = _field(record, "op", str)
        if op not in ("wipe", "add"):
            raise RecordError(f"perm_changed: unknown op {op[:32]!r}")
        self._set_perm(_field(record, "broker_name", str), op)

    def _recover_broker(self, entry: Mapping[str, Any], last_heartbeat_ms: int) -> str:
        """A broker address of a snapshot or a registration line, live and provisional, in
        its group as ``register_broker`` puts it there; returns the group name."""
        cluster, name = _field(entry, "cluster", str), _field(entry, "broker_name", str)
        addr, broker_id = _field(entry, "broker_addr", str), _field(entry, "broker_id", int)
        timeout_ms = broker_timeout_ms(_optional(entry, "timeout_ms", int))
        raw_version = entry.get("data_version")
        data_version = DataVersion() if raw_version is None else DataVersion.from_json(raw_version)
        self.cluster_addr_table.setdefault(cluster, {})[name] = None
        group = self.broker_addr_table.get(name)
        if group is None:
            group = self.broker_addr_table[name] = BrokerData(cluster=cluster, broker_name=name)
        group.enable_acting_master = bool(_optional(entry, "enable_acting_master", bool))
        group.zone_name = _optional(entry, "zone_name", str)
        addrs = group.broker_addrs
        for other_id in [i for i, a in addrs.items() if a == addr and i != broker_id]:
            del addrs[other_id]
        addrs[broker_id] = addr
        key = (cluster, addr)
        before = self.broker_live_table.get(key)
        if before is not None and before.channel is not RECOVERED:
            self._unlink_channel(before.channel, key)
        self.broker_live_table[key] = BrokerLiveInfo(
            last_update_ms=last_heartbeat_ms,
            timeout_ms=timeout_ms,
            data_version=data_version,
            channel=RECOVERED,
            ha_server_addr=_optional(entry, "ha_addr", str),
            broker_name=name,
            broker_id=broker_id,
        )
        self._provisional.add(key)
        self.deadlines.schedule(key, last_heartbeat_ms + timeout_ms)
        return name

    def _set_queues(self, topic: str, queue_list: list[Any]) -> None:
        """Replace a topic's queue data (in the recorded order); groups no longer listed lose
        the topic and their mappings of it, as DELETE_TOPIC takes them."""
        queues = _queue_table(queue_list)
        for name in self.topic_queue_table.get(topic, {}).keys() - queues.keys():
            self._topics_by_broker.get(name, set()).discard(topic)
            self._drop_mappings(name, (topic,))
        for name in queues:
            self._topics_by_broker.setdefault(name, set()).add(topic)
        if queues:
            self.topic_queue_table[topic] = queues
        elif self.topic_queue_table.pop(topic, None) is not None:
            self._drop_topic_mappings(topic)
        self._invalidate((topic,))


def _field(record: Mapping[str, Any], name: str, kind: type[Any]) -> Any:
    value = record.get(name)
    if type(value) is kind:  # the common case, checked first: a snapshot has 100,000s
        return value
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RecordError(f"{record.get('type') or 'entry'}: {name} is not {kind.__name__}")
    return value


def _optional(record: Mapping[str, Any], name: str, kind: type[Any]) -> Any:
    """A field older journals lack (or Spark rows give as null): None then."""
    return None if record.get(name) is None else _field(record, name, kind)


def _record(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(f"expected an object, got {type(value).__name__}")
    return value


def _queue_table(queue_list: Any) -> dict[str, QueueData]:
    """A topic's queue entries as the journal lists them, by broker name, in their order."""
    if type(queue_list) is not list:
        raise RecordError(f"queue data: expected an array, got {type(queue_list).__name__}")
    queues: dict[str, QueueData] = {}
    for entry in queue_list:
        record = entry if type(entry) is dict else _record(entry)
        name = _field(record, "broker_name", str)
        queues[name] = _queue_data(name, record)
    return queues


def _strings(record: Mapping[str, Any], name: str) -> list[str]:
    values = _optional(record, name, list) or []
    if not all(isinstance(v, str) for v in values):
        raise RecordError(f"{record.get('type') or 'entry'}: {name} holds a non-string")
    return values


def _queue_data(broker_name: str, entry: Mapping[str, Any]) -> QueueData:
    """A queue entry as the journal writes it (``_queue_records``, ``topic_configs``)."""
    read, write, perm = entry.get("read"), entry.get("write"), entry.get("perm")
    flag = entry.get("sys_flag") or 0  # journals older than sys_flag: 0
    if type(read) is not int or type(write) is not int or type(perm) is not int:
        raise RecordError(f"queue data of {broker_name[:64]!r}: read, write, perm must be ints")
    if type(flag) is not int:
        raise RecordError(f"queue data of {broker_name[:64]!r}: sys_flag is not int")
    return QueueData(broker_name, read, write, perm, flag)
