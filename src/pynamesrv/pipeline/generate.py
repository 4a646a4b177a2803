"""Synthetic journals of a whole deployment, with the pipeline's expected answers.

``generate(out_dir, brokers=…, instances=…, hours=…, seed=…)`` simulates ``instances`` name
servers (``ns`` = ``10.0.0.<k>:9876``) and ``brokers`` broker processes (clusters of broker
groups: a master, some with a slave) for ``hours``, and writes what each name server's journal
would hold, line for line as ``namesrv.journal.Journal`` writes it (same fields, same order,
``seq`` per process, UTC hour files under ``<out_dir>/10.0.0.<k>_9876/``). It returns, and
writes to ``<out_dir>/ground_truth.json``, the exact rows every pipeline table must have
(docs/pipeline-semantics.md), computed from the simulation's own state, never by reading the
files back: the Spark job is checked against an independent computation.

Why the simulation is built the way it is:

- Each instance runs the real ``RouteInfoManager`` for every registration that may change
  something, every removal, expiry and perm change, so ``first``, ``topics_added``,
  ``topics_changed``, ``topic_configs``, ``topic_count`` and the ``topic_removed`` lines are
  exactly what a real server writes (e.g. a master that comes back while its slave kept the
  group alive re-adds no topic). Only the idle 30 s re-registration, which the registry
  answers with a ``broker_heartbeat`` without decoding the body, takes a fast path: the line is
  formatted from a byte template and the live entry's timestamp refreshed. That keeps a day of
  1,000 brokers (millions of lines) to a couple of minutes.
- Brokers are deterministic processes: a fixed phase (their start time) and a fixed network
  delay per instance (0-4 ms), so consecutive heartbeats arrive exactly ``heartbeat_s`` apart.
  Per-beat jitter would put a few-millisecond "stale" interval after half of all heartbeats
  (the doc's threshold equals the period), drowning the real exposure.
- Expiry follows the brief: a scan every ``scan_interval_s`` (10 s, per instance, first 5 s
  after start, 0-2 ms of jitter per tick) removes brokers whose last heartbeat is more than
  120 s old, so expired latencies lie in (120, 130.002] s. (HEAD's controller now wakes at the
  deadline and expires within 1 s; pass ``scan_interval_s=1.0`` to approximate it.)
- Injected behaviour, all on a per-seed schedule (``random.Random(seed)``, no wall clock):
  silent deaths (``expired`` on every instance; a few never come back), graceful stops
  (``unregister`` on every instance within a few ms), connection drops on one instance
  (``channel_closed``, or now and then ``channel_error``; the broker re-registers at its next
  heartbeat), flapping brokers (short up/down cycles, silent or network drops on all
  instances), one instance missing one broker's heartbeats for a while (a divergence
  interval), topic churn on masters (``broker_registered`` first=false; slaves follow with a
  new data version), perm wipe/add, kv put/delete, one graceful instance restart and one crash
  (no ``server_stopped``; the restarted process starts ``seq`` at 1 again, as the real writer
  does) when the run lasts at least 30 minutes.
- ``route_queries`` once a minute (and the partial window at stop, as the controller writes
  it): counts for a fixed set of queried topics, which includes the topics of the brokers that
  fail; a queried topic without a route at that moment is a miss, plus a few unknown topics.

Readings of docs/pipeline-semantics.md this ground truth follows (where the doc is silent or
could be read two ways):

1. Topic membership (stale_route_exposure) also ends when the instance's running interval
   ends (server_stopped / server_lost): the route table of a new process starts empty
   (routes-at), so membership must be re-established by a registration after a restart. The
   letter of the doc ("until the first later topic_removed") would carry it over a restart;
   the two readings differ only if a slave re-registers before its master after a restart and
   then goes stale before the master's registration, which this generator never produces.
2. ``stale_brokers`` counts addresses whose stale interval is non-empty after clipping to the
   minute *and* to the topic membership.
3. The ``route_queries`` line written at ``server_stopped`` has an off-minute ``ts``; it is
   never the ``m + 60 s`` line of any minute, so its counts are in no row.
4. Divergence: all session changes of both instances at one ``ts`` are applied before the live
   sets are compared (no zero-length rows); the running interval of an instance is
   [server_started, end) so an instance whose sessions all end at server_stopped is not
   "running and empty" at that instant.
5. ``broker_availability.day`` is a ``datetime.date`` in the returned ``GroundTruth`` and an ISO
   string (``YYYY-MM-DD``) in ``ground_truth.json`` (``GroundTruth.load`` converts it back).
6. ``seq`` is per process, like the real writer: it restarts at 1 after a restart or crash;
   order within an instance is (``ts``, ``seq``), and ``ts`` never goes back across a restart.

Files written before into the instance directories are removed first (the writer appends).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
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
from pynamesrv.namesrv.journal import (
    HEARTBEAT,
    HOUR_MS,
    CompactHeartbeat,
    HeartbeatMemory,
    compact_heartbeat,
    encode_line,
    hour_file_name,
    instance_dir_name,
)
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.routes import DEFAULT_BROKER_TIMEOUT_MS, RouteInfoManager
from pynamesrv.pipeline import TABLES, truth

__all__ = ["GroundTruth", "generate"]

MINUTE_MS: Final = 60_000
SNAPSHOT_MS: Final = 600_000  # journalSnapshotIntervalMs
FIRST_SCAN_MS: Final = 5_000
TIMEOUT_MS: Final = DEFAULT_BROKER_TIMEOUT_MS
MIN_LIFECYCLE_RUN_MS: Final = 30 * MINUTE_MS  # shorter runs get no instance restart / crash

# ctrl event kinds, in the per-instance control heap
_START, _STOP, _CRASH, _SCAN, _MINUTE, _SNAP, _UNREG, _CLOSE, _PERM, _KV = range(10)


# ====================================================================== public API


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


def generate(
    out_dir: Path,
    *,
    brokers: int,
    instances: int,
    hours: float,
    seed: int,
    start_ms: int = 1_795_000_000_000,
    heartbeat_s: float = 30.0,
    topics_per_broker: int = 5,
    scan_interval_s: float = 10.0,
    stop_at_end: bool = True,
) -> GroundTruth:
    """Write synthetic journals under ``out_dir`` and return the expected pipeline tables.

    ``stop_at_end=False`` leaves every instance running at the end of the data (no final
    ``server_stopped``): sessions still open then have a null end, as in a live deployment.
    Run the pipeline with ``--heartbeat-interval heartbeat_s`` to match the ground truth.
    """
    if brokers < 1 or instances < 1 or heartbeat_s <= 0 or topics_per_broker < 0:
        raise ValueError("need brokers, instances >= 1, heartbeat_s > 0, topics_per_broker >= 0")
    if hours * 60 < 5:
        raise ValueError("hours must cover at least 5 minutes")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    plan = _make_plan(
        rng,
        brokers=brokers,
        instances=instances,
        start_ms=start_ms,
        run_ms=round(hours * 3_600_000),
        hb_ms=round(heartbeat_s * 1000),
        topics_per_broker=topics_per_broker,
        scan_ms=max(1, round(scan_interval_s * 1000)),
        stop_at_end=stop_at_end,
    )
    logs = [
        _InstanceSim(plan, k, out_dir, random.Random(seed * 1_000_003 + k + 1)).run()
        for k in range(instances)
    ]
    result = GroundTruth(
        **truth.all_tables(logs),
        injected=plan.injected,
        params={
            "brokers": brokers,
            "instances": instances,
            "hours": hours,
            "seed": seed,
            "start_ms": start_ms,
            "heartbeat_s": heartbeat_s,
            "topics_per_broker": topics_per_broker,
            "scan_interval_s": scan_interval_s,
            "stop_at_end": stop_at_end,
        },
    )
    (out_dir / "ground_truth.json").write_bytes(result.to_json())
    return result


# ====================================================================== the plan


@dataclass(slots=True)
class _Broker:
    """One broker process and everything it will do, independent of the instances."""

    idx: int
    cluster: str
    name: str
    broker_id: int
    addr: str
    ha_addr: str
    start: int
    #: Up periods [start, end) during which it sends a registration every heartbeat; the
    #: end kind is "silent" (dies), "unregister" (graceful stop) or "run_end".
    lives: list[tuple[int, int, str]] = field(default_factory=list)
    #: (effective from send time, body id): the body id doubles as the registry's digest.
    versions: list[tuple[int, int]] = field(default_factory=list)
    delays: list[int] = field(default_factory=list)  # network delay per instance, ms
    #: per instance: [(from, to)) send times whose registrations that instance never gets
    misses: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    busy: list[tuple[int, int]] = field(default_factory=list)  # incident windows (placement)


@dataclass(slots=True)
class _Plan:
    """Everything decided up front, so that every instance simulates the same world."""

    start_ms: int
    end_ms: int
    hb_ms: int
    scan_ms: int
    stop_at_end: bool
    instances: list[str]
    brokers: list[_Broker]
    bodies: list[RegisterBrokerBody]
    #: per instance: (ts, kind, arg) control events known in advance
    ctrl: list[list[tuple[int, int, Any]]]
    #: per instance: (start, [(stop_ts, kind, restart_ts)]) kind = _STOP or _CRASH
    lifecycle: list[tuple[int, list[tuple[int, int, int]]]]
    stop_ts: list[int]
    queried: list[str]
    rates: list[list[float]]  # per instance, per queried topic: queries a minute
    injected: list[dict[str, Any]]


def _pick_write(rng: random.Random) -> int:
    """A write-queue count; uneven across brokers of a topic on purpose (skew > 1)."""
    return rng.choice((4, 8, 8, 16))


def _make_plan(
    rng: random.Random,
    *,
    brokers: int,
    instances: int,
    start_ms: int,
    run_ms: int,
    hb_ms: int,
    topics_per_broker: int,
    scan_ms: int,
    stop_at_end: bool,
) -> _Plan:
    """Decide everything that happens, before any instance is simulated."""
    end_ms = start_ms + run_ms
    ns_list = [f"10.0.0.{k + 1}:9876" for k in range(instances)]

    # ---- broker groups and clusters
    sizes: list[int] = []
    left = brokers
    while left > 0:
        size = 2 if left >= 2 and rng.random() < 0.35 else 1
        sizes.append(size)
        left -= size
    n_clusters = 1 if len(sizes) < 4 else max(2, round(len(sizes) / 50))
    cluster_names = [f"cluster-{c + 1:02d}" for c in range(n_clusters)]
    group_counts = [0] * n_clusters
    bodies: list[RegisterBrokerBody] = []
    all_brokers: list[_Broker] = []
    masters: list[_Broker] = []
    slaves_of: dict[int, list[_Broker]] = {}
    topics_of: dict[int, dict[str, TopicConfig]] = {}

    shared_per_broker = topics_per_broker - topics_per_broker // 2
    pools: list[list[tuple[str, int]]] = []
    for c in range(n_clusters):
        groups_c = sum(1 for g in range(len(sizes)) if g % n_clusters == c)
        pool_size = max(shared_per_broker, groups_c * shared_per_broker // 3)
        pools.append([(f"topic-{c + 1:02d}-{i:04d}", _pick_write(rng)) for i in range(pool_size)])

    def new_body(version: DataVersion, configs: list[TopicConfig]) -> int:
        bodies.append(RegisterBrokerBody(version, configs, []))
        return len(bodies) - 1

    for g, size in enumerate(sizes):
        c = g % n_clusters
        group_counts[c] += 1
        name = f"broker-{c + 1:02d}-{group_counts[c]:03d}"
        version = DataVersion(
            timestamp=start_ms - rng.randint(3_600_000, 200 * 86_400_000),
            counter=rng.randint(1, 40),
        )
        configs: dict[str, TopicConfig] = {}
        for i in range(topics_per_broker // 2):
            w = _pick_write(rng)
            configs[f"{name}-t{i}"] = TopicConfig(f"{name}-t{i}", w, w, 6)
        pool = pools[c]
        for topic, base in rng.sample(pool, min(shared_per_broker, len(pool))):
            w = base * 2 if rng.random() < 0.2 else base
            configs[topic] = TopicConfig(topic, w, w, 6)
        master_idx = len(all_brokers)
        for broker_id in range(size):
            j = len(all_brokers)
            host = f"10.{1 + j // 62_500}.{(j // 250) % 250}.{j % 250 + 1}"
            broker = _Broker(
                idx=j,
                cluster=cluster_names[c],
                name=name,
                broker_id=broker_id,
                addr=f"{host}:10911",
                ha_addr=f"{host}:10912",
                start=start_ms + rng.randint(2_000, 60_000),
                delays=[rng.randint(0, 4) for _ in range(instances)],
            )
            topics = list(configs.values()) if broker_id == 0 else []
            broker.versions.append((-1, new_body(version, topics)))
            all_brokers.append(broker)
            if broker_id == 0:
                masters.append(broker)
                topics_of[j] = dict(configs)
                slaves_of[j] = []
            else:
                slaves_of[master_idx].append(broker)

    injected: list[dict[str, Any]] = []
    ctrl: list[list[tuple[int, int, Any]]] = [[] for _ in range(instances)]

    # ---- instance lifecycles: a graceful restart and a crash
    lifecycle: list[tuple[int, list[tuple[int, int, int]]]] = []
    for k in range(instances):
        lifecycle.append((start_ms + 97 * k + rng.randint(0, 50), []))
    forbidden: list[tuple[int, int]] = []
    if run_ms >= MIN_LIFECYCLE_RUN_MS:
        for kind, k, lo, hi, down in (
            (_STOP, 0, 0.25, 0.4, (20_000, 90_000)),
            (_CRASH, 1 % instances, 0.55, 0.75, (30_000, 120_000)),
        ):
            at = start_ms + int(run_ms * rng.uniform(lo, hi))
            if at % MINUTE_MS == 0:
                at += 7
            back = at + rng.randint(*down)
            lifecycle[k][1].append((at, kind, back))
            forbidden.append((at - 3 * MINUTE_MS, back + 3 * MINUTE_MS))
            injected.append(
                {
                    "kind": "restart" if kind == _STOP else "crash",
                    "ns": ns_list[k],
                    "start": at,
                    "end": back,
                }
            )
    stop_ts = []
    for k in range(instances):
        ts = end_ms - 1 - 173 * k - rng.randint(0, 400)
        if ts % MINUTE_MS == 0:
            ts -= 1
        stop_ts.append(ts)

    # ---- incidents, each on one broker, windows never overlapping on a broker
    scale = brokers * run_ms / 86_400_000
    lo_t, hi_t = start_ms + 3 * MINUTE_MS, end_ms - 3 * MINUTE_MS
    margin = 2 * hb_ms + 150_000
    downs: dict[int, list[tuple[int, int | None, str]]] = {}  # broker -> (down, up, end kind)

    def place(length: int, candidates: list[_Broker]) -> tuple[_Broker, int] | None:
        if hi_t - length <= lo_t or not candidates:
            return None
        for _ in range(80):
            broker = rng.choice(candidates)
            at = rng.randint(lo_t, hi_t - length)
            end = at + length + margin
            if any(at < e and s < end for s, e in forbidden):
                continue
            if any(at - margin < e and s < end for s, e in broker.busy):
                continue
            broker.busy.append((at, end))
            return broker, at
        return None

    short = min(20 * MINUTE_MS, max(4 * MINUTE_MS, run_ms // 6))

    def count(rate: float, minimum: int) -> int:
        return max(minimum, round(rate * scale))

    # instance misses one broker: a divergence interval
    if instances >= 2:
        for _ in range(count(0.003, 1)):
            length = rng.randint(4 * MINUTE_MS, max(5 * MINUTE_MS, short))
            got = place(length, all_brokers)
            if got is None:
                continue
            broker, at = got
            k = rng.randrange(instances)
            broker.misses.setdefault(k, []).append((at, at + length))
            injected.append(
                {
                    "kind": "divergence",
                    "ns": ns_list[k],
                    "broker": broker.addr,
                    "start": at,
                    "end": at + length,
                }
            )

    # silent deaths: expired everywhere; some never come back
    n_silent = count(0.02, 2)
    for i in range(n_silent):
        permanent = n_silent >= 3 and i == 0
        down = rng.randint(160_000, max(170_000, short))
        got = place(down if not permanent else 0, all_brokers)
        if got is None:
            continue
        broker, at = got
        if permanent:
            broker.busy[-1] = (at, end_ms + margin)
        up = None if permanent else at + down
        downs.setdefault(broker.idx, []).append((at, up, "silent"))
        injected.append({"kind": "expired", "broker": broker.addr, "start": at, "end": up})

    # graceful stops: unregister everywhere within a few ms
    for _ in range(count(0.02, 1)):
        down = rng.randint(30_000, max(40_000, short // 2))
        got = place(down, all_brokers)
        if got is None:
            continue
        broker, at = got
        downs.setdefault(broker.idx, []).append((at, at + down, "unregister"))
        injected.append(
            {"kind": "unregister", "broker": broker.addr, "start": at, "end": at + down}
        )

    # connection drops on one instance
    for i in range(count(0.03, 2)):
        got = place(2 * hb_ms, all_brokers)
        if got is None:
            continue
        broker, at = got
        k = rng.randrange(instances)
        reason = "channel_error" if i % 4 == 3 else "channel_closed"
        ctrl[k].append((at, _CLOSE, (broker.idx, reason)))
        injected.append(
            {"kind": reason, "ns": ns_list[k], "broker": broker.addr, "start": at, "end": None}
        )

    # flapping: short up/down cycles
    for _ in range(count(0.005, 1)):
        cycles = []
        total = 0
        for _c in range(rng.randint(3, 6)):
            up = rng.randint(60_000, 180_000)
            silent = rng.random() < 0.5
            down = rng.randint(140_000, 240_000) if silent else 0
            cycles.append((up, down))
            total += up + down
        got = place(total, all_brokers)
        if got is None:
            continue
        broker, at = got
        t = at
        for up, down in cycles:
            t += up
            if down:
                downs.setdefault(broker.idx, []).append((t, t + down, "silent"))
            else:
                for k in range(instances):
                    ctrl[k].append((t + rng.randint(0, 5), _CLOSE, (broker.idx, "channel_closed")))
            t += down
        injected.append(
            {
                "kind": "flapping",
                "broker": broker.addr,
                "start": at,
                "end": t,
                "cycles": [{"up_ms": u, "down_ms": d} for u, d in cycles],
            }
        )

    # lives from the downs
    for broker in all_brokers:
        lives = []
        start = broker.start
        for down, up, kind in sorted(downs.get(broker.idx, []), key=lambda d: d[0]):
            lives.append((start, down, kind))
            if kind == "unregister":
                for k in range(instances):
                    ctrl[k].append((down + rng.randint(0, 5), _UNREG, broker.idx))
            if up is None:
                start = -1
                break
            start = up
        if start >= 0:
            lives.append((start, end_ms + 2 * hb_ms, "run_end"))
        broker.lives = lives

    # topic churn on masters (slaves follow with a new data version a little later)
    churn = sorted(
        (
            rng.randint(start_ms + 2 * MINUTE_MS, max(start_ms + 2 * MINUTE_MS + 1, hi_t)),
            rng.randrange(len(masters)),
        )
        for _ in range(count(0.1, 2))
    )
    serial = 0
    for at, mi in churn:
        master = masters[mi]
        configs = topics_of[master.idx]
        roll = rng.random() if configs else 0.0
        c = cluster_names.index(master.cluster)
        joinable = [t for t in pools[c] if t[0] not in configs]
        if roll < 0.4 or (roll < 0.7 and not joinable):
            serial += 1
            topic = f"{master.name}-n{serial}"
            w = _pick_write(rng)
            configs[topic] = TopicConfig(topic, w, w, 6)
            what = {"topics_added": [topic]}
        elif roll < 0.7:
            topic, base = rng.choice(joinable)
            configs[topic] = TopicConfig(topic, base, base, 6)
            what = {"topics_added": [topic]}
        else:
            topic = rng.choice(sorted(configs))
            old = configs[topic].write_queue_nums
            w = rng.choice([x for x in (4, 8, 16, 32) if x != old])
            configs[topic] = TopicConfig(topic, w, w, 6)
            what = {"topics_changed": [topic]}
        prev = bodies[master.versions[-1][1]].data_version
        version = DataVersion(timestamp=at, counter=prev.counter + 1)
        master.versions.append((at, new_body(version, list(configs.values()))))
        for slave in slaves_of[master.idx]:
            lag = rng.randint(1_000, 10_000)
            sv = bodies[slave.versions[-1][1]].data_version
            slave.versions.append(
                (at + lag, new_body(DataVersion(timestamp=at + lag, counter=sv.counter + 1), []))
            )
        injected.append({"kind": "topic_churn", "broker": master.addr, "start": at, **what})

    # perm wipe / add and kv changes, applied by an operator to every instance
    if hi_t - lo_t > 15 * MINUTE_MS:
        for _ in range(1 + round(0.001 * scale)):
            master = rng.choice(masters)
            at = rng.randint(lo_t, hi_t - 10 * MINUTE_MS)
            back = min(at + rng.randint(5 * MINUTE_MS, 30 * MINUTE_MS), hi_t)
            for k in range(instances):
                ctrl[k].append((at + rng.randint(0, 5), _PERM, (master.name, "wipe")))
                ctrl[k].append((back + rng.randint(0, 5), _PERM, (master.name, "add")))
            injected.append(
                {"kind": "perm_wipe", "broker_name": master.name, "start": at, "end": back}
            )
        kv_topic = f"{masters[0].name}-t0"
        kv_put = rng.randint(lo_t, hi_t - 10 * MINUTE_MS)
        kv_del = rng.randint(kv_put + MINUTE_MS, hi_t)
        for k in range(instances):
            for at, op in ((kv_put, "put"), (kv_del, "delete")):
                ctrl[k].append((at + rng.randint(0, 5), _KV, ("ORDER_TOPIC_CONFIG", kv_topic, op)))

    # queried topics: a sample of all, plus every topic of a failing broker
    all_topics = sorted({t for configs in topics_of.values() for t in configs})
    failing_names = {all_brokers[i].name for i in downs} | {b.name for b in all_brokers if b.misses}
    must: set[str] = set()
    for master in masters:
        if master.name in failing_names:
            must.update(topics_of[master.idx])
    rest = [t for t in all_topics if t not in must]
    sample = rest if len(rest) <= 400 else rng.sample(rest, 400)
    queried = sorted(must.union(sample))
    base = [10 ** rng.uniform(0, 2.5) for _ in queried]
    rates = [[r * rng.uniform(0.3, 1.0) for r in base] for _ in range(instances)]

    return _Plan(
        start_ms=start_ms,
        end_ms=end_ms,
        hb_ms=hb_ms,
        scan_ms=scan_ms,
        stop_at_end=stop_at_end,
        instances=ns_list,
        brokers=all_brokers,
        bodies=bodies,
        ctrl=ctrl,
        lifecycle=lifecycle,
        stop_ts=stop_ts,
        queried=queried,
        rates=rates,
        injected=sorted(injected, key=lambda e: (e["start"], e["kind"])),
    )


def _query_count(rate: float, factor: float, frac: float, i: int, j: int) -> int:
    """Route answers for queried topic ``i`` in route_queries line ``j`` (pure: the ground
    truth recomputes it instead of keeping millions of counts)."""
    return int(rate * factor * frac + ((i * 7919 + j * 104_729) % 100) / 100)


# ====================================================================== one instance


class _InstanceSim:
    """Runs one name server over the plan and writes its journal; returns its InstanceLog."""

    def __init__(self, plan: _Plan, k: int, out_dir: Path, rng: random.Random) -> None:
        self.plan = plan
        self.k = k
        self.ns = plan.instances[k]
        self.rng = rng
        self.directory = out_dir / instance_dir_name(self.ns)
        self.directory.mkdir(parents=True, exist_ok=True)
        for old in self.directory.glob("events-*.jsonl"):
            old.unlink()

    def run(self) -> truth.InstanceLog:
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
        push(start0, _START)
        for at, kind, back in changes:
            push(at, kind)
            push(back, _START)
        for ts, kind, arg in plan.ctrl[k]:
            push(ts, kind, arg)
        if plan.stop_at_end:
            push(horizon, _STOP, "final")

        # ---- journal output
        files: dict[int, IO[bytes]] = {}
        hour_end = -1
        out: Callable[[bytes], object] = lambda _line: None  # noqa: E731 - replaced at 1st line

        # heartbeats repeating what the file said take the compact form, as Journal._write
        said = HeartbeatMemory()

        def switch_file(ts: int) -> None:
            nonlocal hour_end, out, said
            said = HeartbeatMemory()
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
            beat = compact_heartbeat(ts, ns, seq, fields) if type_ == HEARTBEAT else None
            if beat is not None and said.repeats(beat):
                out(beat.line)
            else:
                out(encode_line(ts, ns, seq, type_, fields))
            last_ts = ts

        # ---- instance state (reset on every start)
        running = False
        gen = 0
        routes = RouteInfoManager()
        live_table = routes.broker_live_table
        channels: list[object] = []
        sess: list[list[Any] | None] = [None] * nb  # [start, last heartbeat, stale list]
        # per broker: its heartbeat line, full and compact, and the compact form's key
        templates: list[tuple[bytes, bytes, CompactHeartbeat]] = [_NO_TEMPLATE] * nb
        expiry: list[int] = []
        run_start = 0
        window_start = 0
        line_no = 0
        last_topics: dict[str, list[dict[str, Any]]] = {}

        # ---- ground-truth bookkeeping
        running_ivs: list[tuple[int, int, str | None]] = []
        sessions: list[truth.Session] = []
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
                truth.Session(
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
                n = _query_count(rates[i], factor, frac, i, line_no)
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
            return max(0, _query_count(rates[i], line[0], line[1], i, line[2]))

        # ---- the event loop
        scan_ms = plan.scan_ms
        scan_base = 0
        while True:
            if ctrl and (not beats or ctrl[0][0] <= beats[0][0]):
                ts, _, kind, arg = heapq.heappop(ctrl)
                if not plan.stop_at_end and ts >= horizon:
                    break
                if kind == _START:
                    running = True
                    gen += 1
                    routes = RouteInfoManager()
                    live_table = routes.broker_live_table
                    channels = [object() for _ in range(nb)]
                    templates = [_NO_TEMPLATE] * nb
                    expiry = []
                    seq = 0
                    said = HeartbeatMemory()  # a new process, even in the same hour file
                    run_start = window_start = ts
                    record(ts, "server_started", {"version": __version__, "config": config})
                    snapshot(ts)
                    scan_base = ts + min(FIRST_SCAN_MS, scan_ms)
                    push(scan_base, _SCAN, (gen, 0))
                    push(ts + SNAPSHOT_MS, _SNAP, gen)
                    push((ts // MINUTE_MS + 1) * MINUTE_MS, _MINUTE, gen)
                elif not running:
                    continue
                elif kind == _SCAN:
                    if arg[0] != gen:
                        continue
                    if expiry and expiry[0] < ts:
                        while expiry and expiry[0] < ts:
                            heapq.heappop(expiry)
                        emit(routes.expire(ts)[0], ts)
                    tick = arg[1] + 1
                    push(scan_base + tick * scan_ms + rng.randint(0, 2), _SCAN, (gen, tick))
                elif kind == _MINUTE:
                    if arg != gen:
                        continue
                    route_queries(ts)
                    push(ts + MINUTE_MS, _MINUTE, gen)
                elif kind == _SNAP:
                    if arg != gen:
                        continue
                    snapshot(ts)
                    push(ts + SNAPSHOT_MS, _SNAP, gen)
                elif kind == _STOP:
                    route_queries(ts)
                    snapshot(ts)
                    record(ts, "server_stopped", {"version": __version__, "config": {}})
                    end_running(ts, "server_stopped")
                    running = False
                    gen += 1
                    if arg == "final":
                        break
                elif kind == _CRASH:
                    end_running(last_ts, "server_lost")
                    running = False
                    gen += 1
                elif kind == _UNREG:
                    broker = brokers[arg]
                    emit(
                        routes.unregister_broker(
                            broker.cluster, broker.addr, broker.name, broker.broker_id
                        ),
                        ts,
                    )
                elif kind == _CLOSE:
                    b, reason = arg
                    emit(routes.on_channel_closed(channels[b], reason), ts)
                    channels[b] = object()
                elif kind == _PERM:
                    name, op = arg
                    if op == "wipe":
                        emit(routes.wipe_write_perm(name)[1], ts)
                    else:
                        emit(routes.add_write_perm(name)[1], ts)
                elif kind == _KV:
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
                full, short, form = templates[b]
                out((short if said.repeats(form) else full) % (ts, seq))
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
        return truth.InstanceLog(
            ns=ns,
            running=running_ivs,
            last_ts=last_ts,
            sessions=sessions,
            removals=removals,
            membership=membership,
            queries=queries,
            last_snapshot_topics=last_topics,
        )


_NO_TEMPLATE: Final = (b"", b"", CompactHeartbeat(("", ""), b"", b""))


def _heartbeat_template(
    ns_json: bytes, cluster: str, name: str, broker_id: int, addr: str, version: dict[str, int]
) -> tuple[bytes, bytes, CompactHeartbeat]:
    """``Journal``'s bytes for this broker's heartbeat, full and compact, with %d for ts and
    seq, and the compact form's key for a ``HeartbeatMemory``.

    Made from a real ``BrokerHeartbeat.to_record()`` and the journal's own encoder so that the
    fast path writes what the server writes, whatever fields the event carries."""
    payload = BrokerHeartbeat(cluster, name, broker_id, addr, version).to_record()
    payload.pop("type")
    ns = orjson.loads(ns_json)
    head = b'{"ts":0,"ns":' + ns_json + b',"seq":0,'

    def template(line: bytes) -> bytes:
        assert line.startswith(head)
        tail = line[len(head) :]
        return b'{"ts":%d,"ns":' + ns_json + b',"seq":%d,' + tail.replace(b"%", b"%%")

    form = compact_heartbeat(0, ns, 0, payload)
    assert form is not None
    return template(encode_line(0, ns, 0, HEARTBEAT, payload)), template(form.line), form


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
