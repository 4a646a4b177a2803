"""Time travel's plain-Python half: an instance's journal lines replayed into the routes it
answered, those routes as the exact GET_ROUTEINFO_BY_TOPIC bodies, and digests that make "the
same route" checkable (docs/pipeline-semantics.md, routes-at).

Why in ``namesrv``: three readers rebuild routes at a past moment and must agree byte for
byte: ``pynamesrv pipeline routes-at`` over local files (``namesrv.history``) or through
Spark (``pipeline.history``), and a running server answering for its own journal (the JSON
API and ``pynamesrv admin routeAt``). Replay is ``namesrv.recovery``'s, the code warm restart
applies the same lines with, so time travel cannot drift from what the server answered.

Digests: ``route_digest`` turns a live GET_ROUTEINFO_BY_TOPIC body and a rebuilt route into
the same canonical JSON. The canonical form keeps only what the journal can reproduce: broker
groups (cluster, name, addresses by id) and queue data (name, read and write queue numbers,
perm). ``topicSysFlag``, ``zoneName``, filter servers and the order config are not journaled,
so they are left out on both sides rather than guessed.

REGISTER_TOPIC_IN_NAMESRV and a DELETE_TOPIC for one cluster that leaves the topic on other
brokers change routes without a registration; the journal records each as a
``topic_queues_changed`` line holding the topic's whole queue data afterwards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import orjson

from pynamesrv.namesrv import recovery
from pynamesrv.namesrv.events import BrokerRegistered
from pynamesrv.namesrv.journal import JournalDamage
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.remoting import fastjson

Route = dict[str, list[dict[str, Any]]]

# The JSON dialects a route body is answered in (remoting/fastjson.py), by name -> standard:
# standard to clients of RocketMQ 4.9.4 and later, legacy (bare numeric keys) to older ones.
DIALECTS: Final = {"standard": True, "legacy": False}

REGISTERED: Final = BrokerRegistered.TYPE


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


def table_digest(routes: Mapping[str, Mapping[str, Any] | bytes | str]) -> str:
    """SHA-256 of the canonical JSON of a whole ``{topic: route}`` table (routes or bodies)."""
    return hashlib.sha256(
        canonical_json({t: canonical_route(r) for t, r in routes.items()})
    ).hexdigest()


def routes_of(registry: RouteInfoManager) -> dict[str, Route]:
    """``{topic: route}`` in canonical form, topics sorted, as ``registry`` answers them; a
    topic none of whose groups has an address has no route (TOPIC_NOT_EXIST)."""
    out: dict[str, Route] = {}
    for topic in sorted(registry.topic_queue_table):
        body = registry.pickup_route(topic)
        if body is not None:
            out[topic] = canonical_route(body)
    return out


def replay(
    rows: Iterable[Mapping[str, Any]], later_snapshot: Mapping[str, Any] | None = None
) -> dict[str, Route]:
    """The routes one instance's lines lead to, applied in order from its base (snapshot or
    start) on by ``namesrv.recovery.replay``: the registry's own rules, as a warm restart
    applies them, so time travel cannot drift from what the server answered.

    A registration that names a topic without ``topic_configs`` (journals written before that
    field existed) takes the topic's queue data from ``later_snapshot``, the first snapshot
    after T, when there is one.
    """
    return routes_of(replay_registry(rows, later_snapshot))


def replay_registry(
    rows: Iterable[Mapping[str, Any]],
    later_snapshot: Mapping[str, Any] | None = None,
    damage: JournalDamage | None = None,
) -> RouteInfoManager:
    """The registry ``replay`` builds: it answers route queries as the server did then. A
    line without its documented shape raises ``RecordError``, or with ``damage`` is skipped
    and counted there (``recovery.replay``)."""
    registry = RouteInfoManager()
    recovery.replay(with_fallback(rows, later_snapshot), registry, damage)
    return registry


def with_fallback(
    rows: Iterable[Mapping[str, Any]], later_snapshot: Mapping[str, Any] | None
) -> Iterator[Mapping[str, Any]]:
    """``rows``, registrations missing a named topic's queue data completed from
    ``later_snapshot`` (``QueueFallback``)."""
    fallback = QueueFallback(later_snapshot)
    return (fallback.completed(row) for row in rows)


class QueueFallback:
    """Queue data for registrations of journals written before ``topic_configs``: a
    registration naming a topic without it takes the group's queue data of the topic from
    the first snapshot after T (``later_snapshot``), when that lists it."""

    __slots__ = ("_queues",)

    def __init__(self, later_snapshot: Mapping[str, Any] | None) -> None:
        self._queues: dict[str, dict[str, Mapping[str, Any]]] = {}
        if later_snapshot is not None:
            for topic, queue_list in (later_snapshot.get("topics") or {}).items():
                self._queues[topic] = {q["broker_name"]: q for q in queue_list or []}

    def completed(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """``row``, or a copy of it with the queue data it lacked (the row is left as is)."""
        if not self._queues or row.get("type") != REGISTERED:
            return row
        name, configs = row.get("broker_name"), dict(row.get("topic_configs") or {})
        missing = [t for t in _named_topics(row) if t not in configs]
        found = {t: self._queues[t][name] for t in missing if name in self._queues.get(t, {})}
        return {**row, "topic_configs": configs | found} if found else row


def lacks_queue_data(row: Mapping[str, Any]) -> bool:
    """True for a registration that names a topic without its queue data (journals written
    before ``topic_configs``)."""
    return row.get("type") == REGISTERED and any(
        t not in (row.get("topic_configs") or {}) for t in _named_topics(row)
    )


def _named_topics(row: Mapping[str, Any]) -> list[str]:
    return [*(row.get("topics_added") or []), *(row.get("topics_changed") or [])]


def route_bodies(
    registry: RouteInfoManager, standard: bool = False, topic: str | None = None
) -> dict[str, bytes]:
    """``{topic: body}``, topics sorted: the GET_ROUTEINFO_BY_TOPIC bodies ``registry``
    answers, encoded by the server's own encoder (``route_body``) in the dialect it answers
    clients of RocketMQ 4.9.4 and later with (``standard``) or older ones (legacy), as a
    server with the default settings answers: no order topic config (a KV entry the journal
    does not record) and no zone filter. With ``topic``, that topic's alone (if routed)."""
    bodies = {}
    names = sorted(registry.topic_queue_table) if topic is None else [topic]
    for topic in names:
        body = registry.route_body(topic, standard, None)
        if body is not None:
            bodies[topic] = body
    return bodies


def needs_fallback(rows: Iterable[Mapping[str, Any]]) -> bool:
    """True when a registration names a topic without its queue data (``lacks_queue_data``)."""
    return any(lacks_queue_data(row) for row in rows)


def describe(
    bodies: Mapping[str, Mapping[str, bytes]], at_ms: int, topic: str | None = None
) -> dict[str, Any]:
    """The printed answer: per instance the table digest, and per topic the exact
    GET_ROUTEINFO_BY_TOPIC body (``route_bodies``, as text) and its digest (compare with a
    live answer's: ``pynamesrv admin topicRoute --digest``). With ``topic``, only that topic
    (and no table digest)."""
    out: dict[str, Any] = {}
    for ns, table in bodies.items():
        shown = {t: b for t, b in table.items() if topic is None or t == topic}
        entry: dict[str, Any] = {
            "time": at_ms,
            "topics": {
                t: {"digest": route_digest(b), "body": b.decode("utf-8")} for t, b in shown.items()
            },
        }
        if topic is None:
            entry["digest"] = table_digest(table)
        out[ns] = entry
    return out
