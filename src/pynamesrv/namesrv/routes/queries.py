"""The registry's read API: route answers (through ``answers.RouteAnswers``), cluster info,
topic lists and group facts, each a read of the tables that changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pynamesrv.namesrv.events import BrokerRecovered
from pynamesrv.namesrv.model import BrokerLiveInfo
from pynamesrv.namesrv.routes.tables import RouteTables
from pynamesrv.remoting.codes import Perm, TopicSysFlag


class RouteQueries(RouteTables):
    """What the processor, the status page and the metrics ask the registry.

    The route bodies themselves (``route_body``, ``cached_route``) are ``RouteAnswers``
    methods bound onto the tables, so a route query costs no call more than theirs."""

    # ------------------------------------------------------------------ route answers

    @property
    def route_generation(self) -> int:
        """Bumped whenever cached routes are dropped (``RouteAnswers.route_generation``)."""
        return self.answers.route_generation

    @property
    def support_acting_master(self) -> bool:
        return self.answers.support_acting_master

    def set_support_acting_master(self, enabled: bool) -> None:
        """supportActingMaster changed at run time: every cached answer may change."""
        self.answers.set_support_acting_master(enabled)

    def pickup_route(self, topic: str | None) -> dict[str, Any] | None:
        """pickupTopicRouteData as plain data (``RouteAnswers.pickup_route``)."""
        return self.answers.pickup_route(topic)

    # ------------------------------------------------------------------ admin reads

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

    # ------------------------------------------------------------------ liveness reads

    @property
    def provisional_count(self) -> int:
        """Recovered broker addresses that have not registered since."""
        return len(self._provisional)

    def is_provisional(self, cluster: str, broker_addr: str) -> bool:
        return (cluster, broker_addr) in self._provisional

    def recovered_events(self) -> list[BrokerRecovered]:
        """One ``broker_recovered`` per provisional broker, in (cluster, address) order: what
        a warm restart journals right after ``server_started``."""
        events = []
        for key in sorted(self._provisional):
            live = self.broker_live_table[key]
            events.append(
                BrokerRecovered(
                    cluster=key[0],
                    broker_name=live.broker_name,
                    broker_id=live.broker_id,
                    broker_addr=key[1],
                    last_heartbeat_ts=live.last_update_ms,
                    timeout_ms=live.timeout_ms,
                )
            )
        return events

    def live_entry(self, cluster: str, broker_addr: str) -> BrokerLiveInfo | None:
        """The liveness of one registered address (its connection, its last heartbeat)."""
        return self.broker_live_table.get((cluster, broker_addr))

    def serves_brokers(self, channel: object) -> bool:
        """Whether a live broker's latest registration came over ``channel``: the remoting
        server sheds such a connection last when it needs a slot."""
        return channel in self._live_by_channel

    def holder(self, broker_name: str, broker_id: int) -> tuple[str, BrokerLiveInfo | None] | None:
        """Who holds ``broker_id`` of the group ``broker_name``: its address and liveness
        (None: nobody; a None liveness: an address no live entry backs)."""
        group = self.broker_addr_table.get(broker_name)
        addr = group.broker_addrs.get(broker_id) if group is not None else None
        if group is None or addr is None:
            return None
        return addr, self.broker_live_table.get((group.cluster, addr))

    def next_expiry_ms(self) -> int | None:
        """A moment at or before the earliest expiry (never later): when to check next."""
        return self.deadlines.next_ms()

    @property
    def queued_deadlines(self) -> int:
        """Entries in the expiry heap, stale ones included: what heartbeats must not grow."""
        return len(self.deadlines)
