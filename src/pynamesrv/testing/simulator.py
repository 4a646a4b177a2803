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
from pathlib import Path
from typing import Any, Final

import orjson

from pynamesrv import __version__
from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRecovered,
    BrokerRegistered,
    BrokerRemoved,
    Event,
    KvChanged,
    ServerStarted,
    ServerStopped,
    TopicRemoved,
)
from pynamesrv.namesrv.journal import instance_dir_name
from pynamesrv.namesrv.recovery import recover
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
    SNAPSHOT_MS,
    START,
    STOP,
    UNREG,
    Plan,
    query_count,
)
from pynamesrv.testing.truth import InstanceFacts, InstanceLog
from pynamesrv.testing.writer import (
    NO_TEMPLATE,
    HeartbeatTemplate,
    JournalWriter,
    heartbeat_template,
)

# Far smaller than the server's pieces (8 MiB), so that generated journals hold snapshots in
# several pieces and every reader is tested on them.
SNAPSHOT_PIECE_BYTES: Final = 16 * 1024
FIRST_SCAN_MS: Final = 5_000
TIMEOUT_MS: Final = DEFAULT_BROKER_TIMEOUT_MS


class InstanceSimulator:
    """Runs one name server over the plan and writes its journal; ``run`` returns its
    InstanceLog.

    Two clocks drive it, merged in time order: the plan's control events (start, stop,
    crash, expiry scans, minute and snapshot timers, admin actions; ``_control``) and the
    brokers' registrations as this instance receives them (``_registration``)."""

    def __init__(self, plan: Plan, k: int, out_dir: Path, rng: random.Random) -> None:
        self.plan = plan
        self.k = k
        self.ns = plan.instances[k]
        self.rng = rng
        directory = out_dir / instance_dir_name(self.ns)
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("events-*.jsonl"):
            old.unlink()
        self.journal = JournalWriter(directory, self.ns)
        self._ns_json = orjson.dumps(self.ns)
        brokers = plan.brokers
        nb = len(brokers)
        self.hb = plan.hb_ms
        self.horizon = plan.stop_ts[k] if plan.stop_at_end else plan.end_ms
        self._index = {(b.cluster, b.addr): b.idx for b in brokers}
        self._keys = [(b.cluster, b.addr) for b in brokers]
        self.delays = [b.delays[k] for b in brokers]
        self.misses = [b.misses.get(k) for b in brokers]
        self.facts = InstanceFacts(self._keys, self.hb)

        # per broker progress through its lives and versions (this instance's view)
        self.life_i = [0] * nb
        self.life_end = [b.lives[0][1] if b.lives else -1 for b in brokers]
        self.ver_i = [0] * nb
        self.next_ver = [b.versions[1][0] if len(b.versions) > 1 else math.inf for b in brokers]
        self.cur_vid = [b.versions[0][1] for b in brokers]

        self.beats: list[tuple[int, int]] = []  # (arrival, broker index)
        self.ctrl: list[tuple[int, int, int, Any]] = []  # (ts, tie-break, kind, arg)
        self._counter = 0

        # the server process (reset on every start)
        self.running = False
        self.gen = 0  # process generation: timers of an older process are ignored
        self.routes = RouteInfoManager()
        self.channels: list[object] = []
        self.templates: list[HeartbeatTemplate] = [NO_TEMPLATE] * nb
        self.expiry: list[int] = []  # deadlines that may need a scan
        self.run_start = 0
        self.window_start = 0
        self.scan_base = 0
        self.line_no = 0
        # route_queries line ts -> (factor, window fraction, line number, topics missed)
        self.rq_lines: dict[int, tuple[float, float, int, frozenset[str]]] = {}
        self.q_index = {t: i for i, t in enumerate(plan.queried)}

    def run(self) -> InstanceLog:
        self._schedule()
        ctrl, beats, stop_at_end = self.ctrl, self.beats, self.plan.stop_at_end
        while True:
            if ctrl and (not beats or ctrl[0][0] <= beats[0][0]):
                ts, _, kind, arg = heapq.heappop(ctrl)
                if not stop_at_end and ts >= self.horizon:
                    break
                if self._control(ts, kind, arg):
                    break
                continue
            if not beats:
                break
            ts, b = heapq.heappop(beats)
            if ts >= self.horizon:
                if stop_at_end:
                    continue  # the final stop is still in ctrl
                break
            self._registration(ts, b)
        if self.running:  # still running at the end of the data
            self.facts.end_running(self.run_start, self.journal.last_ts, None)
        self.journal.close()
        facts = self.facts
        return InstanceLog(
            ns=self.ns,
            running=facts.running,
            last_ts=self.journal.last_ts,
            sessions=facts.sessions,
            removals=facts.removals,
            membership=facts.membership,
            queries=self._queries,
            end_routes=self._end_routes(),
        )

    def _end_routes(self) -> dict[str, list[tuple[str, int, int]]]:
        """The queue data of every route the registry answers now, after the instance's last
        line: (broker name, read, write queues) per topic. A stopped instance keeps the
        table it stopped with (what its journal's last lines describe)."""
        routes = {}
        for topic in self.routes.topic_queue_table:
            route = self.routes.pickup_route(topic)
            if route is not None:
                routes[topic] = [
                    (q["brokerName"], q["readQueueNums"], q["writeQueueNums"])
                    for q in route["queueDatas"]
                ]
        return routes

    # ------------------------------------------------------------------ scheduling

    def _schedule(self) -> None:
        """First registrations of every broker, and the plan's control events."""
        plan, k, brokers = self.plan, self.k, self.plan.brokers
        for b in range(len(brokers)):
            if brokers[b].lives:
                first = self._next_send(b, brokers[b].lives[0][0])
                if first is not None:
                    self.beats.append((first + self.delays[b], b))
        heapq.heapify(self.beats)
        start0, changes = plan.lifecycle[k]
        self._push(start0, START, False)  # the first start: nothing to recover yet
        for at, kind, back, warm in changes:
            self._push(at, kind)
            self._push(back, START, warm)
        for ts, kind, arg in plan.ctrl[k]:
            self._push(ts, kind, arg)
        if plan.stop_at_end:
            self._push(self.horizon, STOP, "final")

    def _push(self, ts: int, kind: int, arg: Any = None) -> None:
        self._counter += 1
        heapq.heappush(self.ctrl, (ts, self._counter, kind, arg))

    def _next_send(self, b: int, n: int) -> int | None:
        """First send time >= n of broker b that this instance receives."""
        hb = self.hb
        lives = self.plan.brokers[b].lives
        li = self.life_i[b]
        while li < len(lives):
            start, end, _ = lives[li]
            if n < start:
                n = start
            if n >= end:
                li += 1
                continue
            for lo, hi in self.misses[b] or ():
                if lo <= n < hi:
                    n = start + -(-(hi - start) // hb) * hb
                    break
            else:
                self.life_i[b] = li
                self.life_end[b] = end
                return n
        self.life_i[b] = li
        self.life_end[b] = -1
        return None

    # ------------------------------------------------------------------ control events

    def _control(self, ts: int, kind: int, arg: Any) -> bool:
        """Apply one control event; True when it was the final stop."""
        if kind == START:
            self._start(ts, warm=bool(arg))
        elif not self.running:
            pass
        elif kind == SCAN:
            if arg[0] == self.gen:
                if self.expiry and self.expiry[0] < ts:
                    while self.expiry and self.expiry[0] < ts:
                        heapq.heappop(self.expiry)
                    self._emit(self.routes.expire(ts)[0], ts)
                tick = arg[1] + 1
                at = self.scan_base + tick * self.plan.scan_ms + self.rng.randint(0, 2)
                self._push(at, SCAN, (self.gen, tick))
        elif kind == MINUTE:
            if arg == self.gen:
                self._route_queries(ts)
                self._push(ts + MINUTE_MS, MINUTE, self.gen)
        elif kind == SNAP:
            if arg == self.gen:
                self._snapshot(ts)
                self._push(ts + SNAPSHOT_MS, SNAP, self.gen)
        elif kind == STOP:
            self._route_queries(ts)
            self._snapshot(ts)
            self.journal.record(ts, ServerStopped.TYPE, {"version": __version__, "config": {}})
            self._end_process(ts, "server_stopped")
            return bool(arg == "final")
        elif kind == CRASH:
            self._end_process(self.journal.last_ts, "server_lost")
        elif kind == UNREG:
            broker = self.plan.brokers[arg]
            events = self.routes.unregister_broker(
                broker.cluster, broker.addr, broker.name, broker.broker_id
            )
            self._emit(events, ts)
        elif kind == CLOSE:
            b, reason = arg
            self._emit(self.routes.on_channel_closed(self.channels[b], reason), ts)
            self.channels[b] = object()
        elif kind == PERM:
            name, op = arg
            if op == "wipe":
                self._emit(self.routes.wipe_write_perm(name)[1], ts)
            else:
                self._emit(self.routes.add_write_perm(name)[1], ts)
        elif kind == KV:
            namespace, key, op = arg
            self._emit([KvChanged(namespace=namespace, key=key, op=op)], ts)
        return False

    def _start(self, ts: int, *, warm: bool) -> None:
        """A new server process: a new ``seq``, its timers, and routes empty or, ``warm``,
        recovered from its own journal as the server does (``namesrv.recovery.recover``:
        brokers past their deadline dropped, the others provisional, each journaled as a
        ``broker_recovered`` line after ``server_started``). The simulated kill -9 loses no
        line: everything written before the crash is in the files recovery reads."""
        nb = len(self.plan.brokers)
        self.running = True
        self.gen += 1
        self.routes = RouteInfoManager()
        self.channels = [object() for _ in range(nb)]
        self.templates = [NO_TEMPLATE] * nb
        self.expiry = []
        loaded: dict[str, Any] | None = None
        if warm:
            self.journal.flush()
            found = recover(self.journal.directory, self.routes, ts, self.ns)
            if found is not None:
                found.load_ms = 0  # wall-clock time: the journal stays reproducible per seed
                loaded = found.to_record()
        self.journal.new_process()
        self.run_start = self.window_start = ts
        config = _server_config()
        if not warm and self.gen > 1:
            config = {**config, "warmRestart": "false"}
        # the fields the controller writes (ServerStarted's ``damaged`` it does not)
        self.journal.record(
            ts,
            ServerStarted.TYPE,
            {"version": __version__, "config": config, "recovered": loaded},
        )
        recovered = self.routes.recovered_events()
        self._emit(list(recovered), ts)
        snap = self._snapshot(ts)
        if recovered:
            # the routes it recovered, topics included, go on from the restart
            for topic, queues in snap["topics"].items():
                for queue in queues:
                    self.facts.join(queue["broker_name"], topic, ts)
        for event in recovered:
            heapq.heappush(self.expiry, event.last_heartbeat_ts + event.timeout_ms)
        self.scan_base = ts + min(FIRST_SCAN_MS, self.plan.scan_ms)
        self._push(self.scan_base, SCAN, (self.gen, 0))
        self._push(ts + SNAPSHOT_MS, SNAP, self.gen)
        self._push((ts // MINUTE_MS + 1) * MINUTE_MS, MINUTE, self.gen)

    def _end_process(self, end: int, reason: str) -> None:
        self.facts.end_running(self.run_start, end, reason)
        self.running = False
        self.gen += 1

    # ------------------------------------------------------------------ registrations

    def _registration(self, ts: int, b: int) -> None:
        """Broker ``b``'s registration arrives at ``ts`` (the hot path)."""
        delay = self.delays[b]
        send = ts - delay
        n = send + self.hb
        nxt: int | None
        nxt = n if n < self.life_end[b] and self.misses[b] is None else self._next_send(b, n)
        if nxt is not None:
            heapq.heappush(self.beats, (nxt + delay, b))
        if not self.running:
            return
        if nxt is None or nxt + delay - ts > TIMEOUT_MS:
            heapq.heappush(self.expiry, ts + TIMEOUT_MS)
        if send >= self.next_ver[b]:
            versions = self.plan.brokers[b].versions
            vi = self.ver_i[b]
            while vi + 1 < len(versions) and versions[vi + 1][0] <= send:
                vi += 1
            self.ver_i[b] = vi
            self.cur_vid[b] = versions[vi][1]
            self.next_ver[b] = versions[vi + 1][0] if vi + 1 < len(versions) else math.inf
        vid = self.cur_vid[b]
        live = self.routes.broker_live_table.get(self._keys[b])
        if live is not None and live.body_digest == vid:
            # an idle re-registration: the registry answers it with a broker_heartbeat
            live.last_update_ms = ts
            self.journal.heartbeat(ts, self.templates[b])
            self.facts.heartbeat(b, ts)
            return
        broker = self.plan.brokers[b]
        body = self.plan.bodies[vid]
        result = self.routes.register_broker(
            cluster=broker.cluster,
            broker_addr=broker.addr,
            broker_name=broker.name,
            broker_id=broker.broker_id,
            ha_server_addr=broker.ha_addr,
            body_digest=vid,
            load_body=lambda: body,
            channel=self.channels[b],
            now_ms=ts,
        )
        self._emit(result.events, ts)

    # ------------------------------------------------------------------ journal lines

    def _emit(self, events: list[Event], ts: int) -> None:
        """Journal the registry's events and record what they mean for the ground truth."""
        facts = self.facts
        for event in events:
            payload = event.to_record()
            self.journal.record(ts, payload.pop("type"), payload)
            if isinstance(event, BrokerRegistered):
                b = self._index[(event.cluster, event.broker_addr)]
                if event.first:
                    facts.open_session(b, ts, event.broker_name, event.broker_id)
                else:
                    facts.heartbeat(b, ts)
                self.templates[b] = heartbeat_template(
                    self._ns_json,
                    event.cluster,
                    event.broker_name,
                    event.broker_id,
                    event.broker_addr,
                    event.data_version,
                )
                for topic in (*event.topics_added, *event.topics_changed):
                    facts.join(event.broker_name, topic, ts)
            elif isinstance(event, BrokerHeartbeat):
                facts.heartbeat(self._index[(event.cluster, event.broker_addr)], ts)
            elif isinstance(event, BrokerRecovered):
                facts.open_session(
                    self._index[(event.cluster, event.broker_addr)],
                    ts,
                    event.broker_name,
                    event.broker_id,
                    last_beat=event.last_heartbeat_ts,
                )
            elif isinstance(event, BrokerRemoved):
                facts.close_session(
                    self._index[(event.cluster, event.broker_addr)], ts, event.reason
                )
                if event.group_gone:  # its apply took the group's topics (no line per topic)
                    facts.group_removed(event.broker_name, ts)
                last = event.last_heartbeat_ts
                facts.removed(
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
                facts.topic_removed(event.topic, ts)

    def _snapshot(self, ts: int) -> dict[str, Any]:
        snap = self.routes.snapshot()
        self.journal.record_snapshot(ts, snap, SNAPSHOT_PIECE_BYTES)
        return snap

    def _route_queries(self, ts: int) -> None:
        """The minute's route_queries line: counts of the queried topics with a route,
        misses of those without and of a few unknown ones."""
        rng, queried, rates = self.rng, self.plan.queried, self.plan.rates[self.k]
        self.line_no += 1
        frac = (ts - self.window_start) / MINUTE_MS
        factor = round(rng.uniform(0.6, 1.4), 3)
        table = self.routes.topic_queue_table
        counts: dict[str, int] = {}
        misses: dict[str, int] = {}
        absent = []
        for i, topic in enumerate(queried):
            n = query_count(rates[i], factor, frac, i, self.line_no)
            if n <= 0:
                continue
            if topic in table:
                counts[topic] = n
            else:
                misses[topic] = n
                absent.append(topic)
        for _ in range(rng.randint(0, 3)):
            misses[f"%RETRY%group-{rng.randint(1, 40)}"] = rng.randint(1, 5)
        self.journal.record(
            ts,
            "route_queries",
            {"window_ms": ts - self.window_start, "counts": counts, "misses": misses},
        )
        self.rq_lines[ts] = (factor, frac, self.line_no, frozenset(absent))
        self.window_start = ts

    def _queries(self, topic: str, ts: int) -> int:
        """counts[topic] of the route_queries line at ``ts`` (recomputed, never stored)."""
        line = self.rq_lines.get(ts)
        i = self.q_index.get(topic)
        if line is None or i is None or topic in line[3]:
            return 0
        return max(0, query_count(self.plan.rates[self.k][i], line[0], line[1], i, line[2]))


_CONFIG: dict[str, str] | None = None


def _server_config() -> dict[str, str]:
    """``server_started``'s config: the real key set, with machine-independent paths."""
    global _CONFIG
    if _CONFIG is None:
        config = ConfigRegistry(NamesrvConfig()).all_properties()
        fixed = {
            "rocketmqHome": "/opt/rocketmq",
            "stateDir": "/var/lib/pynamesrv",
            "kvConfigPath": "/var/lib/pynamesrv/kvConfig.json",
            "configStorePath": "/etc/pynamesrv/namesrv.properties",
            "journalDir": "/var/lib/pynamesrv/journal",
            "listenPort": "9876",
        }
        _CONFIG = {key: fixed.get(key, value) for key, value in config.items()}
    return _CONFIG
