"""Route answers (GET_ROUTEINFO_BY_TOPIC): built from the tables, cached as encoded bytes.

Answers are cached per (topic, dialect) and dropped whenever a change touches the topic, so a
route query costs one dict look-up. The 5.x views of a route are computed here too, and
cached the same way: the acting master (supportActingMaster) inside the plain answer, a
zone's filtered answer per (topic, dialect, zone) (ZoneRouteRPCHook).

The answers that list the tables (topic lists, cluster info: megabytes over 100,000 topics)
are cached as encoded bodies too (``listing``), all of them dropped by any change of the
tables: every change calls ``invalidate`` (or ``forget_all``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pynamesrv.namesrv.model import BrokerData, QueueData, TopicQueueMappingInfo
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import MASTER_ID, Perm

# Cached route answers kept (two per topic at most, one per JSON dialect); a few hundred bytes
# each. Past it the least recently used are encoded again when asked for.
ROUTE_CACHE_MAX: Final = 200_000
# TopicValidator.SYNC_BROKER_MEMBER_GROUP_PREFIX: topics whose routes never show an acting
# master (brokers read their group's real members from them).
SYNC_BROKER_MEMBER_PREFIX: Final = "rmq_sys_SYNC_BROKER_MEMBER_"

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


class RouteAnswers:
    """The read side of the route tables it is given (the registry's own dictionaries, read
    and never changed here), and the cache of their encoded answers.

    The registry calls ``invalidate`` with every topic a change touches; ``route_generation``
    counts those calls, so a hot path holding answers checks one integer instead of the
    cache."""

    def __init__(
        self,
        topic_queue_table: dict[str, dict[str, QueueData]],
        broker_addr_table: dict[str, BrokerData],
        filter_server_table: dict[tuple[str, str], list[str]],
        topic_queue_mapping: dict[str, dict[str, TopicQueueMappingInfo]],
        *,
        java5: bool,
        support_acting_master: bool,
    ) -> None:
        self._topic_queue_table = topic_queue_table
        self._broker_addr_table = broker_addr_table
        self._filter_server_table = filter_server_table
        self._topic_queue_mapping = topic_queue_mapping
        self.java5 = java5
        self.support_acting_master = support_acting_master
        # Encoded route bodies by (topic, standard dialect), least recently used first; an
        # entry is replaced, never mutated, so holding one and checking it is still the one
        # here validates it. Zone-filtered answers are kept per topic (unknown zones share one).
        self._route_cache: OrderedDict[tuple[str, bool], CachedRoute] = OrderedDict()
        self.zone_route_cache: dict[str, _ZoneAnswers] = {}
        # Bumped whenever cached routes are dropped: while it stands still, every answer built
        # from the cache is still good.
        self.route_generation = 0
        # Encoded bodies of the answers that list the tables (``listing``), dropped by every
        # change: a few per server (one per cluster for a cluster's topics).
        self._listings: dict[Hashable, bytes] = {}

    def set_support_acting_master(self, enabled: bool) -> None:
        """supportActingMaster changed at run time: every cached answer may change."""
        if enabled != self.support_acting_master:
            self.support_acting_master = enabled
            self.forget_all()

    def forget_all(self) -> None:
        """Drop every cached answer (the tables were cleared or replaced)."""
        self._route_cache.clear()
        self.zone_route_cache.clear()
        self._listings.clear()
        self.route_generation += 1

    def invalidate(self, topics: Iterable[str]) -> None:
        """Drop the cached answers of ``topics``: their routes changed. A set of topics
        larger than the cache (a registration of 100,000) is matched against the cache's
        entries instead, one look-up per entry rather than three per topic."""
        self.route_generation += 1
        if self._listings:
            self._listings.clear()  # any change may change a list or the cluster info
        cache, zone_cache = self._route_cache, self.zone_route_cache
        if not cache and not zone_cache:
            return
        if isinstance(topics, (set, frozenset)) and len(topics) > len(cache) + len(zone_cache):
            for key in [key for key in cache if key[0] in topics]:
                del cache[key]
            for topic in [topic for topic in zone_cache if topic in topics]:
                del zone_cache[topic]
            return
        for topic in topics:
            cache.pop((topic, False), None)
            cache.pop((topic, True), None)
            zone_cache.pop(topic, None)

    def listing(self, key: Hashable, build: Callable[[], bytes]) -> bytes:
        """The encoded body of a table-wide answer (a topic list, the cluster info) known by
        ``key``: ``build()`` once, then the same bytes until the tables change. The caller
        decides what is worth keeping (no key a client can vary at will)."""
        body = self._listings.get(key)
        if body is None:
            body = self._listings[key] = build()
        return body

    def pickup_route(self, topic: str | None) -> dict[str, Any] | None:
        """pickupTopicRouteData (state.md §6) as plain data, or None when there is no route.

        5.x: the topic's static-topic mappings come along (``topicQueueMappingByBroker``),
        and with supportActingMaster a master-less acting-master group whose write
        permission is gone shows its lowest-id broker as id 0 (a view: the tables keep the
        real ids, GET_BROKER_MEMBER_GROUP and cluster info show them)."""
        if topic is None:
            return None
        queues = self._topic_queue_table.get(topic)
        if queues is None:
            return None
        broker_datas: list[dict[str, Any]] = []
        filter_servers: dict[str, list[str]] = {}
        filter_server_table = self._filter_server_table
        for name in queues:
            broker_data = self._broker_addr_table.get(name)
            if broker_data is None:
                continue
            broker_datas.append(broker_data.to_json(self.java5))
            if filter_server_table:
                for addr in broker_data.broker_addrs.values():
                    servers = filter_server_table.get((broker_data.cluster, addr))
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
        mappings = self._topic_queue_mapping.get(topic)
        if mappings:
            route["topicQueueMappingByBroker"] = {b: m.to_json() for b, m in mappings.items()}
        if self.support_acting_master and not topic.startswith(SYNC_BROKER_MEMBER_PREFIX):
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
            group = self._broker_addr_table[name]
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


def filter_by_zone(route: dict[str, Any], zone: str) -> dict[str, Any]:
    """ZoneRouteRPCHook: keep the groups of ``zone`` (ignoring case) and the groups without a
    master (their slaves serve every zone), their queue data and their filter servers. The
    static-topic mappings stay whole, as in Java."""
    wanted = zone.lower()
    kept: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
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
