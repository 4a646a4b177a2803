"""The route registry (RouteInfoManager): topic, broker, cluster and liveness tables.

Pure state, per spec/state.md: no sockets, no clock (``now_ms`` is passed in), no logging.
Every mutation returns the events it caused. One event loop owns an instance, so each
operation is atomic without locks, exactly as Java's single read/write lock makes it.

Where 4.9.4 and 5.x differ we follow 5.x (liveness keyed by cluster and address, per-broker
heartbeat timeout, unregister by address, topics missing for a master re-added on its next
registration) except where that would change an answer a 4.9.4 peer relies on; see the
method docstrings.

Route answers are cached as encoded bytes per (topic, dialect) and dropped whenever a change
touches the topic, so a route query costs one dict look-up.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRegistered,
    BrokerRemoved,
    Event,
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
)
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import MASTER_ID, Perm, TopicSysFlag

DEFAULT_BROKER_TIMEOUT_MS: Final = 120_000  # BROKER_CHANNEL_EXPIRED_TIME
# Cached route answers kept (two per topic at most, one per JSON dialect); a few hundred bytes
# each. Past it the least recently used are encoded again when asked for.
ROUTE_CACHE_MAX: Final = 200_000

LiveKey = tuple[str, str]  # (cluster, broker address): 5.x BrokerAddrInfo


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


class RouteInfoManager:
    """The tables of spec/state.md §1 plus two indexes that keep every operation cheap:
    topics by broker name (unregister and cache invalidation without a full scan) and live
    entries by connection (connection close without a scan)."""

    def __init__(self) -> None:
        self.topic_queue_table: dict[str, dict[str, QueueData]] = {}
        self.broker_addr_table: dict[str, BrokerData] = {}
        self.cluster_addr_table: dict[str, dict[str, None]] = {}  # ordered set of broker names
        self.broker_live_table: dict[LiveKey, BrokerLiveInfo] = {}
        self.filter_server_table: dict[LiveKey, list[str]] = {}
        self._topics_by_broker: dict[str, set[str]] = {}
        self._live_by_channel: dict[object, set[LiveKey]] = {}
        # Broker groups that lost queue data on the name server's side (DELETE_TOPIC): their
        # master's next registration must be decoded even if its bytes did not change, so that
        # the topics come back as in 5.x.
        self._pruned_brokers: set[str] = set()
        # Encoded route bodies by (topic, standard dialect), least recently used first; an
        # entry is replaced, never mutated, so holding one and checking it is still the one
        # here validates it.
        self._route_cache: OrderedDict[tuple[str, bool], CachedRoute] = OrderedDict()
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
    ) -> RegisterResult:
        """registerBroker (state.md §3).

        ``load_body`` is called at most once, before anything changes (so a body that fails to
        decode leaves no trace), and not at all when the broker re-sends exactly the bytes it
        sent last time (``body_digest`` equal): an idle broker's 30 s heartbeat with 100,000
        topics then costs no JSON decoding.

        Deliberately not ported: 5.x's refusal of a first registration that carries exactly
        one topic ("register broker failed"). 4.9.4 accepts it (golden errors.jsonl case 6b),
        and the problem it guards against (an incremental registration arriving first after a
        name-server restart) is solved by re-adding topics the group lacks, as 5.x also does.
        """
        key = (cluster, broker_addr)
        live = self.broker_live_table.get(key)
        is_master = broker_id == MASTER_ID
        need_body = self.needs_body(cluster, broker_addr, broker_name, broker_id, body_digest)
        body = load_body() if need_body else None
        data_version = body.data_version if body is not None else live.data_version  # type: ignore[union-attr]

        touched: set[str] = set()
        self.cluster_addr_table.setdefault(cluster, {})[broker_name] = None
        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster, broker_name=broker_name)
            self.broker_addr_table[broker_name] = broker_data
        if enable_acting_master is not None or zone_name is not None:
            broker_data.enable_acting_master = bool(enable_acting_master)
            broker_data.zone_name = zone_name
        addrs = broker_data.broker_addrs
        addrs_changed = False
        for other_id in [i for i, a in addrs.items() if a == broker_addr and i != broker_id]:
            del addrs[other_id]
            addrs_changed = True
        old_addr = addrs.get(broker_id)
        addrs[broker_id] = broker_addr
        register_first |= not old_addr
        addrs_changed |= old_addr != broker_addr

        added: list[str] = []
        changed: list[str] = []
        configs: dict[str, dict[str, int]] = {}
        broker_topics = self._topics_by_broker.setdefault(broker_name, set())
        if is_master and body is not None:
            version_changed = live is None or live.data_version != data_version
            for config in body.topic_configs:
                topic = config.topic_name
                queues = self.topic_queue_table.get(topic)
                present = queues.get(broker_name) if queues is not None else None
                if not (register_first or version_changed or present is None):
                    continue
                queue_data = QueueData(
                    broker_name=broker_name,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=config.perm,
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
                    "perm": config.perm,
                }
                broker_topics.add(topic)
                touched.add(topic)
            self._pruned_brokers.discard(broker_name)

        if live is not None and live.channel is not channel:
            self._unlink_channel(live.channel, key)
        self.broker_live_table[key] = BrokerLiveInfo(
            last_update_ms=now_ms,
            timeout_ms=heartbeat_timeout_ms or DEFAULT_BROKER_TIMEOUT_MS,
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
        if not is_master:
            master = addrs.get(MASTER_ID)
            master_live = self.broker_live_table.get((cluster, master)) if master else None
            if master_live is not None:
                result.master_addr = master
                result.ha_server_addr = master_live.ha_server_addr
        first = live is None
        if live is None or added or changed or live.data_version != data_version or addrs_changed:
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
                    topics_changed=changed,
                    topic_count=len(broker_topics),
                    topic_configs=configs,
                )
            )
        else:
            result.events.append(
                BrokerHeartbeat(
                    cluster, broker_name, broker_id, broker_addr, data_version.to_json()
                )
            )
        return result

    def needs_body(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        body_digest: int | None,
    ) -> bool:
        """Whether a registration must decode its body: not when the broker re-sends the
        bytes it sent last time, unless the name server dropped some of its topics since."""
        live = self.broker_live_table.get((cluster, broker_addr))
        return (
            live is None
            or body_digest is None
            or live.body_digest != body_digest
            or (broker_id == MASTER_ID and broker_name in self._pruned_brokers)
        )

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
        ``broker_id`` is kept for the event only.
        """
        key = (cluster, broker_addr)
        live = self.broker_live_table.pop(key, None)
        if live is not None:
            self._unlink_channel(live.channel, key)
        self.filter_server_table.pop(key, None)
        events: list[Event] = []
        broker_data = self.broker_addr_table.get(broker_name)
        removed_addr = False
        if broker_data is not None:
            addrs = broker_data.broker_addrs
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
                    events.append(TopicRemoved(topic=topic, reason="no_broker"))
            self._topics_by_broker.pop(broker_name, None)
            self._pruned_brokers.discard(broker_name)
        self._invalidate(topics)
        return events

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
            if live.last_update_ms + live.timeout_ms >= now_ms:
                self._push_deadline(key, live)  # refreshed since: wait for the real deadline
                continue
            events += self.unregister_broker(
                key[0], key[1], live.broker_name, live.broker_id, reason=RemovalReason.EXPIRED
            )
            if not self._live_by_channel.get(live.channel):
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
        self._invalidate((topic,))
        if queues:
            if not names:
                return []
            return [TopicQueuesChanged(topic, "deleted_in_cluster", _queue_records(queues))]
        del self.topic_queue_table[topic]
        return [TopicRemoved(topic=topic, reason="deleted")]

    # ------------------------------------------------------------------ reads

    def pickup_route(self, topic: str | None) -> dict[str, Any] | None:
        """pickupTopicRouteData (state.md §6) as plain data, or None when there is no route."""
        queues = self.topic_queue_table.get(topic) if topic is not None else None
        if queues is None:
            return None
        broker_datas: list[dict[str, Any]] = []
        filter_servers: dict[str, list[str]] = {}
        for name in queues:
            broker_data = self.broker_addr_table.get(name)
            if broker_data is None:
                continue
            broker_datas.append(broker_data.to_json())
            if self.filter_server_table:
                for addr in broker_data.broker_addrs.values():
                    servers = self.filter_server_table.get((broker_data.cluster, addr))
                    if servers:
                        filter_servers[addr] = servers
        if not broker_datas:
            return None
        return {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_servers,
            "orderTopicConf": None,
            "queueDatas": [q.to_json() for q in queues.values()],
        }

    def route_body(self, topic: str | None, standard: bool, order_conf: str | None) -> bytes | None:
        """The encoded GET_ROUTEINFO_BY_TOPIC body, from the cache when nothing changed."""
        if topic is None:
            return None
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

    def _invalidate(self, topics: Iterable[str]) -> None:
        self.route_generation += 1
        cache = self._route_cache
        if not cache:
            return
        for topic in topics:
            cache.pop((topic, False), None)
            cache.pop((topic, True), None)

    def cluster_info(self) -> dict[str, Any]:
        """ClusterInfo as data (always sent in the legacy dialect)."""
        return {
            "brokerAddrTable": {n: b.to_json() for n, b in self.broker_addr_table.items()},
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
        """Brokers and topic queues as the journal's ``snapshot`` event records them."""
        brokers = [
            {
                "cluster": cluster,
                "broker_name": live.broker_name,
                "broker_id": live.broker_id,
                "broker_addr": addr,
                "last_heartbeat_ts": live.last_update_ms,
            }
            for (cluster, addr), live in self.broker_live_table.items()
        ]
        topics = {topic: _queue_records(queues) for topic, queues in self.topic_queue_table.items()}
        return {"brokers": brokers, "topics": topics}


def _queue_records(queues: dict[str, QueueData]) -> list[dict[str, Any]]:
    """A topic's queue data as the journal writes it (snapshot entries, topic events)."""
    return [
        {
            "broker_name": q.broker_name,
            "read": q.read_queue_nums,
            "write": q.write_queue_nums,
            "perm": q.perm,
        }
        for q in queues.values()
    ]
