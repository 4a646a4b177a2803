"""The only code that writes the route tables: one ``apply`` per event type.

The registry decides (``registry``, ``topics``: reads the tables, applies RocketMQ's rules)
and returns events; each is then applied here. A warm restart, ``routes-at`` and the
synthetic-journal simulator apply the same events read back from journal lines
(``replay``), so live state and rebuilt state cannot drift apart: a rule changed here
changes both.

What the journal does not hold travels beside a live event as its ``Link``: the connection
(a broker rebuilt from the journal has none: it is *provisional*, RECOVERED), the body's
digest and the filter servers. Applying an event never fails on the live path; events read
back are checked by ``Event.from_record`` before they get here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from sys import intern
from typing import Any, Final

from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRecovered,
    BrokerRegistered,
    BrokerRemoved,
    Event,
    PermChanged,
    QueueConfigs,
    TopicQueuesChanged,
    TopicRemoved,
    data_version_of,
    per_topic,
    queue_configs,
    queue_table,
)
from pynamesrv.namesrv.model import BrokerData, BrokerLiveInfo, QueueData, TopicQueueMappingInfo
from pynamesrv.namesrv.routes.tables import RECOVERED, LiveKey, RouteTables, broker_timeout_ms
from pynamesrv.remoting.codes import Perm


@dataclass(slots=True)
class StagedTopics:
    """A registration's queue data as its decision staged it for ``apply``: the entries of
    topics new to the table, merged whole, and this group's entry of the others. The same as
    the event's rows written one by one, without building every entry twice."""

    fresh: dict[str, dict[str, QueueData]]
    changes: dict[str, QueueData]


@dataclass(slots=True)
class Link:
    """What a live registration carries that the journal does not."""

    channel: object  # the connection it came on: closing it removes the broker
    body_digest: int | None = None  # the body's bytes, so an identical one is not decoded
    filter_servers: list[str] | None = None  # 4.x filter servers; None: not sent
    took_topics: bool = False  # its body's topics were read (the group is whole again)
    staged: StagedTopics | None = None  # its topics, staged by the decision


# Why a topic's queue data was replaced or removed by an admin command: the groups that lost
# it must decode their next registration, so that a master puts its topics back (as in 5.x).
_ADMIN_DELETES = frozenset({"deleted", "deleted_in_cluster"})

# The time given to ``apply`` for events that do not read it (removals, topic and perm edits):
# their journal line takes the journal's clock.
NO_TIME: Final = 0


class RouteChanges(RouteTables):
    """``apply`` for every event that changes routes; nothing else writes the tables."""

    def apply(self, event: Event, ts_ms: int, link: Link | None = None) -> None:
        """Write one event into the tables, as of ``ts_ms`` (the journal line's ``ts``).
        ``link`` is None for an event read back from the journal. Events that change no
        route (KV, config, query counts, min-broker-id notices) are ignored."""
        apply = _APPLY.get(type(event))
        if apply is not None:
            apply(self, event, ts_ms, link)
            if ts_ms != NO_TIME:
                event.mark_applied(ts_ms)  # the journal line's ts

    def apply_all(self, events: Iterable[Event], ts_ms: int) -> None:
        for event in events:
            self.apply(event, ts_ms)

    # ------------------------------------------------------------------ brokers

    def _apply_registered(self, e: BrokerRegistered, ts_ms: int, link: Link | None) -> None:
        """The address joins its group (taking its id from any other id it held), its
        liveness starts anew at ``ts_ms``, and the topics it names take its queue data."""
        name = e.broker_name
        group_changed = self._join_group(e)
        staged = None if link is None else link.staged
        if staged is None:
            self._write_configs(name, queue_configs(e.topic_configs))
        else:
            self.topic_queue_table.update(staged.fresh)
            for topic, queue_data in staged.changes.items():
                self.topic_queue_table[topic][name] = queue_data
        broker_topics = self._topics_by_broker.setdefault(name, set())
        broker_topics.update(map(intern, e.topics_added))  # the table's strings (read back too)
        broker_topics.update(e.topics_changed)
        mapped = self._store_mappings(
            {t: TopicQueueMappingInfo.from_json(m) for t, m in e.topic_mappings.items()}
        )
        key = (e.cluster, e.broker_addr)
        timeout_ms = broker_timeout_ms(e.timeout_ms)
        live = BrokerLiveInfo(
            last_update_ms=ts_ms,
            timeout_ms=timeout_ms,
            data_version=data_version_of(e.data_version),
            channel=RECOVERED,
            ha_server_addr=e.ha_addr,
            broker_name=name,
            broker_id=e.broker_id,
        )
        group_changed |= self._link(key, live, link)
        self.broker_live_table[key] = live
        self.deadlines.schedule(key, ts_ms + timeout_ms)
        if group_changed:
            self._invalidate(broker_topics)  # the added and changed topics are among them
        else:
            self._invalidate(e.topics_added)
            self._invalidate(e.topics_changed)
            self._invalidate(mapped)

    def _join_group(self, e: BrokerRegistered) -> bool:
        """Put the address in its group and the group in its cluster; whether what the
        group's route answers show changed (addresses, zone, acting-master flag)."""
        self.cluster_addr_table.setdefault(e.cluster, {})[e.broker_name] = None
        group = self.broker_addr_table.get(e.broker_name)
        if group is None:
            group = self.broker_addr_table[e.broker_name] = BrokerData(e.cluster, e.broker_name)
        changed = (
            group.enable_acting_master != e.enable_acting_master or group.zone_name != e.zone_name
        )
        group.enable_acting_master = e.enable_acting_master
        group.zone_name = e.zone_name
        addrs = group.broker_addrs
        for other_id in [i for i, a in addrs.items() if a == e.broker_addr and i != e.broker_id]:
            del addrs[other_id]
            changed = True
        changed |= addrs.get(e.broker_id) != e.broker_addr
        addrs[e.broker_id] = e.broker_addr
        return changed

    def _write_configs(self, broker_name: str, configs: QueueConfigs) -> None:
        """A registration's topics into the topic table, as if row by row: each topic takes
        the group's queue data of its values (a topic listed twice, those of its last row).

        A replica applies a worker's share of a 100,000-topic registration here, as a warm
        restart does, so the work is done a column at a time by C loops (``map``, ``update``)
        and the queue data are looked up once per distinct values, not once per topic: a
        loop of Python statements per topic took three times as long."""
        topics, values, index = configs.columns()
        if not topics:
            return
        mask = configs.perm_mask
        make = self.queue_data
        datas = [make(broker_name, r, w, p & mask, f) for r, w, p, f in values]
        each = per_topic(datas, index, len(topics))
        names = list(map(intern, topics))  # as a live registration's (``_diff_topic_configs``)
        table = self.topic_queue_table
        table_get = table.get
        found = list(map(table_get, names))
        if found.count(None) == len(found):  # all new (a first registration): in one update
            table.update(zip(names, [{broker_name: q} for q in each], strict=True))
            return
        for topic, queue_data, queues in zip(names, each, found, strict=True):
            if queues is None:
                queues = table_get(topic)  # a topic listed twice, new at its first row
                if queues is None:
                    table[topic] = {broker_name: queue_data}
                    continue
            queues[broker_name] = queue_data

    def _link(self, key: LiveKey, live: BrokerLiveInfo, link: Link | None) -> bool:
        """Bind a live entry to its connection, or (read back) make it provisional; whether
        the filter servers changed."""
        before = self.broker_live_table.get(key)
        channel = RECOVERED if link is None else link.channel
        if before is not None and before.channel is not channel:
            self._unlink_channel(before.channel, key)
        live.channel = channel
        if link is None:
            self._provisional.add(key)
            return False
        self._provisional.discard(key)
        self._live_by_channel.setdefault(channel, set()).add(key)
        live.body_digest = link.body_digest
        if link.took_topics:
            self._pruned_brokers.discard(live.broker_name)
        if link.filter_servers is None:
            return False
        before_servers = self.filter_server_table.get(key)
        if link.filter_servers:
            self.filter_server_table[key] = list(link.filter_servers)
        else:
            self.filter_server_table.pop(key, None)
        return before_servers != self.filter_server_table.get(key)

    def _apply_heartbeat(self, e: BrokerHeartbeat, ts_ms: int, link: Link | None) -> None:
        """The broker's liveness is refreshed (a registration that changed no route also
        rebinds it to the connection it came on)."""
        key = (e.cluster, e.broker_addr)
        live = self.broker_live_table.get(key)
        if live is None:
            return
        live.last_update_ms = ts_ms
        if link is not None:
            self._link(key, live, link)
            self.deadlines.schedule(key, ts_ms + live.timeout_ms)

    def _apply_recovered(self, e: BrokerRecovered, ts_ms: int, link: Link | None) -> None:
        """A broker a warm restart kept: provisional, with its recorded heartbeat and (clamped)
        timeout; one the tables no longer hold stays gone (its group's data is not here)."""
        key = (e.cluster, e.broker_addr)
        live = self.broker_live_table.get(key)
        if live is None:
            return
        live.last_update_ms = e.last_heartbeat_ts
        live.timeout_ms = broker_timeout_ms(e.timeout_ms)
        self._link(key, live, None)
        self.deadlines.schedule(key, live.last_update_ms + live.timeout_ms)

    def _apply_removed(self, e: BrokerRemoved, ts_ms: int, link: Link | None) -> None:
        """The address leaves its group; a group left with no address takes its queue data
        and static-topic mappings with it (a topic with no group left has no route)."""
        key = (e.cluster, e.broker_addr)
        live = self.broker_live_table.pop(key, None)
        if live is not None:
            self._unlink_channel(live.channel, key)
            self._provisional.discard(key)
        self.filter_server_table.pop(key, None)
        name = e.broker_name
        group = self.broker_addr_table.get(name)
        if group is None:
            return
        addrs = group.broker_addrs
        for stale_id in [i for i, a in addrs.items() if a == e.broker_addr]:
            del addrs[stale_id]
        topics = self._topics_by_broker.get(name, set())
        if not addrs:
            del self.broker_addr_table[name]
            members = self.cluster_addr_table.get(group.cluster)
            if members is not None:
                members.pop(name, None)
                if not members:
                    del self.cluster_addr_table[group.cluster]
            # The loop a group of 100,000 topics runs 100,000 times (a broker closing its
            # connection): look-ups bound once, mappings looked at only when there are any.
            table = self.topic_queue_table
            table_get = table.get
            mapped = self.topic_queue_mapping
            gone = 0
            for topic in topics:
                queues = table_get(topic)
                if queues is not None:
                    queues.pop(name, None)
                    if not queues:
                        del table[topic]
                        gone += 1
                        if mapped and topic in mapped:
                            self._drop_topic_mappings(topic)
            if e.group_gone:
                # The decision's count of topics left without a route is what this loop
                # finds (counting them there as well walked the 100,000 topics twice).
                e.topics_gone = gone
            self._topics_by_broker.pop(name, None)
            self._queue_datas.pop(name, None)
            self._pruned_brokers.discard(name)
            self._drop_mappings(name)
        self._invalidate(topics)

    # ------------------------------------------------------------------ topics

    def _apply_topic_removed(self, e: TopicRemoved, ts_ms: int, link: Link | None) -> None:
        """The topic leaves every group (nothing to do when its last group's removal took it)."""
        queues = self.topic_queue_table.pop(e.topic, None)
        if queues is None:
            return
        for name in queues:
            self._topics_by_broker.get(name, set()).discard(e.topic)
            if e.reason in _ADMIN_DELETES:
                self._pruned_brokers.add(name)
        self._drop_topic_mappings(e.topic)
        self._invalidate((e.topic,))

    def _apply_topic_queues(self, e: TopicQueuesChanged, ts_ms: int, link: Link | None) -> None:
        """The topic's whole queue data, replaced (in the recorded order); groups no longer
        listed lose the topic and their mappings of it."""
        topic = e.topic
        queues = queue_table(topic, e.queues, self.queue_data)
        for name in self.topic_queue_table.get(topic, {}).keys() - queues.keys():
            self._topics_by_broker.get(name, set()).discard(topic)
            self._drop_mappings(name, (topic,))
            if e.reason in _ADMIN_DELETES:
                self._pruned_brokers.add(name)
        for name in queues:
            self._topics_by_broker.setdefault(name, set()).add(topic)
        if queues:
            self.topic_queue_table[topic] = queues
        elif self.topic_queue_table.pop(topic, None) is not None:
            self._drop_topic_mappings(topic)
        self._invalidate((topic,))

    def _apply_perm(self, e: PermChanged, ts_ms: int, link: Link | None) -> None:
        """``wipe`` clears the write bit of every topic of the group; ``add`` sets perm to
        read and write (6), exactly as Java does."""
        name = e.broker_name
        topics = self._topics_by_broker.get(name, ())
        for topic in topics:
            queues = self.topic_queue_table.get(topic, {})
            q = queues.get(name)
            if q is None:
                continue
            perm = q.perm & ~Perm.WRITE if e.op == PermChanged.WIPE else Perm.READ | Perm.WRITE
            queues[name] = self.queue_data(
                name, q.read_queue_nums, q.write_queue_nums, perm, q.topic_sys_flag
            )
        self._invalidate(topics)


_APPLY: dict[type[Event], Callable[[Any, Any, int, Link | None], None]] = {
    BrokerRegistered: RouteChanges._apply_registered,
    BrokerHeartbeat: RouteChanges._apply_heartbeat,
    BrokerRecovered: RouteChanges._apply_recovered,
    BrokerRemoved: RouteChanges._apply_removed,
    TopicRemoved: RouteChanges._apply_topic_removed,
    TopicQueuesChanged: RouteChanges._apply_topic_queues,
    PermChanged: RouteChanges._apply_perm,
}
# The line types that change routes (the journal's snapshot and server_started are applied by
# ``replay``, which adds them): every other type changes none.
ROUTE_EVENTS: tuple[type[Event], ...] = tuple(_APPLY)
