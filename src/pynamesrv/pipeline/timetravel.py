"""routes-at: the route table an instance held at a past moment (pipeline-semantics.md).

A point query: Spark reads the hour files around T (``history.py``: the file of T and the one
before, more only when the last snapshot is further back) and reduces them to each instance's
events from its last snapshot (or ``server_started``) at or before T up to T, without
heartbeats and query counts; those few rows are replayed in Python exactly as
``namesrv.routes`` applies them.

This module imports without PySpark: ``RouteTable``, ``replay`` and the digests are plain
Python (the admin CLI prints digests of live answers; a server can rebuild routes from its
own journal), and only ``routes_at`` starts Spark work.

Digests make "the same route" checkable: ``route_digest`` turns a live GET_ROUTEINFO_BY_TOPIC
body and a rebuilt route into the same canonical JSON. The canonical form keeps only what the
journal can reproduce: broker groups (cluster, name, addresses by id) and queue data (name,
read and write queue numbers, perm). ``topicSysFlag``, ``zoneName``, filter servers and the
order config are not journaled, so they are left out on both sides rather than guessed.

REGISTER_TOPIC_IN_NAMESRV and a DELETE_TOPIC for one cluster that leaves the topic on other
brokers change routes without a registration; the journal records each as a
``topic_queues_changed`` line holding the topic's whole queue data afterwards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from pynamesrv.remoting import fastjson

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Route = dict[str, list[dict[str, Any]]]

STARTED: Final = "server_started"
REGISTERED: Final = "broker_registered"
REMOVED: Final = "broker_removed"
PERM_WRITE = 2
PERM_READ_WRITE = 6


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces: the bytes the digests are taken of."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def canonical_route(route_body: Mapping[str, Any] | bytes | str) -> Route:
    """A GET_ROUTEINFO_BY_TOPIC body (dict, or its bytes in either JSON dialect) reduced to
    what the journal records: brokerDatas and queueDatas sorted by broker name, address keys
    as strings."""
    body = fastjson.loads(route_body) if isinstance(route_body, bytes | str) else route_body
    brokers = [
        {
            "brokerAddrs": {str(k): v for k, v in (b.get("brokerAddrs") or {}).items()},
            "brokerName": b.get("brokerName"),
            "cluster": b.get("cluster"),
        }
        for b in body.get("brokerDatas") or []
    ]
    queues = [
        {
            "brokerName": q.get("brokerName"),
            "perm": int(q.get("perm", 0)),
            "readQueueNums": int(q.get("readQueueNums", 0)),
            "writeQueueNums": int(q.get("writeQueueNums", 0)),
        }
        for q in body.get("queueDatas") or []
    ]
    return {
        "brokerDatas": sorted(brokers, key=lambda b: str(b["brokerName"])),
        "queueDatas": sorted(queues, key=lambda q: str(q["brokerName"])),
    }


def route_digest(route_body: Mapping[str, Any] | bytes | str) -> str:
    """SHA-256 of the canonical JSON of one topic's route (live answer or rebuilt)."""
    return hashlib.sha256(canonical_json(canonical_route(route_body))).hexdigest()


def table_digest(routes: Mapping[str, Route]) -> str:
    """SHA-256 of the canonical JSON of a whole ``{topic: route}`` table."""
    return hashlib.sha256(
        canonical_json({t: canonical_route(r) for t, r in routes.items()})
    ).hexdigest()


@dataclass(slots=True)
class RouteTable:
    """The part of ``RouteInfoManager``'s state a route answer is made of."""

    # broker name -> (cluster, {broker id: address}): BrokerData
    groups: dict[str, tuple[str, dict[int, str]]] = field(default_factory=dict)
    # topic -> broker name -> {read, write, perm}: QueueData
    queues: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, row: Mapping[str, Any]) -> RouteTable:
        table = cls()
        for broker in row.get("brokers") or []:
            _, addrs = table.groups.setdefault(broker["broker_name"], (broker["cluster"], {}))
            addrs[int(broker["broker_id"])] = broker["broker_addr"]
        for topic, queue_list in (row.get("topics") or {}).items():
            table.set_queues(topic, queue_list or [])
        return table

    def set_queues(self, topic: str, queue_list: Iterable[Mapping[str, Any]]) -> None:
        """A topic's whole queue data, as snapshots and ``topic_queues_changed`` list it."""
        self.queues[topic] = {
            q["broker_name"]: {
                "read": int(q["read"]),
                "write": int(q["write"]),
                "perm": int(q["perm"]),
            }
            for q in queue_list
        }
        if not self.queues[topic]:
            del self.queues[topic]

    def register(self, row: Mapping[str, Any], configs: Mapping[str, Mapping[str, int]]) -> None:
        """A registration: the address joins its group (replacing another id on the same
        address), the named topics take their queue data."""
        name, addr, broker_id = row["broker_name"], row["broker_addr"], int(row["broker_id"])
        cluster, addrs = self.groups.get(name, (row["cluster"], {}))  # first cluster stays
        for other in [i for i, a in addrs.items() if a == addr and i != broker_id]:
            del addrs[other]
        addrs[broker_id] = addr
        self.groups[name] = (cluster, addrs)
        for topic in [*(row.get("topics_added") or []), *(row.get("topics_changed") or [])]:
            config = configs.get(topic)
            if config is not None:
                self.queues.setdefault(topic, {})[name] = {
                    "read": int(config["read"]),
                    "write": int(config["write"]),
                    "perm": int(config["perm"]),
                }

    def remove(self, row: Mapping[str, Any]) -> None:
        """A removal drops the address; a group left empty loses its queue data."""
        name, addr = row["broker_name"], row["broker_addr"]
        group = self.groups.get(name)
        if group is None:
            return
        addrs = group[1]
        for broker_id in [i for i, a in addrs.items() if a == addr]:
            del addrs[broker_id]
        if addrs:
            return
        del self.groups[name]
        for topic in list(self.queues):
            self.queues[topic].pop(name, None)
            if not self.queues[topic]:
                del self.queues[topic]

    def set_perm(self, broker_name: str, op: str) -> None:
        for per_broker in self.queues.values():
            qd = per_broker.get(broker_name)
            if qd is not None:
                qd["perm"] = qd["perm"] & ~PERM_WRITE if op == "wipe" else PERM_READ_WRITE

    def routes(self) -> dict[str, Route]:
        """``{topic: route}`` in canonical form, topics sorted; a topic none of whose brokers
        has an address has no route (the server answers TOPIC_NOT_EXIST)."""
        out: dict[str, Route] = {}
        for topic in sorted(self.queues):
            per_broker = self.queues[topic]
            broker_datas = [
                {
                    "brokerAddrs": {str(i): a for i, a in sorted(self.groups[n][1].items())},
                    "brokerName": n,
                    "cluster": self.groups[n][0],
                }
                for n in sorted(per_broker)
                if n in self.groups
            ]
            if not broker_datas:
                continue
            out[topic] = {
                "brokerDatas": broker_datas,
                "queueDatas": [
                    {
                        "brokerName": n,
                        "perm": qd["perm"],
                        "readQueueNums": qd["read"],
                        "writeQueueNums": qd["write"],
                    }
                    for n, qd in sorted(per_broker.items())
                ],
            }
        return out


def replay(
    rows: Iterable[Mapping[str, Any]], later_snapshot: Mapping[str, Any] | None = None
) -> RouteTable:
    """Apply one instance's events in order, from its base (snapshot or start) on.

    A registration that names a topic without ``topic_configs`` (journals written before that
    field existed) takes the topic's queue data from ``later_snapshot``, the first snapshot
    after T, when there is one.
    """
    fallback: dict[str, dict[str, dict[str, int]]] = {}
    if later_snapshot is not None:
        fallback = RouteTable.from_snapshot(later_snapshot).queues
    table = RouteTable()
    for row in rows:
        kind = row["type"]
        if kind == STARTED:
            table = RouteTable()
        elif kind == "snapshot":
            table = RouteTable.from_snapshot(row)
        elif kind == REGISTERED:
            configs = dict(row.get("topic_configs") or {})
            for topic in [*(row.get("topics_added") or []), *(row.get("topics_changed") or [])]:
                if topic not in configs and row["broker_name"] in fallback.get(topic, {}):
                    configs[topic] = fallback[topic][row["broker_name"]]
            table.register(row, configs)
        elif kind == REMOVED:
            table.remove(row)
        elif kind == "topic_removed":
            table.queues.pop(row["topic"], None)
        elif kind == "topic_queues_changed":
            table.set_queues(row["topic"], row.get("queues") or [])
        elif kind == "perm_changed":
            table.set_perm(row["broker_name"], row["op"])
    return table


def routes_at(
    spark: SparkSession,
    paths: Sequence[str],
    at_ms: int,
    *,
    instance: str | None = None,
) -> dict[str, dict[str, Route]]:
    """``{instance: {topic: route}}`` as each instance (or only ``instance``) held it at
    ``at_ms`` (events at exactly ``at_ms`` included)."""
    from pynamesrv.pipeline.history import next_snapshot, rows_since_base

    by_ns, _ = rows_since_base(spark, paths, at_ms, instance)
    out: dict[str, dict[str, Route]] = {}
    for ns, ns_rows in sorted(by_ns.items()):
        later = next_snapshot(spark, paths, ns, at_ms) if needs_fallback(ns_rows) else None
        out[ns] = replay(ns_rows, later).routes()
    return out


def needs_fallback(rows: Iterable[Mapping[str, Any]]) -> bool:
    """True when a registration names a topic without its queue data (journals written
    before ``topic_configs``)."""
    for row in rows:
        if row["type"] == REGISTERED:
            named = [*(row.get("topics_added") or []), *(row.get("topics_changed") or [])]
            if any(t not in (row.get("topic_configs") or {}) for t in named):
                return True
    return False


def describe(
    routes: Mapping[str, Mapping[str, Route]], at_ms: int, topic: str | None = None
) -> dict[str, Any]:
    """The printed answer: per instance the table digest, and per topic the route and its
    digest (compare with ``route_digest`` of a live answer, e.g. ``pynamesrv admin
    topicRoute --digest``). With ``topic``, only that topic (and no table digest)."""
    out: dict[str, Any] = {}
    for ns, table in routes.items():
        shown = {t: r for t, r in table.items() if topic is None or t == topic}
        entry: dict[str, Any] = {
            "time": at_ms,
            "topics": {t: {"digest": route_digest(r), "route": r} for t, r in shown.items()},
        }
        if topic is None:
            entry["digest"] = table_digest(table)
        out[ns] = entry
    return out
