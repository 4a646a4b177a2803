"""Expected pipeline tables, computed from what a simulation *did* (docs/pipeline-semantics.md).

The generator (``testing.generate``) records, per simulated name-server instance, the facts it
acted on: running intervals, broker sessions with the heartbeat gaps inside them, removals,
topic membership and the route-query counts it wrote. This module turns those facts into the
rows each pipeline table must hold. It never reads a journal file: the point is an
independent second computation that the Spark job is checked against.

Everything here is linear or ``n log n`` in the number of sessions and stale intervals, never
in the number of heartbeats (a day of 1,000 brokers has millions of those).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import orjson

from pynamesrv.pipeline import TABLES

DAY_MS = 86_400_000
MINUTE_MS = 60_000
EPOCH_DAY = date(1970, 1, 1)

#: Session end reasons that are the name server's doing, not a broker outage.
SERVER_END_REASONS = frozenset({"server_stopped", "server_lost"})

Row = dict[str, Any]


@dataclass(slots=True)
class Session:
    """One continuous registration of a broker address on one instance."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    start_ts: int
    end_ts: int | None  # None: still open at the end of the data
    end_reason: str | None
    #: Stale intervals [h_i + H, min(h_{i+1}, end)), non-empty ones only, in time order; an
    #: open session's last one runs to the instance's last event. A recovered session's first
    #: beat is the broker's last one before the restart: its interval starts at the restart
    #: at the earliest.
    stale: list[tuple[int, int]] = field(default_factory=list)
    #: "registered" (a first registration) or "recovered" (a warm restart's broker_recovered)
    start_reason: str = "registered"


@dataclass(slots=True)
class InstanceLog:
    """What one simulated instance did, as the ground truth needs it."""

    ns: str
    #: (start_ts, end_ts, end_reason): server_started .. server_stopped / last event before a
    #: crash (``server_lost``) / last event of the data (``None``).
    running: list[tuple[int, int, str | None]]
    last_ts: int
    sessions: list[Session]
    #: detection_latency rows (without ``ns``), one per broker_removed line.
    removals: list[Row]
    #: broker name -> [(topic, start_ts, end_ts)]: the doc's membership intervals.
    membership: dict[str, list[tuple[str, int, int]]]
    #: counts[topic] of the route_queries line written at ``ts`` (0 when none or absent).
    queries: Callable[[str, int], int]
    #: topic -> [(broker name, read, write queues)] of every route the instance's registry
    #: answered after its last line.
    end_routes: dict[str, list[tuple[str, int, int]]]


class InstanceFacts:
    """Records, as the simulator acts, what ``InstanceLog`` holds: running intervals, broker
    sessions with their heartbeat gaps (``hb_ms`` apart is on time), removals and topic
    membership. Brokers are named by their index in ``addresses`` ((cluster, address))."""

    def __init__(self, addresses: list[tuple[str, str]], hb_ms: int) -> None:
        self.addresses = addresses
        self.hb_ms = hb_ms
        #: per broker: [start, last heartbeat, stale list, broker name, broker id, start
        #: reason] or None
        self.open: list[list[Any] | None] = [None] * len(addresses)
        self.running: list[tuple[int, int, str | None]] = []
        self.sessions: list[Session] = []
        self.removals: list[Row] = []
        self.membership: dict[str, list[tuple[str, int, int]]] = {}
        self._member_since: dict[tuple[str, str], int] = {}
        self._members: dict[str, dict[str, None]] = {}
        self._topics_of: dict[str, dict[str, None]] = {}  # broker name -> its member topics

    def open_session(
        self, b: int, ts: int, broker_name: str, broker_id: int, last_beat: int | None = None
    ) -> None:
        """A first registration at ``ts``, or (``last_beat`` given) a broker recovered at a
        warm restart at ``ts`` whose last beat before it was ``last_beat``."""
        assert self.open[b] is None
        reason = "registered" if last_beat is None else "recovered"
        beat = ts if last_beat is None else last_beat
        self.open[b] = [ts, beat, [], broker_name, broker_id, reason]

    def _stale_until(self, s: list[Any], ts: int) -> None:
        """The stale interval from ``s``'s last beat to ``ts``, if any (never before the
        session's start)."""
        lo = max(s[1] + self.hb_ms, s[0])
        if ts > lo:
            s[2].append((lo, ts))

    def heartbeat(self, b: int, ts: int) -> None:
        s = self.open[b]
        assert s is not None
        self._stale_until(s, ts)
        s[1] = ts

    def close_session(self, b: int, end: int, reason: str | None) -> None:
        """``reason`` None: still open at the end of the data (no end in the row)."""
        cluster, addr = self.addresses[b]
        s = self.open[b]
        assert s is not None
        self.open[b] = None
        self._stale_until(s, end)
        self.sessions.append(
            Session(
                cluster,
                s[3],
                s[4],
                addr,
                s[0],
                end if reason is not None else None,
                reason,
                s[2],
                s[5],
            )
        )

    def removed(self, row: Row) -> None:
        """A ``broker_removed`` line's detection_latency row (without ``ns``)."""
        self.removals.append(row)

    def join(self, broker_name: str, topic: str, ts: int) -> None:
        key = (broker_name, topic)
        if key not in self._member_since:
            self._member_since[key] = ts
            self._members.setdefault(topic, {})[broker_name] = None
            self._topics_of.setdefault(broker_name, {})[topic] = None

    def topic_removed(self, topic: str, ts: int) -> None:
        for name in list(self._members.get(topic, ())):
            self._leave((name, topic), ts)

    def group_removed(self, broker_name: str, ts: int) -> None:
        """The group's last address left (``group_gone``): it has none of its topics now."""
        for topic in list(self._topics_of.get(broker_name, ())):
            self._leave((broker_name, topic), ts)

    def end_running(self, run_start: int, end: int, reason: str | None) -> None:
        """The run ends (``reason`` None: the data ends): every open session and membership."""
        for b, s in enumerate(self.open):
            if s is not None:
                self.close_session(b, end, reason)
        for key in list(self._member_since):
            self._leave(key, end)
        self.running.append((run_start, end, reason))

    def _leave(self, key: tuple[str, str], end: int) -> None:
        start = self._member_since.pop(key)
        name, topic = key
        members = self._members[topic]
        del members[name]
        if not members:
            del self._members[topic]
        topics = self._topics_of[name]
        del topics[topic]
        if not topics:
            del self._topics_of[name]
        if end > start:
            self.membership.setdefault(name, []).append((topic, start, end))


def _day(ts: int) -> date:
    return EPOCH_DAY + timedelta(days=ts // DAY_MS)


def _split_by_day(start: int, end: int) -> list[tuple[int, int]]:
    """(day index, ms of [start, end) inside that UTC day)."""
    out = []
    while start < end:
        day = start // DAY_MS
        stop = min(end, (day + 1) * DAY_MS)
        out.append((day, stop - start))
        start = stop
    return out


# ---------------------------------------------------------------------- broker_sessions


def broker_sessions(logs: list[InstanceLog]) -> list[Row]:
    rows = []
    for log in logs:
        for s in log.sessions:
            rows.append(
                {
                    "ns": log.ns,
                    "cluster": s.cluster,
                    "broker_name": s.broker_name,
                    "broker_id": s.broker_id,
                    "broker_addr": s.broker_addr,
                    "start_ts": s.start_ts,
                    "start_reason": s.start_reason,
                    "end_ts": s.end_ts,
                    "end_reason": s.end_reason,
                    "duration_s": None if s.end_ts is None else (s.end_ts - s.start_ts) / 1000.0,
                }
            )
    rows.sort(key=lambda r: (r["ns"], r["cluster"], r["broker_addr"], r["start_ts"]))
    return rows


# ---------------------------------------------------------------------- broker_availability


def broker_availability(logs: list[InstanceLog]) -> list[Row]:
    rows = []
    for log in logs:
        covered: dict[int, int] = defaultdict(int)
        for start, end, _ in log.running:
            for day, ms in _split_by_day(start, end):
                covered[day] += ms
        by_identity: dict[tuple[str, str], list[Session]] = defaultdict(list)
        for s in log.sessions:
            by_identity[(s.cluster, s.broker_addr)].append(s)
        # (cluster, name, id, addr, day) -> [routed ms, outages, mttr gaps]
        cells: dict[tuple[str, str, int, str, int], list[Any]] = {}
        for sessions in by_identity.values():
            sessions.sort(key=lambda s: s.start_ts)
            for i, s in enumerate(sessions):
                name_key = (s.cluster, s.broker_name, s.broker_id, s.broker_addr)
                end = s.end_ts if s.end_ts is not None else log.last_ts
                for day, ms in _split_by_day(s.start_ts, end):
                    cells.setdefault((*name_key, day), [0, 0, []])[0] += ms
                if s.end_ts is not None and s.end_reason not in SERVER_END_REASONS:
                    cell = cells.setdefault((*name_key, s.end_ts // DAY_MS), [0, 0, []])
                    cell[1] += 1
                    if i + 1 < len(sessions):
                        cell[2].append((sessions[i + 1].start_ts - s.end_ts) / 1000.0)
        for (cluster, name, broker_id, addr, day), (routed, outages, gaps) in cells.items():
            if routed <= 0 and outages <= 0:
                continue
            cover = covered.get(day, 0)
            rows.append(
                {
                    "ns": log.ns,
                    "cluster": cluster,
                    "broker_name": name,
                    "broker_id": broker_id,
                    "broker_addr": addr,
                    "day": EPOCH_DAY + timedelta(days=day),
                    "routed_s": routed / 1000.0,
                    "routed_fraction": routed / cover if cover else None,
                    "outages": outages,
                    "mttr_s": sum(gaps) / len(gaps) if gaps else None,
                }
            )
    rows.sort(key=lambda r: (r["ns"], r["cluster"], r["broker_addr"], r["day"]))
    return rows


# ---------------------------------------------------------------------- detection_latency


def detection_latency(logs: list[InstanceLog]) -> list[Row]:
    rows = [{"ns": log.ns, **r} for log in logs for r in log.removals]
    rows.sort(key=lambda r: (r["ns"], r["removed_ts"], r["cluster"], r["broker_addr"]))
    return rows


# ---------------------------------------------------------------------- stale_route_exposure


def stale_route_exposure(logs: list[InstanceLog]) -> list[Row]:
    """Union of stale intervals per (ns, topic, minute), restricted to topic membership."""
    rows = []
    for log in logs:
        # topic -> minute -> [(lo, hi, addr)]
        pieces: dict[str, dict[int, list[tuple[int, int, str]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for s in log.sessions:
            if not s.stale:
                continue
            for topic, m_start, m_end in log.membership.get(s.broker_name, ()):
                for lo, hi in s.stale:
                    lo, hi = max(lo, m_start), min(hi, m_end)
                    while lo < hi:
                        minute = lo - lo % MINUTE_MS
                        stop = min(hi, minute + MINUTE_MS)
                        pieces[topic][minute].append((lo, stop, s.broker_addr))
                        lo = stop
        for topic, minutes in pieces.items():
            for minute, parts in minutes.items():
                parts.sort()
                total, cur_lo, cur_hi = 0, parts[0][0], parts[0][1]
                for lo, hi, _ in parts[1:]:
                    if lo > cur_hi:
                        total += cur_hi - cur_lo
                        cur_lo, cur_hi = lo, hi
                    elif hi > cur_hi:
                        cur_hi = hi
                total += cur_hi - cur_lo
                if total <= 0:
                    continue
                queries = log.queries(topic, minute + MINUTE_MS)
                stale_s = total / 1000.0
                rows.append(
                    {
                        "ns": log.ns,
                        "topic": topic,
                        "minute": minute,
                        "stale_brokers": len({addr for _, _, addr in parts}),
                        "queries": queries,
                        "stale_seconds": stale_s,
                        "exposed_queries": queries * stale_s / 60,
                    }
                )
    rows.sort(key=lambda r: (r["ns"], r["topic"], r["minute"]))
    return rows


# ---------------------------------------------------------------------- namesrv_divergence


def namesrv_divergence(logs: list[InstanceLog]) -> list[Row]:
    """Sweep over session starts/ends of both instances of a pair, cluster by cluster.

    All changes at one timestamp are applied before the sets are compared, so a broker that
    leaves both instances in the same millisecond opens no zero-length interval.
    """
    ordered = sorted(logs, key=lambda log: log.ns)
    clusters_of = [{s.cluster for s in log.sessions} for log in ordered]
    rows = []
    for ia, a in enumerate(ordered):
        for ib in range(ia + 1, len(ordered)):
            b = ordered[ib]
            for cluster in sorted(clusters_of[ia] & clusters_of[ib]):
                rows += _diverge(cluster, a, b)
    rows.sort(key=lambda r: (r["cluster"], r["ns_a"], r["ns_b"], r["start_ts"]))
    return rows


def _diverge(cluster: str, a: InstanceLog, b: InstanceLog) -> list[Row]:
    # (ts, side, addr or None for running, delta)
    events: list[tuple[int, int, str | None, int]] = []
    for side, log in ((0, a), (1, b)):
        for start, end, _ in log.running:
            if end > start:
                events.append((start, side, None, 1))
                events.append((end, side, None, -1))
        for s in log.sessions:
            if s.cluster != cluster:
                continue
            end = s.end_ts if s.end_ts is not None else log.last_ts
            if end > s.start_ts:
                events.append((s.start_ts, side, s.broker_addr, 1))
                events.append((end, side, s.broker_addr, -1))
    events.sort(key=lambda e: e[0])
    live: tuple[dict[str, int], dict[str, int]] = ({}, {})
    running = [0, 0]
    diff: set[str] = set()
    rows: list[Row] = []
    active = False
    start_ts = 0
    only_a: list[str] = []
    only_b: list[str] = []
    i, n = 0, len(events)
    while i < n:
        ts = events[i][0]
        while i < n and events[i][0] == ts:
            _, side, addr, delta = events[i]
            i += 1
            if addr is None:
                running[side] += delta
                continue
            counts = live[side]
            counts[addr] = counts.get(addr, 0) + delta
            if (live[0].get(addr, 0) > 0) != (live[1].get(addr, 0) > 0):
                diff.add(addr)
            else:
                diff.discard(addr)
        now_active = bool(diff) and running[0] > 0 and running[1] > 0
        if now_active:  # every address that differs at any moment of the interval
            if not active:
                start_ts = ts
                only_a, only_b = [], []
            only_a = sorted({*only_a, *(x for x in diff if live[0].get(x, 0) > 0)})
            only_b = sorted({*only_b, *(x for x in diff if live[1].get(x, 0) > 0)})
        elif active:
            rows.append(
                {
                    "cluster": cluster,
                    "ns_a": a.ns,
                    "ns_b": b.ns,
                    "start_ts": start_ts,
                    "end_ts": ts,
                    "duration_s": (ts - start_ts) / 1000.0,
                    "only_in_a": only_a,
                    "only_in_b": only_b,
                }
            )
        active = now_active
    return rows


# ---------------------------------------------------------------------- topic_distribution


def topic_distribution(logs: list[InstanceLog]) -> list[Row]:
    """The routes every instance answered at the end of the data (its newest line, one
    instant for all), which is after each instance's own last line."""
    at_ts = max((log.last_ts for log in logs), default=None)
    rows = []
    for log in logs:
        for topic, queues in log.end_routes.items():
            brokers = len({name for name, _, _ in queues})
            write = sum(w for _, _, w in queues)
            max_write = max(w for _, _, w in queues)
            mean = write / brokers
            rows.append(
                {
                    "ns": log.ns,
                    "topic": topic,
                    "brokers": brokers,
                    "read_queues": sum(r for _, r, _ in queues),
                    "write_queues": write,
                    "max_queues_per_broker": max_write,
                    "mean_queues_per_broker": mean,
                    "skew": max_write / mean if mean else 1.0,
                    "single_broker": brokers == 1,
                    "at_ts": at_ts,
                }
            )
    rows.sort(key=lambda r: (r["ns"], r["topic"]))
    return rows


def all_tables(logs: list[InstanceLog]) -> dict[str, list[Row]]:
    """Every pipeline table's expected rows, by table name."""
    return {
        "broker_sessions": broker_sessions(logs),
        "broker_availability": broker_availability(logs),
        "detection_latency": detection_latency(logs),
        "stale_route_exposure": stale_route_exposure(logs),
        "namesrv_divergence": namesrv_divergence(logs),
        "topic_distribution": topic_distribution(logs),
    }


@dataclass(slots=True)
class GroundTruth:
    """Expected rows of every pipeline table (columns exactly as the semantics doc lists)."""

    broker_sessions: list[dict[str, Any]] = field(default_factory=list)
    broker_availability: list[dict[str, Any]] = field(default_factory=list)
    detection_latency: list[dict[str, Any]] = field(default_factory=list)
    stale_route_exposure: list[dict[str, Any]] = field(default_factory=list)
    namesrv_divergence: list[dict[str, Any]] = field(default_factory=list)
    topic_distribution: list[dict[str, Any]] = field(default_factory=list)
    #: What was injected, for humans: outages, divergence windows, restarts, churn, ….
    injected: list[dict[str, Any]] = field(default_factory=list)
    #: The generate() arguments, so a test can run the pipeline with the same heartbeat.
    params: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> list[dict[str, Any]]:
        """Rows of one table by its pipeline name."""
        if name not in TABLES:
            raise KeyError(name)
        rows: list[dict[str, Any]] = getattr(self, name)
        return rows

    def to_json(self) -> bytes:
        doc = {name: getattr(self, name) for name in (*TABLES, "injected", "params")}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)

    @classmethod
    def load(cls, path: Path) -> GroundTruth:
        """Read ``ground_truth.json`` back (``day`` becomes a ``date`` again)."""
        doc = orjson.loads(Path(path).read_bytes())
        for row in doc.get("broker_availability", []):
            row["day"] = date.fromisoformat(row["day"])
        return cls(
            **{name: doc.get(name, []) for name in (*TABLES, "injected")},
            params=doc.get("params", {}),
        )
