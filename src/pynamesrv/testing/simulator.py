"""One simulated name-server instance: the real registry driven by the plan, its journal
written line for line as the server writes it, and the facts the ground truth is computed
from (``truth.InstanceLog``).

Why it is one long event loop: a day of 1,000 brokers is millions of heartbeats, and the hot
path (an idle re-registration answered with a ``broker_heartbeat`` from a byte template) runs
on local variables. See ``pynamesrv.testing.generate`` for the simulation's rules.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import orjson

from pynamesrv import __version__
from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRegistered,
    BrokerRemoved,
    Event,
    KvChanged,
    TopicRemoved,
)
from pynamesrv.namesrv.journal import HOUR_MS, hour_file_name, instance_dir_name
from pynamesrv.namesrv.routes import DEFAULT_BROKER_TIMEOUT_MS, RouteInfoManager
from pynamesrv.testing.plan import (
    CLOSE,
    CRASH,
    KV,
    MINUTE,
    MINUTE_MS,
    PERM,
    SCAN,
    SNAP,
    START,
    STOP,
    UNREG,
    Plan,
    query_count,
)
from pynamesrv.testing.truth import InstanceLog, Session

SNAPSHOT_MS: Final = 600_000  # journalSnapshotIntervalMs
FIRST_SCAN_MS: Final = 5_000
TIMEOUT_MS: Final = DEFAULT_BROKER_TIMEOUT_MS


class InstanceSimulator:
    """Runs one name server over the plan and writes its journal; returns its InstanceLog."""

    def __init__(self, plan: Plan, k: int, out_dir: Path, rng: random.Random) -> None:
        self.plan = plan
        self.k = k
        self.ns = plan.instances[k]
        self.rng = rng
        self.directory = out_dir / instance_dir_name(self.ns)
        self.directory.mkdir(parents=True, exist_ok=True)
        for old in self.directory.glob("events-*.jsonl"):
            old.unlink()

    def run(self) -> InstanceLog:
        plan, k, ns, rng = self.plan, self.k, self.ns, self.rng
        hb = plan.hb_ms
        brokers = plan.brokers
        nb = len(brokers)
        bodies = plan.bodies
        ns_json = orjson.dumps(ns)
        config = _server_config()
        horizon = plan.stop_ts[k] if plan.stop_at_end else plan.end_ms
        bidx = {(b.cluster, b.addr): b.idx for b in brokers}
        lkeys = [(b.cluster, b.addr) for b in brokers]
        delays = [b.delays[k] for b in brokers]
        misses = [b.misses.get(k) for b in brokers]

        # per broker progress through its lives and versions (this instance's view)
        life_i = [0] * nb
        life_end = [b.lives[0][1] if b.lives else -1 for b in brokers]
        ver_i = [0] * nb
        next_ver = [b.versions[1][0] if len(b.versions) > 1 else math.inf for b in brokers]
        cur_vid = [b.versions[0][1] for b in brokers]

        def next_send(b: int, n: int) -> int | None:
            """First send time >= n of broker b that this instance receives."""
            broker = brokers[b]
            lives = broker.lives
            li = life_i[b]
            while li < len(lives):
                start, end, _ = lives[li]
                if n < start:
                    n = start
                if n >= end:
                    li += 1
                    continue
                for lo, hi in misses[b] or ():
                    if lo <= n < hi:
                        n = start + -(-(hi - start) // hb) * hb
                        break
                else:
                    life_i[b] = li
                    life_end[b] = end
                    return n
            life_i[b] = li
            life_end[b] = -1
            return None

        beats: list[tuple[int, int]] = []
        for b in range(nb):
            if brokers[b].lives:
                first = next_send(b, brokers[b].lives[0][0])
                if first is not None:
                    beats.append((first + delays[b], b))
        heapq.heapify(beats)

        ctrl: list[tuple[int, int, int, Any]] = []
        counter = 0

        def push(ts: int, kind: int, arg: Any = None) -> None:
            nonlocal counter
            counter += 1
            heapq.heappush(ctrl, (ts, counter, kind, arg))

        start0, changes = plan.lifecycle[k]
        push(start0, START)
        for at, kind, back in changes:
            push(at, kind)
            push(back, START)
        for ts, kind, arg in plan.ctrl[k]:
            push(ts, kind, arg)
        if plan.stop_at_end:
            push(horizon, STOP, "final")

        # ---- journal output
        files: dict[int, IO[bytes]] = {}
        hour_end = -1
        out: Callable[[bytes], object] = lambda _line: None  # noqa: E731 - replaced at 1st line

        def switch_file(ts: int) -> None:
            nonlocal hour_end, out
            hour = ts // HOUR_MS
            handle = files.get(hour)
            if handle is None:
                for old in list(files):
                    files.pop(old).close()
                handle = files[hour] = open(  # noqa: SIM115 - closed on switch / at the end
                    self.directory / hour_file_name(hour * HOUR_MS), "ab", buffering=1 << 20
                )
            hour_end = (hour + 1) * HOUR_MS
            out = handle.write

        seq = 0
        last_ts = -1

        def record(ts: int, type_: str, fields: dict[str, Any]) -> None:
            nonlocal seq, last_ts
            seq += 1
            if ts >= hour_end:
                switch_file(ts)
            out(orjson.dumps({"ts": ts, "ns": ns, "seq": seq, "type": type_, **fields}) + b"\n")
            last_ts = ts

        # ---- instance state (reset on every start)
        running = False
        gen = 0
        routes = RouteInfoManager()
        live_table = routes.broker_live_table
        channels: list[object] = []
        sess: list[list[Any] | None] = [None] * nb  # [start, last heartbeat, stale list]
        templates: list[bytes] = [b""] * nb
        expiry: list[int] = []
        run_start = 0
        window_start = 0
        line_no = 0
        last_topics: dict[str, list[dict[str, Any]]] = {}

        # ---- ground-truth bookkeeping
        running_ivs: list[tuple[int, int, str | None]] = []
        sessions: list[Session] = []
        removals: list[dict[str, Any]] = []
        mem_open: dict[tuple[str, str], int] = {}
        mem_by_topic: dict[str, dict[str, None]] = {}
        membership: dict[str, list[tuple[str, int, int]]] = {}
        rq_lines: dict[int, tuple[float, float, int, frozenset[str]]] = {}
        queried = plan.queried
        q_index = {t: i for i, t in enumerate(queried)}
        rates = plan.rates[k]

        def close_session(b: int, end: int, reason: str | None) -> None:
            s = sess[b]
            assert s is not None
            sess[b] = None
            stale = s[2]
            if end > s[1] + hb:
                stale.append((s[1] + hb, end))
            broker = brokers[b]
            sessions.append(
                Session(
                    broker.cluster,
                    s[3],
                    s[4],
                    broker.addr,
                    s[0],
                    end if reason is not None else None,
                    reason,
                    stale,
                )
            )

        def close_membership(key: tuple[str, str], end: int) -> None:
            start = mem_open.pop(key)
            name, topic = key
            members = mem_by_topic[topic]
            del members[name]
            if not members:
                del mem_by_topic[topic]
            if end > start:
                membership.setdefault(name, []).append((topic, start, end))

        def end_running(end: int, reason: str | None) -> None:
            for b in range(nb):
                if sess[b] is not None:
                    close_session(b, end, reason)
            for key in list(mem_open):
                close_membership(key, end)
            running_ivs.append((run_start, end, reason))

        def heartbeat_seen(b: int, ts: int) -> None:
            s = sess[b]
            assert s is not None
            if ts - s[1] > hb:
                s[2].append((s[1] + hb, ts))
            s[1] = ts

        def emit(events: list[Event], ts: int) -> None:
            for event in events:
                payload = event.to_record()
                record(ts, payload.pop("type"), payload)
                if isinstance(event, BrokerRegistered):
                    b = bidx[(event.cluster, event.broker_addr)]
                    if event.first:
                        assert sess[b] is None
                        sess[b] = [ts, ts, [], event.broker_name, event.broker_id]
                    else:
                        heartbeat_seen(b, ts)
                    templates[b] = _heartbeat_template(
                        ns_json,
                        event.cluster,
                        event.broker_name,
                        event.broker_id,
                        event.broker_addr,
                        event.data_version,
                    )
                    for topic in (*event.topics_added, *event.topics_changed):
                        key = (event.broker_name, topic)
                        if key not in mem_open:
                            mem_open[key] = ts
                            mem_by_topic.setdefault(topic, {})[event.broker_name] = None
                elif isinstance(event, BrokerHeartbeat):
                    heartbeat_seen(bidx[(event.cluster, event.broker_addr)], ts)
                elif isinstance(event, BrokerRemoved):
                    b = bidx[(event.cluster, event.broker_addr)]
                    close_session(b, ts, event.reason)
                    last = event.last_heartbeat_ts
                    removals.append(
                        {
                            "cluster": event.cluster,
                            "broker_name": event.broker_name,
                            "broker_id": event.broker_id,
                            "broker_addr": event.broker_addr,
                            "removed_ts": ts,
                            "last_heartbeat_ts": last,
                            "latency_s": None if last is None else (ts - last) / 1000.0,
                            "reason": event.reason,
                        }
                    )
                elif isinstance(event, TopicRemoved):
                    for name in list(mem_by_topic.get(event.topic, ())):
                        close_membership((name, event.topic), ts)

        def snapshot(ts: int) -> None:
            nonlocal last_topics
            snap = routes.snapshot()
            record(ts, "snapshot", snap)
            last_topics = snap["topics"]

        def route_queries(ts: int) -> None:
            nonlocal window_start, line_no
            line_no += 1
            frac = (ts - window_start) / MINUTE_MS
            factor = round(rng.uniform(0.6, 1.4), 3)
            table = routes.topic_queue_table
            counts: dict[str, int] = {}
            misses: dict[str, int] = {}
            absent = []
            for i, topic in enumerate(queried):
                n = query_count(rates[i], factor, frac, i, line_no)
                if n <= 0:
                    continue
                if topic in table:
                    counts[topic] = n
                else:
                    misses[topic] = n
                    absent.append(topic)
            for _ in range(rng.randint(0, 3)):
                misses[f"%RETRY%group-{rng.randint(1, 40)}"] = rng.randint(1, 5)
            record(
                ts,
                "route_queries",
                {"window_ms": ts - window_start, "counts": counts, "misses": misses},
            )
            rq_lines[ts] = (factor, frac, line_no, frozenset(absent))
            window_start = ts

        def queries(topic: str, ts: int) -> int:
            line = rq_lines.get(ts)
            i = q_index.get(topic)
            if line is None or i is None or topic in line[3]:
                return 0
            return max(0, query_count(rates[i], line[0], line[1], i, line[2]))

        # ---- the event loop
        scan_ms = plan.scan_ms
        scan_base = 0
        while True:
            if ctrl and (not beats or ctrl[0][0] <= beats[0][0]):
                ts, _, kind, arg = heapq.heappop(ctrl)
                if not plan.stop_at_end and ts >= horizon:
                    break
                if kind == START:
                    running = True
                    gen += 1
                    routes = RouteInfoManager()
                    live_table = routes.broker_live_table
                    channels = [object() for _ in range(nb)]
                    templates = [b""] * nb
                    expiry = []
                    seq = 0
                    run_start = window_start = ts
                    record(ts, "server_started", {"version": __version__, "config": config})
                    snapshot(ts)
                    scan_base = ts + min(FIRST_SCAN_MS, scan_ms)
                    push(scan_base, SCAN, (gen, 0))
                    push(ts + SNAPSHOT_MS, SNAP, gen)
                    push((ts // MINUTE_MS + 1) * MINUTE_MS, MINUTE, gen)
                elif not running:
                    continue
                elif kind == SCAN:
                    if arg[0] != gen:
                        continue
                    if expiry and expiry[0] < ts:
                        while expiry and expiry[0] < ts:
                            heapq.heappop(expiry)
                        emit(routes.expire(ts)[0], ts)
                    tick = arg[1] + 1
                    push(scan_base + tick * scan_ms + rng.randint(0, 2), SCAN, (gen, tick))
                elif kind == MINUTE:
                    if arg != gen:
                        continue
                    route_queries(ts)
                    push(ts + MINUTE_MS, MINUTE, gen)
                elif kind == SNAP:
                    if arg != gen:
                        continue
                    snapshot(ts)
                    push(ts + SNAPSHOT_MS, SNAP, gen)
                elif kind == STOP:
                    route_queries(ts)
                    snapshot(ts)
                    record(ts, "server_stopped", {"version": __version__, "config": {}})
                    end_running(ts, "server_stopped")
                    running = False
                    gen += 1
                    if arg == "final":
                        break
                elif kind == CRASH:
                    end_running(last_ts, "server_lost")
                    running = False
                    gen += 1
                elif kind == UNREG:
                    broker = brokers[arg]
                    emit(
                        routes.unregister_broker(
                            broker.cluster, broker.addr, broker.name, broker.broker_id
                        ),
                        ts,
                    )
                elif kind == CLOSE:
                    b, reason = arg
                    emit(routes.on_channel_closed(channels[b], reason), ts)
                    channels[b] = object()
                elif kind == PERM:
                    name, op = arg
                    if op == "wipe":
                        emit(routes.wipe_write_perm(name)[1], ts)
                    else:
                        emit(routes.add_write_perm(name)[1], ts)
                elif kind == KV:
                    namespace, key, op = arg
                    emit([KvChanged(namespace=namespace, key=key, op=op)], ts)
                continue
            if not beats:
                break

            # ---- a broker's registration arrives (the hot path)
            ts, b = heapq.heappop(beats)
            if ts >= horizon:
                if plan.stop_at_end:
                    continue  # the final stop is still in ctrl
                break
            send = ts - delays[b]
            n = send + hb
            nxt: int | None
            nxt = n if n < life_end[b] and misses[b] is None else next_send(b, n)
            if nxt is not None:
                heapq.heappush(beats, (nxt + delays[b], b))
            if not running:
                continue
            if nxt is None or nxt + delays[b] - ts > TIMEOUT_MS:
                heapq.heappush(expiry, ts + TIMEOUT_MS)
            if send >= next_ver[b]:
                versions = brokers[b].versions
                vi = ver_i[b]
                while vi + 1 < len(versions) and versions[vi + 1][0] <= send:
                    vi += 1
                ver_i[b] = vi
                cur_vid[b] = versions[vi][1]
                next_ver[b] = versions[vi + 1][0] if vi + 1 < len(versions) else math.inf
            vid = cur_vid[b]
            live = live_table.get(lkeys[b])
            if live is not None and live.body_digest == vid:
                # an idle re-registration: the registry answers it with a broker_heartbeat
                live.last_update_ms = ts
                seq += 1
                if ts >= hour_end:
                    switch_file(ts)
                out(templates[b] % (ts, seq))
                last_ts = ts
                s = sess[b]
                if ts - s[1] > hb:  # type: ignore[index]
                    s[2].append((s[1] + hb, ts))  # type: ignore[index]
                s[1] = ts  # type: ignore[index]
                continue
            broker = brokers[b]
            body = bodies[vid]
            result = routes.register_broker(
                cluster=broker.cluster,
                broker_addr=broker.addr,
                broker_name=broker.name,
                broker_id=broker.broker_id,
                ha_server_addr=broker.ha_addr,
                body_digest=vid,
                load_body=lambda body=body: body,  # type: ignore[misc]
                channel=channels[b],
                now_ms=ts,
            )
            emit(result.events, ts)

        if running:  # still running at the end of the data
            for b in range(nb):
                if sess[b] is not None:
                    close_session(b, last_ts, None)
            for key in list(mem_open):
                close_membership(key, last_ts)
            running_ivs.append((run_start, last_ts, None))
        for handle in files.values():
            handle.close()
        return InstanceLog(
            ns=ns,
            running=running_ivs,
            last_ts=last_ts,
            sessions=sessions,
            removals=removals,
            membership=membership,
            queries=queries,
            last_snapshot_topics=last_topics,
        )


def _heartbeat_template(
    ns_json: bytes, cluster: str, name: str, broker_id: int, addr: str, version: dict[str, int]
) -> bytes:
    """``Journal.record``'s bytes for this broker's heartbeat, with %d for ts and seq.

    Made from a real ``BrokerHeartbeat.to_record()`` so that the fast path writes what the
    server writes, whatever fields the event carries."""
    payload = BrokerHeartbeat(cluster, name, broker_id, addr, version).to_record()
    head = b'{"ts":0,"ns":' + ns_json + b',"seq":0,'
    line = orjson.dumps({"ts": 0, "ns": orjson.loads(ns_json), "seq": 0, **payload})
    assert line.startswith(head)
    tail = line[len(head) :]
    return b'{"ts":%d,"ns":' + ns_json + b',"seq":%d,' + tail.replace(b"%", b"%%") + b"\n"


_CONFIG: dict[str, str] | None = None


def _server_config() -> dict[str, str]:
    """``server_started``'s config: the real key set, with machine-independent paths."""
    global _CONFIG
    if _CONFIG is None:
        config = ConfigRegistry(NamesrvConfig()).all_properties()
        fixed = {
            "rocketmqHome": "/opt/rocketmq",
            "kvConfigPath": "/opt/rocketmq/namesrv/kvConfig.json",
            "configStorePath": "/opt/rocketmq/namesrv/namesrv.properties",
            "journalDir": "/var/lib/pynamesrv/journal",
            "listenPort": "9876",
        }
        _CONFIG = {key: fixed.get(key, value) for key, value in config.items()}
    return _CONFIG
