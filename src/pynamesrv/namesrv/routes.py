"""The route registry (RouteInfoManager): topic, broker, cluster and liveness tables.

Pure state, per spec/state.md: no sockets, no clock (``now_ms`` is passed in), no logging.
Every mutation returns the events it caused. One event loop owns an instance, so each
operation is atomic without locks, exactly as Java's single read/write lock makes it.

Where 4.9.4 and 5.x differ we follow 5.x (liveness keyed by cluster and address, per-broker
heartbeat timeout, unregister by address, topics missing for a master re-added on its next
registration) except where that would change an answer a 4.9.4 peer relies on; see the
method docstrings.

Route answers are cached as encoded bytes per (topic, dialect) and dropped whenever a change
touches the topic, so a route query costs one dict look-up. The 5.x views of a route are
computed here too, and cached the same way: the acting master (supportActingMaster) inside
the plain answer, a zone's filtered answer per (topic, dialect, zone).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRegistered,
    BrokerRemoved,
    Event,
    MinBrokerIdChanged,
    PermChanged,
    RemovalReason,
    TopicQueuesChanged,
    TopicRemoved,
)
from pynamesrv.namesrv.model import (
    BrokerData,
    BrokerLiveInfo,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicQueueMappingInfo,
)
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import MASTER_ID, Perm, TopicSysFlag

DEFAULT_BROKER_TIMEOUT_MS: Final = 120_000  # BROKER_CHANNEL_EXPIRED_TIME
# Cached route answers kept (two per topic at most, one per JSON dialect); a few hundred bytes
# each. Past it the least recently used are encoded again when asked for.
ROUTE_CACHE_MAX: Final = 200_000
# TopicValidator.SYNC_BROKER_MEMBER_GROUP_PREFIX: topics whose routes never show an acting
# master (brokers read their group's real members from them).
SYNC_BROKER_MEMBER_PREFIX: Final = "rmq_sys_SYNC_BROKER_MEMBER_"

LiveKey = tuple[str, str]  # (cluster, broker address): 5.x BrokerAddrInfo


class _NoConnection:
    """The connection of a broker recovered from the journal (warm restart): there is none
    until the broker registers again, so no connection close can remove it; it leaves by
    its heartbeat deadline or by a registration that replaces it with a real connection."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<no connection: recovered>"


RECOVERED: Final = _NoConnection()


# What Java's String.trim / isBlank treat as white space, for zone names.
_JAVA_WHITESPACE: Final = (
    " \t\n\x0b\f\r\x1c\x1d\x1e\x1f\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2008\u2009\u200a\u2028\u2029\u205f\u3000"
)


def zone_of(ext: Mapping[str, object] | None) -> str | None:
    """The zone a route query is filtered to (ZoneRouteRPCHook): ``__ZONE_MODE`` true (any
    case, as Boolean.parseBoolean) and a ``__ZONE_NAME`` that is not blank; else None."""
    if not ext:
        return None
    mode, zone = ext.get("__ZONE_MODE"), ext.get("__ZONE_NAME")
    if not isinstance(mode, str) or mode.lower() != "true" or not isinstance(zone, str):
        return None
    return zone if zone.strip(_JAVA_WHITESPACE) else None


@dataclass(slots=True)
class RegisterResult:
    """What REGISTER_BROKER answers: the live master of a slave's group, and the events."""

    master_addr: str | None = None
    ha_server_addr: str | None = None
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class CachedRoute:
    order_conf: str | None
    body: bytes


@dataclass(slots=True)
class _ZoneAnswers:
    """A topic's zone-filtered answers. ``zones`` are the (lower-case) zones of its brokers:
    every other zone gets the same answer (master-less groups only), cached once under "",
    so a client inventing zone names cannot grow the cache."""

    zones: frozenset[str]
    answers: dict[tuple[bool, str], CachedRoute] = field(default_factory=dict)


class RouteInfoManager:
    """The tables of spec/state.md §1 plus two indexes that keep every operation cheap:
    topics by broker name (unregister and cache invalidation without a full scan) and live
    entries by connection (connection close without a scan)."""

    def __init__(self, *, java5: bool = True, support_acting_master: bool = False) -> None:
        """``java5``: broker data in answers take 5.x's shape (``enableActingMaster``)."""
        self.java5 = java5
        self.support_acting_master = support_acting_master
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
        # Encoded route bodies by (topic, standard dialect), least recently used first; an
        # entry is replaced, never mutated, so holding one and checking it is still the one
        # here validates it. Zone-filtered answers are kept per topic (unknown zones share one).
        self._route_cache: OrderedDict[tuple[str, bool], CachedRoute] = OrderedDict()
        self.zone_route_cache: dict[str, _ZoneAnswers] = {}
        # Static-topic mappings (5.x): topic -> hosting broker name -> mapping
        self.topic_queue_mapping: dict[str, dict[str, TopicQueueMappingInfo]] = {}
        self._mapped_topics_by_broker: dict[str, set[str]] = {}
        # Bumped whenever cached routes are dropped: while it stands still, every answer built
        # from the cache is still good, and a hot path checks one integer instead of the cache.
        self.route_generation = 0
        # Expiry deadlines. The live entry of a key is the one ``_queued_deadline`` names; it may
        # be early (the broker heartbeated since) and is then pushed back with the real deadline
        # when popped, so a heartbeat costs nothing here and a check costs O(1) when nothing
        # expires. A re-registration with a shorter timeout queues an earlier entry, and the
        # later one left behind is skipped as stale when it surfaces.
        self._deadlines: list[tuple[int, LiveKey]] = []
        self._queued_deadline: dict[LiveKey, int] = {}

    # ------------------------------------------------------------------ registration

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str | None,
        body_digest: int | None,
        load_body: Callable[[], RegisterBrokerBody],
        channel: object,
        now_ms: int,
        heartbeat_timeout_ms: int | None = None,
        enable_acting_master: bool | None = None,
        zone_name: str | None = None,
        delete_missing_topics: bool = False,
    ) -> RegisterResult:
        """registerBroker (state.md §3).

        ``load_body`` is called at most once, before anything changes (so a body that fails to
        decode leaves no trace), and not at all when the broker re-sends exactly the bytes it
        sent last time (``body_digest`` equal): an idle broker's 30 s heartbeat with 100,000
        topics then costs no JSON decoding.

        5.x: the topics come from the master, or from the *prime slave* (a 5.x broker, which
        sends ``enableActingMaster``, holding the group's lowest id while there is no master);
        in an acting-master group the prime slave's topics lose their write permission.
        ``delete_missing_topics`` (deleteTopicWithBrokerRegistration) drops the group's topics
        such a registration does not list, unless it carries static-topic mappings.

        Deliberately not ported: 5.x's refusal of a first registration that carries exactly
        one topic ("register broker failed"). 4.9.4 accepts it (golden errors.jsonl case 6b),
        and the problem it guards against (an incremental registration arriving first after a
        name-server restart) is solved by re-adding topics the group lacks, as 5.x also does.
        """
        key = (cluster, broker_addr)
        live = self.broker_live_table.get(key)
        need_body = self.needs_body(
            cluster,
            broker_addr,
            broker_name,
            broker_id,
            body_digest,
            enable_acting_master=enable_acting_master,
            delete_missing_topics=delete_missing_topics,
        )
        body = load_body() if need_body else None
        data_version = body.data_version if body is not None else live.data_version  # type: ignore[union-attr]

        touched: set[str] = set()
        self.cluster_addr_table.setdefault(cluster, {})[broker_name] = None
        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster, broker_name=broker_name)
            self.broker_addr_table[broker_name] = broker_data
        # Java sets both on every registration (a 4.9.4 broker sends neither: false / null).
        addrs_changed = (
            broker_data.enable_acting_master != bool(enable_acting_master)
            or broker_data.zone_name != zone_name
        )
        broker_data.enable_acting_master = bool(enable_acting_master)
        broker_data.zone_name = zone_name
        addrs = broker_data.broker_addrs
        prev_min_id = min(addrs) if addrs else MASTER_ID
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]
            addrs_changed = True
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        register_first |= not old_addr
        addrs_changed |= old_addr != broker_addr
        is_prime_slave = (
            enable_acting_master is not None and broker_id != MASTER_ID and broker_id == min(addrs)
        )

        added: list[str] = []
        changed: list[str] = []
        dropped: list[str] = []
        configs: dict[str, dict[str, int]] = {}
        mapped: dict[str, dict[str, Any]] = {}
        extra_events: list[Event] = []
        broker_topics = self._topics_by_broker.setdefault(broker_name, set())
        if (broker_id == MASTER_ID or is_prime_slave) and body is not None:
            version_changed = live is None or live.data_version != data_version
            if delete_missing_topics and not body.mappings:
                listed = {config.topic_name for config in body.topic_configs}
                dropped = sorted(broker_topics - listed)
                extra_events += self._drop_topics_of(broker_name, dropped, "not_in_registration")
            wipe_write = is_prime_slave and broker_data.enable_acting_master
            for config in body.topic_configs:
                topic = config.topic_name
                queues = self.topic_queue_table.get(topic)
                present = queues.get(broker_name) if queues is not None else None
                if not (register_first or version_changed or present is None):
                    continue
                perm = config.perm & ~Perm.WRITE if wipe_write else config.perm
                queue_data = QueueData(
                    broker_name=broker_name,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=perm,
                    topic_sys_flag=config.topic_sys_flag,
                )
                if present == queue_data:
                    continue
                if queues is None:
                    queues = self.topic_queue_table[topic] = {}
                queues[broker_name] = queue_data
                (added if present is None else changed).append(topic)
                configs[topic] = {
                    "read": config.read_queue_nums,
                    "write": config.write_queue_nums,
                    "perm": perm,
                    "sys_flag": config.topic_sys_flag,
                }
                broker_topics.add(topic)
                touched.add(topic)
            if register_first or version_changed:
                mapped = self._store_mappings(body.mappings)
                touched.update(mapped)
            self._pruned_brokers.discard(broker_name)

        if live is not None and live.channel is not channel:
            self._unlink_channel(live.channel, key)
        self._provisional.discard(key)
        timeout_ms = heartbeat_timeout_ms or DEFAULT_BROKER_TIMEOUT_MS
        self.broker_live_table[key] = BrokerLiveInfo(
            last_update_ms=now_ms,
            timeout_ms=timeout_ms,
            data_version=data_version,
            channel=channel,
            ha_server_addr=ha_server_addr,
            broker_name=broker_name,
            broker_id=broker_id,
            body_digest=body_digest if body_digest is not None else None,
        )
        self._live_by_channel.setdefault(channel, set()).add(key)
        queued = self._queued_deadline.get(key)
        if queued is None or queued > now_ms + self.broker_live_table[key].timeout_ms:
            self._push_deadline(key, self.broker_live_table[key])

        if body is not None and body.filter_server_list is not None:
            before = self.filter_server_table.get(key)
            if body.filter_server_list:
                self.filter_server_table[key] = list(body.filter_server_list)
            else:
                self.filter_server_table.pop(key, None)
            addrs_changed |= before != self.filter_server_table.get(key)

        if addrs_changed:
            touched |= broker_topics
        self._invalidate(touched)

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master = addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get((cluster, master)) if master else None
            if master_live is not None:
                result.master_addr = master
                result.ha_server_addr = master_live.ha_server_addr
        first = live is None
        if (
            live is None
            or added
            or changed
            or dropped
            or mapped
            or live.data_version != data_version
            or addrs_changed
            # what a warm restart must know to expire and answer as before
            or live.timeout_ms != timeout_ms
            or live.ha_server_addr != ha_server_addr
        ):
            result.events.append(
                BrokerRegistered(
                    cluster=cluster,
                    broker_name=broker_name,
                    broker_id=broker_id,
                    broker_addr=broker_addr,
                    ha_addr=ha_server_addr,
                    first=first,
                    data_version=data_version.to_json(),
                    topics_added=added,
                    topics_removed=dropped,
                    topics_changed=changed,
                    topic_count=len(broker_topics),
                    topic_configs=configs,
                    topic_mappings=mapped,
                    timeout_ms=timeout_ms,
                    zone_name=zone_name,
                    enable_acting_master=broker_data.enable_acting_master,
                )
            )
        else:
            result.events.append(
                BrokerHeartbeat(
                    cluster, broker_name, broker_id, broker_addr, data_version.to_json()
                )
            )
        result.events += extra_events
        if broker_id < prev_min_id:  # Java: a lower id than the group's lowest registered
            result.events.append(
                _min_id_changed(broker_data, offline_addr=None, ha_addr=ha_server_addr)
            )
        return result

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

    def _drop_topics_of(self, broker_name: str, topics: list[str], reason: str) -> list[Event]:
        """Remove a group's queue data of ``topics``; the events say what each topic has left."""
        events: list[Event] = []
        broker_topics = self._topics_by_broker.get(broker_name, set())
        for topic in topics:
            queues = self.topic_queue_table.get(topic)
            broker_topics.discard(topic)
            if queues is None or queues.pop(broker_name, None) is None:
                continue
            if queues:
                events.append(TopicQueuesChanged(topic, reason, _queue_records(queues)))
            else:
                del self.topic_queue_table[topic]
                self._drop_topic_mappings(topic)
                events.append(TopicRemoved(topic=topic, reason=reason))
        self._drop_mappings(broker_name, topics)
        self._invalidate(topics)
        return events

    def needs_body(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        body_digest: int | None,
        *,
        enable_acting_master: bool | None = None,
        delete_missing_topics: bool = False,
    ) -> bool:
        """Whether a registration must decode its body: not when the broker re-sends the
        bytes it sent last time, unless the name server dropped some of its topics since,
        it is (or may now be) the group's prime slave, or missing topics are to be dropped."""
        live = self.broker_live_table.get((cluster, broker_addr))
        if live is None or body_digest is None or live.body_digest != body_digest:
            return True
        if broker_id == MASTER_ID:
            return broker_name in self._pruned_brokers or delete_missing_topics
        if enable_acting_master is None:
            return False  # a 4.x slave's topics are never routed
        broker_data = self.broker_addr_table.get(broker_name)
        return broker_data is None or broker_id <= min(broker_data.broker_addrs, default=0)

    def register_topic(self, topic: str, queue_datas: list[QueueData]) -> list[Event]:
        """5.x REGISTER_TOPIC_IN_NAMESRV (state.md §7): only brokers the server knows."""
        if not queue_datas:
            return []
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            if any(q.broker_name not in self.broker_addr_table for q in queue_datas):
                return []
            queues = self.topic_queue_table[topic] = {}
        before = dict(queues)
        for queue_data in queue_datas:
            if queue_data.broker_name not in self.broker_addr_table:
                break
            queues[queue_data.broker_name] = queue_data
            self._topics_by_broker.setdefault(queue_data.broker_name, set()).add(topic)
        if queues == before:
            return []
        self._invalidate((topic,))
        return [TopicQueuesChanged(topic, "registered", _queue_records(queues))]

    # ------------------------------------------------------------------ removal

    def unregister_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        *,
        reason: str = RemovalReason.UNREGISTER,
    ) -> list[Event]:
        """unregisterBroker (state.md §4), applied at once.

        The address is removed from its group by value (5.x), never by id alone: an id-only
        delete (4.9.4) could remove a newer broker that took the id on another address.
        ``broker_id`` is compared with the group's lowest id, as Java does, and named in the
        events.

        5.x: a group left without a master keeps its queue data, but when its brokers
        registered with ``enableActingMaster`` the write permission of all its topics is
        removed (producers then avoid it), and its remaining brokers are told the lowest id
        changed (``MinBrokerIdChanged``) when the one that left held it.
        """
        key = (cluster, broker_addr)
        live = self.broker_live_table.pop(key, None)
        if live is not None:
            self._unlink_channel(live.channel, key)
            self._provisional.discard(key)
        self.filter_server_table.pop(key, None)
        events: list[Event] = []
        broker_data = self.broker_addr_table.get(broker_name)
        removed_addr = False
        held_min_id = False
        if broker_data is not None:
            addrs = broker_data.broker_addrs
            held_min_id = bool(addrs) and broker_id == min(addrs)
            for stale_id in [i for i, a in addrs.items() if a == broker_addr]:
                del addrs[stale_id]
                removed_addr = True
        if live is None and not removed_addr:
            return events
        events.append(
            BrokerRemoved(
                cluster=cluster,
                broker_name=broker_name,
                broker_id=broker_id,
                broker_addr=broker_addr,
                reason=reason,
                last_heartbeat_ts=live.last_update_ms if live is not None else None,
            )
        )
        topics = self._topics_by_broker.get(broker_name, set())
        if broker_data is not None and not broker_data.broker_addrs:
            del self.broker_addr_table[broker_name]
            members = self.cluster_addr_table.get(broker_data.cluster)
            if members is not None:
                members.pop(broker_name, None)
                if not members:
                    del self.cluster_addr_table[broker_data.cluster]
            for topic in sorted(topics):
                queues = self.topic_queue_table.get(topic)
                if queues is None:
                    continue
                queues.pop(broker_name, None)
                if not queues:
                    del self.topic_queue_table[topic]
                    self._drop_topic_mappings(topic)
                    events.append(TopicRemoved(topic=topic, reason="no_broker"))
            self._topics_by_broker.pop(broker_name, None)
            self._pruned_brokers.discard(broker_name)
            self._drop_mappings(broker_name)
        elif broker_data is not None and broker_data.enable_acting_master:
            if min(broker_data.broker_addrs) != MASTER_ID:
                wiped = self._wipe_write(broker_name, topics)
                if wiped:
                    events.append(
                        PermChanged(broker_name, "wipe", len(topics), reason="master_gone")
                    )
            if held_min_id:
                events.append(_min_id_changed(broker_data, offline_addr=broker_addr, ha_addr=None))
        self._invalidate(topics)
        return events

    def _wipe_write(self, broker_name: str, topics: Iterable[str]) -> int:
        """Clear the write bit of a group's queue data; how many topics changed."""
        changed = 0
        for topic in topics:
            queue_data = self.topic_queue_table.get(topic, {}).get(broker_name)
            if queue_data is not None and queue_data.perm & Perm.WRITE:
                queue_data.perm &= ~Perm.WRITE
                changed += 1
        return changed

    def on_channel_closed(self, channel: object, reason: str) -> list[Event]:
        """A connection closed, failed or idled out: remove the brokers registered on it.

        Only entries whose *latest* registration arrived on this connection are removed; a
        broker that re-registered on a newer connection is untouched (RocketMQ #11043).
        """
        events: list[Event] = []
        for key in sorted(self._live_by_channel.pop(channel, ())):
            live = self.broker_live_table.get(key)
            if live is None or live.channel is not channel:
                continue
            events += self.unregister_broker(
                key[0], key[1], live.broker_name, live.broker_id, reason=reason
            )
        return events

    def _push_deadline(self, key: LiveKey, live: BrokerLiveInfo) -> None:
        deadline = live.last_update_ms + live.timeout_ms
        heapq.heappush(self._deadlines, (deadline, key))
        self._queued_deadline[key] = deadline

    def expire(self, now_ms: int) -> tuple[list[Event], list[object]]:
        """Remove brokers whose last refresh is older than their timeout (at ``now_ms``).

        Returns the events and the connections to close: those left with no live broker.
        """
        events: list[Event] = []
        channels: list[object] = []
        heap = self._deadlines
        while heap and heap[0][0] < now_ms:
            deadline, key = heapq.heappop(heap)
            if self._queued_deadline.get(key) != deadline:
                continue  # superseded by an earlier entry for the same key
            del self._queued_deadline[key]
            live = self.broker_live_table.get(key)
            if live is None:
                continue
            if live.last_update_ms + live.timeout_ms != deadline:
                # Refreshed since it was queued: queue the real deadline, even if it passed
                # too, so that brokers always leave in (deadline, address) order, however
                # their entries were queued (a registry rebuilt from the journal agrees).
                self._push_deadline(key, live)
                continue
            events += self.unregister_broker(
                key[0], key[1], live.broker_name, live.broker_id, reason=RemovalReason.EXPIRED
            )
            if live.channel is not RECOVERED and not self._live_by_channel.get(live.channel):
                channels.append(live.channel)
        return events, channels

    def next_expiry_ms(self) -> int | None:
        """A moment at or before the earliest expiry (never later): when to check next."""
        return self._deadlines[0][0] if self._deadlines else None

    @property
    def queued_deadlines(self) -> int:
        """Entries in the expiry heap, stale ones included: what heartbeats must not grow."""
        return len(self._deadlines)

    def _unlink_channel(self, channel: object, key: LiveKey) -> None:
        keys = self._live_by_channel.get(channel)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._live_by_channel[channel]

    # ------------------------------------------------------------------ heartbeats

    def query_data_version(
        self, cluster: str, broker_addr: str, data_version: DataVersion, now_ms: int
    ) -> tuple[bool, DataVersion | None, list[Event]]:
        """QUERY_DATA_VERSION: (changed, stored version or None, events). Refreshes like 5.x."""
        live = self.broker_live_table.get((cluster, broker_addr))
        if live is None:
            return True, None, []
        live.last_update_ms = now_ms
        event = BrokerHeartbeat(
            cluster, live.broker_name, live.broker_id, broker_addr, live.data_version.to_json()
        )
        return live.data_version != data_version, live.data_version, [event]

    def broker_heartbeat(self, cluster: str, broker_addr: str, now_ms: int) -> list[Event]:
        """5.x BROKER_HEARTBEAT: refresh a live entry, if there is one."""
        live = self.broker_live_table.get((cluster, broker_addr))
        if live is None:
            return []
        live.last_update_ms = now_ms
        return [
            BrokerHeartbeat(
                cluster, live.broker_name, live.broker_id, broker_addr, live.data_version.to_json()
            )
        ]

    # ------------------------------------------------------------------ admin mutations

    def _set_perm(self, broker_name: str, op: str) -> tuple[int, list[Event]]:
        count = 0
        topics = self._topics_by_broker.get(broker_name, ())
        for topic in topics:
            queue_data = self.topic_queue_table.get(topic, {}).get(broker_name)
            if queue_data is None:
                continue
            if op == "wipe":
                queue_data.perm &= ~Perm.WRITE
            else:
                queue_data.perm = Perm.READ | Perm.WRITE
            count += 1
        self._invalidate(topics)
        return count, [PermChanged(broker_name=broker_name, op=op, topic_count=count)]

    def wipe_write_perm(self, broker_name: str) -> tuple[int, list[Event]]:
        """WIPE_WRITE_PERM_OF_BROKER: clear the write bit, count every topic of the group."""
        return self._set_perm(broker_name, "wipe")

    def add_write_perm(self, broker_name: str) -> tuple[int, list[Event]]:
        """ADD_WRITE_PERM_OF_BROKER: perm becomes exactly READ|WRITE (6), as in Java."""
        return self._set_perm(broker_name, "add")

    def delete_topic(self, topic: str, cluster: str | None = None) -> list[Event]:
        """DELETE_TOPIC_IN_NAMESRV, for one cluster's brokers or entirely."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return []
        if cluster:
            names = [n for n in self.cluster_addr_table.get(cluster, {}) if n in queues]
        else:
            names = list(queues)
        for name in names:
            del queues[name]
            self._topics_by_broker.get(name, set()).discard(topic)
            self._pruned_brokers.add(name)
            self._drop_mappings(name, (topic,))
        self._invalidate((topic,))
        if queues:
            if not names:
                return []
            return [TopicQueuesChanged(topic, "deleted_in_cluster", _queue_records(queues))]
        del self.topic_queue_table[topic]
        self._drop_topic_mappings(topic)
        return [TopicRemoved(topic=topic, reason="deleted")]

    def _drop_topic_mappings(self, topic: str) -> None:
        """A topic left the routes entirely: its static-topic mappings go with it."""
        for name in list(self.topic_queue_mapping.get(topic, ())):
            self._drop_mappings(name, (topic,))

    # ------------------------------------------------------------------ reads

    def set_support_acting_master(self, enabled: bool) -> None:
        """supportActingMaster changed at run time: every cached answer may change."""
        if enabled != self.support_acting_master:
            self.support_acting_master = enabled
            self._route_cache.clear()
            self.zone_route_cache.clear()
            self.route_generation += 1

    def pickup_route(self, topic: str | None) -> dict[str, Any] | None:
        """pickupTopicRouteData (state.md §6) as plain data, or None when there is no route.

        5.x: the topic's static-topic mappings come along (``topicQueueMappingByBroker``),
        and with supportActingMaster a master-less acting-master group whose write
        permission is gone shows its lowest-id broker as id 0 (a view: the tables keep the
        real ids, GET_BROKER_MEMBER_GROUP and cluster info show them)."""
        queues = self.topic_queue_table.get(topic) if topic is not None else None
        if queues is None:
            return None
        broker_datas: list[dict[str, Any]] = []
        filter_servers: dict[str, list[str]] = {}
        for name in queues:
            broker_data = self.broker_addr_table.get(name)
            if broker_data is None:
                continue
            broker_datas.append(broker_data.to_json(self.java5))
            if self.filter_server_table:
                for addr in broker_data.broker_addrs.values():
                    servers = self.filter_server_table.get((broker_data.cluster, addr))
                    if servers:
                        filter_servers[addr] = servers
        if not broker_datas:
            return None
        route: dict[str, Any] = {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_servers,
            "orderTopicConf": None,
            "queueDatas": [q.to_json() for q in queues.values()],
        }
        mappings = self.topic_queue_mapping.get(topic)  # type: ignore[arg-type]
        if mappings:
            route["topicQueueMappingByBroker"] = {b: m.to_json() for b, m in mappings.items()}
        if self.support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_PREFIX):  # type: ignore[union-attr]
            self._show_acting_masters(broker_datas, queues)
        return route

    def _show_acting_masters(
        self, broker_datas: list[dict[str, Any]], queues: dict[str, QueueData]
    ) -> None:
        """Relabel, in the answer only, the lowest id of each master-less acting-master group
        whose queue data for the topic is not writable as id 0 (RouteInfoManager 5.x)."""
        for data in broker_datas:
            addrs: dict[int, str] = data["brokerAddrs"]
            if not addrs or MASTER_ID in addrs:
                continue
            name = data["brokerName"]
            queue_data = queues.get(name)
            group = self.broker_addr_table[name]
            if not group.enable_acting_master or queue_data is None:
                continue
            if not queue_data.perm & Perm.WRITE:
                acting = addrs.pop(min(addrs))
                data["brokerAddrs"] = {MASTER_ID: acting, **addrs}

    def route_body(
        self,
        topic: str | None,
        standard: bool,
        order_conf: str | None,
        zone: str | None = None,
    ) -> bytes | None:
        """The encoded GET_ROUTEINFO_BY_TOPIC body, from the cache when nothing changed;
        with ``zone`` (a zone-mode query) the answer filtered to that zone."""
        if topic is None:
            return None
        if zone is not None:
            return self._zone_route_body(topic, standard, order_conf, zone)
        cache, key = self._route_cache, (topic, standard)
        cached = cache.get(key)
        if cached is not None and cached.order_conf == order_conf:
            cache.move_to_end(key)
            return cached.body
        route = self.pickup_route(topic)
        if route is None:
            return None
        route["orderTopicConf"] = order_conf
        body = fastjson.dumps(route, standard=standard)
        cache[key] = CachedRoute(order_conf, body)
        cache.move_to_end(key)
        if len(cache) > ROUTE_CACHE_MAX:
            cache.popitem(last=False)
        return body

    def cached_route(self, key: tuple[str, bool]) -> CachedRoute | None:
        """The cache entry of (topic, standard dialect), if any (not counted as a use)."""
        return self._route_cache.get(key)

    def _zone_route_body(
        self, topic: str, standard: bool, order_conf: str | None, zone: str
    ) -> bytes | None:
        entry = self.zone_route_cache.get(topic)
        wanted = zone.lower()
        if entry is not None:
            key = (standard, wanted if wanted in entry.zones else "")
            cached = entry.answers.get(key)
            if cached is not None and cached.order_conf == order_conf:
                return cached.body
        route = self.pickup_route(topic)
        if route is None:
            return None
        if entry is None:
            zones = frozenset(
                (b["zoneName"] or "").lower() for b in route["brokerDatas"] if b.get("zoneName")
            )
            entry = self.zone_route_cache[topic] = _ZoneAnswers(zones)
        key = (standard, wanted if wanted in entry.zones else "")
        route["orderTopicConf"] = order_conf
        body = fastjson.dumps(filter_by_zone(route, zone), standard=standard)
        entry.answers[key] = CachedRoute(order_conf, body)
        return body

    def _invalidate(self, topics: Iterable[str]) -> None:
        self.route_generation += 1
        cache, zone_cache = self._route_cache, self.zone_route_cache
        if not cache and not zone_cache:
            return
        for topic in topics:
            cache.pop((topic, False), None)
            cache.pop((topic, True), None)
            zone_cache.pop(topic, None)

    def cluster_info(self) -> dict[str, Any]:
        """ClusterInfo as data (always sent in the legacy dialect)."""
        return {
            "brokerAddrTable": {
                n: b.to_json(self.java5) for n, b in self.broker_addr_table.items()
            },
            "clusterAddrTable": {c: list(m) for c, m in self.cluster_addr_table.items()},
        }

    def all_topics(self) -> list[str]:
        return list(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str | None) -> list[str]:
        topics: dict[str, None] = {}
        for name in self.cluster_addr_table.get(cluster, {}) if cluster else ():
            for topic in self.topic_queue_table:
                if name in self.topic_queue_table[topic]:
                    topics[topic] = None
        return list(topics)

    def system_topics(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (auto-created topics) and one broker address."""
        names: dict[str, None] = {}
        broker_addr = None
        for cluster, members in self.cluster_addr_table.items():
            names[cluster] = None
            for name in members:
                names[name] = None
                broker_data = self.broker_addr_table.get(name)
                if broker_addr is None and broker_data is not None and broker_data.broker_addrs:
                    broker_addr = broker_data.broker_addrs[min(broker_data.broker_addrs)]
        return list(names), broker_addr

    def unit_topics(self, want: Callable[[int], bool]) -> list[str]:
        """Topics whose *first* queue data's sys flag satisfies ``want`` (Java looks at one)."""
        out = []
        for topic, queues in self.topic_queue_table.items():
            first = next(iter(queues.values()), None)
            if first is not None and want(first.topic_sys_flag):
                out.append(topic)
        return out

    @staticmethod
    def is_unit(flag: int) -> bool:
        return bool(flag & TopicSysFlag.UNIT)

    @staticmethod
    def has_unit_sub(flag: int) -> bool:
        return bool(flag & TopicSysFlag.UNIT_SUB)

    @staticmethod
    def has_unit_sub_ununit(flag: int) -> bool:
        return bool(flag & TopicSysFlag.UNIT_SUB) and not flag & TopicSysFlag.UNIT

    def broker_member_group(self, cluster: str | None, broker_name: str | None) -> dict[str, Any]:
        broker_data = self.broker_addr_table.get(broker_name) if broker_name else None
        addrs = dict(sorted(broker_data.broker_addrs.items())) if broker_data else {}
        return {
            "brokerMemberGroup": {
                "brokerAddrs": addrs,
                "brokerName": broker_name,
                "cluster": cluster,
            }
        }

    def group_accepts_writes(self, broker_name: str) -> bool | None:
        """Whether any topic of the broker group has write permission; None when the group
        has no topic. Stops at the first writable one, so a writable group costs one look-up
        (the status page asks every few seconds) and a read-only one its topic count."""
        topics = self._topics_by_broker.get(broker_name)
        if not topics:
            return None
        for topic in topics:
            queue_data = self.topic_queue_table.get(topic, {}).get(broker_name)
            if queue_data is not None and queue_data.perm & Perm.WRITE:
                return True
        return False

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
        topics = {topic: _queue_records(queues) for topic, queues in self.topic_queue_table.items()}
        mappings = {
            topic: {name: info.to_record() for name, info in per_group.items()}
            for topic, per_group in self.topic_queue_mapping.items()
        }
        return {"brokers": brokers, "topics": topics, "mappings": mappings}

    # ------------------------------------------------------------------ recovery

    # The journal's lines applied to the tables (warm restart, time travel). A recovered
    # broker is *provisional*: live, with the last heartbeat, timeout and data version the
    # journal recorded, but with no connection (RECOVERED), so it leaves by its deadline
    # unless a registration replaces it. Records are checked as they are read (a journal is
    # a file anyone may have edited): a field of the wrong type raises RecordError.

    @property
    def provisional_count(self) -> int:
        """Recovered broker addresses that have not registered since."""
        return len(self._provisional)

    def is_provisional(self, cluster: str, broker_addr: str) -> bool:
        return (cluster, broker_addr) in self._provisional

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
            self._queued_deadline,
        ):
            table.clear()
        self._deadlines.clear()
        self._route_cache.clear()
        self.zone_route_cache.clear()
        self.route_generation += 1

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
        self.route_generation += 1

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
        timeout_ms = _optional(entry, "timeout_ms", int) or DEFAULT_BROKER_TIMEOUT_MS
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
        live = self.broker_live_table[key] = BrokerLiveInfo(
            last_update_ms=last_heartbeat_ms,
            timeout_ms=timeout_ms,
            data_version=data_version,
            channel=RECOVERED,
            ha_server_addr=_optional(entry, "ha_addr", str),
            broker_name=name,
            broker_id=broker_id,
        )
        self._provisional.add(key)
        queued = self._queued_deadline.get(key)
        if queued is None or queued > last_heartbeat_ms + timeout_ms:
            self._push_deadline(key, live)
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


class RecordError(ValueError):
    """A journal line without the shape docs/journal.md gives it (read, never trusted)."""


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


def filter_by_zone(route: dict[str, Any], zone: str) -> dict[str, Any]:
    """ZoneRouteRPCHook: keep the groups of ``zone`` (ignoring case) and the groups without a
    master (their slaves serve every zone), their queue data and their filter servers. The
    static-topic mappings stay whole, as in Java."""
    wanted = zone.lower()
    kept, removed = [], []
    for data in route["brokerDatas"]:
        zone_name = data.get("zoneName")
        in_zone = zone_name is not None and zone_name.lower() == wanted
        (kept if MASTER_ID not in data["brokerAddrs"] or in_zone else removed).append(data)
    if not removed:
        return route
    gone = {data["brokerName"] for data in removed}
    filtered = dict(route)
    filtered["brokerDatas"] = kept
    filtered["queueDatas"] = [q for q in route["queueDatas"] if q["brokerName"] not in gone]
    servers = route["filterServerTable"]
    if servers:
        gone_addrs = {a for data in removed for a in data["brokerAddrs"].values()}
        filtered["filterServerTable"] = {a: v for a, v in servers.items() if a not in gone_addrs}
    return filtered


def _min_id_changed(
    broker_data: BrokerData, offline_addr: str | None, ha_addr: str | None
) -> MinBrokerIdChanged:
    """What Java sends NOTIFY_MIN_BROKER_ID_CHANGE about, and to whom: every remaining broker
    when one left (or the group has one broker), else every broker but the new lowest."""
    addrs = dict(sorted(broker_data.broker_addrs.items()))
    min_id = min(addrs)
    if offline_addr is not None or len(addrs) == 1:
        notify = list(addrs.values())
    else:
        notify = [addr for broker_id, addr in addrs.items() if broker_id != min_id]
    return MinBrokerIdChanged(
        cluster=broker_data.cluster,
        broker_name=broker_data.broker_name,
        min_broker_id=min_id,
        min_broker_addr=addrs[min_id],
        offline_broker_addr=offline_addr,
        ha_broker_addr=ha_addr,
        notify=notify,
    )


def _queue_records(queues: dict[str, QueueData]) -> list[dict[str, Any]]:
    """A topic's queue data as the journal writes it (snapshot entries, topic events)."""
    return [
        {
            "broker_name": q.broker_name,
            "read": q.read_queue_nums,
            "write": q.write_queue_nums,
            "perm": q.perm,
            "sys_flag": q.topic_sys_flag,
        }
        for q in queues.values()
    ]
