"""The diff engine: where several name servers' routing tables disagree.

Name servers never talk to each other: each learns the routes only from the brokers'
registrations, so a broker that cannot reach one of them makes them diverge silently
(RocketMQ issue #4807). ``take_snapshot`` reads what one server knows; ``compare`` is pure
and lists every disagreement, each with every server's value, in a stable order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pynamesrv.cli.admin.fetch import (
    as_int,
    fetch_cluster_info,
    fetch_routes,
    fetch_topic_list,
    sort_id,
)
from pynamesrv.cli.admin.session import Session

QUEUE_FIELDS: Final = ("perm", "readQueueNums", "writeQueueNums", "topicSysFlag")
_KIND_ORDER: Final = {"broker": 0, "topic": 1, "queue": 2}


@dataclass(slots=True)
class Snapshot:
    """What one name server knows: its brokers and every listed topic's route (None: none)."""

    addr: str
    cluster_info: dict[str, Any]
    routes: dict[str, dict[str, Any] | None]

    def brokers(self) -> dict[str, dict[str, Any]]:
        table = self.cluster_info.get("brokerAddrTable") or {}
        return {str(k): v if isinstance(v, dict) else {} for k, v in table.items()}


@dataclass(slots=True)
class Difference:
    """One fact the name servers disagree on, with every server's value (None = absent)."""

    kind: str  # broker | topic | queue
    field: str
    values: dict[str, Any]
    topic: str | None = None
    broker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "broker": self.broker,
            "field": self.field,
            "values": self.values,
        }


async def take_snapshot(session: Session, addr: str, concurrency: int) -> Snapshot:
    """Cluster info, topic list and every listed topic's route of one name server."""
    info, topics = await asyncio.gather(
        fetch_cluster_info(session, addr), fetch_topic_list(session, addr)
    )
    return Snapshot(addr, info, await fetch_routes(session, addr, topics, concurrency))


def _broker_summary(data: dict[str, Any]) -> str:
    addrs = data.get("brokerAddrs") or {}
    listed = ", ".join(
        f"{k}={v}" for k, v in sorted(addrs.items(), key=lambda kv: sort_id(as_int(kv[0])))
    )
    return f"cluster {data.get('cluster')}: {listed}"


def _queue_summary(queue: dict[str, Any]) -> str:
    return (
        f"r={queue.get('readQueueNums')} w={queue.get('writeQueueNums')} "
        f"perm={queue.get('perm')} flag={queue.get('topicSysFlag', 0)}"
    )


def _route_summary(route: dict[str, Any] | None) -> str:
    if route is None:
        return "listed, no route"
    queues = sorted(route.get("queueDatas") or [], key=lambda q: str(q.get("brokerName")))
    return "; ".join(f"{q.get('brokerName')} {_queue_summary(q)}" for q in queues) or "no queues"


def _differs(values: dict[str, Any]) -> bool:
    first = next(iter(values.values()))
    return any(v != first for v in values.values())


def _broker_differences(snapshots: Sequence[Snapshot]) -> list[Difference]:
    """Brokers missing on some servers, in another cluster, or with other addresses."""
    diffs: list[Difference] = []
    brokers = {s.addr: s.brokers() for s in snapshots}
    for name in sorted({n for table in brokers.values() for n in table}):
        present = {a: table.get(name) for a, table in brokers.items()}
        if any(v is None for v in present.values()):
            values = {a: None if v is None else _broker_summary(v) for a, v in present.items()}
            diffs.append(Difference("broker", "broker", values, broker=name))
            continue
        groups = {a: v for a, v in present.items() if v is not None}
        clusters = {a: v.get("cluster") for a, v in groups.items()}
        if _differs(clusters):
            diffs.append(Difference("broker", "cluster", clusters, broker=name))
        addr_maps = {
            a: {str(as_int(k)): addr for k, addr in (v.get("brokerAddrs") or {}).items()}
            for a, v in groups.items()
        }
        ids = sorted({i for m in addr_maps.values() for i in m}, key=lambda i: sort_id(as_int(i)))
        for broker_id in ids:
            values = {a: m.get(broker_id) for a, m in addr_maps.items()}
            if _differs(values):
                diffs.append(Difference("broker", f"brokerAddrs[{broker_id}]", values, broker=name))
    return diffs


def _topic_differences(snapshots: Sequence[Snapshot]) -> list[Difference]:
    """Topics missing on some servers, routed on some only, or with other queue data."""
    diffs: list[Difference] = []
    routes = {s.addr: s.routes for s in snapshots}
    for topic in sorted({t for table in routes.values() for t in table}):
        listed = {a: topic in table for a, table in routes.items()}
        if not all(listed.values()):
            values = {a: _route_summary(routes[a][topic]) if listed[a] else None for a in routes}
            diffs.append(Difference("topic", "topic", values, topic=topic))
            continue
        per_server = {a: table[topic] for a, table in routes.items()}
        if any(r is None for r in per_server.values()):
            if _differs({a: r is None for a, r in per_server.items()}):
                values = {a: _route_summary(r) for a, r in per_server.items()}
                diffs.append(Difference("topic", "route", values, topic=topic))
            continue
        queue_maps = {
            a: {str(q.get("brokerName")): q for q in r.get("queueDatas") or [] if q}
            for a, r in per_server.items()
            if r is not None
        }
        for broker in sorted({b for m in queue_maps.values() for b in m}):
            queues = {a: m.get(broker) for a, m in queue_maps.items()}
            if any(q is None for q in queues.values()):
                values = {a: None if q is None else _queue_summary(q) for a, q in queues.items()}
                diffs.append(Difference("queue", "queueData", values, topic=topic, broker=broker))
                continue
            for name in QUEUE_FIELDS:
                values = {a: q.get(name, 0) if q else None for a, q in queues.items()}
                if _differs(values):
                    diffs.append(Difference("queue", name, values, topic=topic, broker=broker))
        order_confs = {a: r.get("orderTopicConf") for a, r in per_server.items() if r is not None}
        if _differs(order_confs):
            diffs.append(Difference("topic", "orderTopicConf", order_confs, topic=topic))
    return diffs


def compare(snapshots: Sequence[Snapshot]) -> list[Difference]:
    """Every disagreement between the snapshots: brokers, addresses, topics, queue data."""
    diffs = _broker_differences(snapshots) + _topic_differences(snapshots)
    diffs.sort(key=lambda d: (_KIND_ORDER[d.kind], d.topic or "", d.broker or "", d.field))
    return diffs
