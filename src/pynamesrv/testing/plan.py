"""The plan of a synthetic deployment: every broker, incident and admin action, decided up
front from one seed (``random.Random``, no wall clock), so that every simulated name-server
instance lives in the same world and the runs are reproducible.

What is injected and why is described in ``pynamesrv.testing.generate``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Final

from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig

MINUTE_MS: Final = 60_000
MIN_LIFECYCLE_RUN_MS: Final = 30 * MINUTE_MS  # shorter runs get no instance restart / crash
SNAPSHOT_MS: Final = 600_000  # journalSnapshotIntervalMs: a snapshot at start, then every 10 min
# A group that leaves after the last snapshot does so this far from it and from the end.
LEAVE_MARGIN_MS: Final = 10_000

# Control event kinds, in each instance's control heap (``Plan.ctrl`` and the simulator's own).
START, STOP, CRASH, SCAN, MINUTE, SNAP, UNREG, CLOSE, PERM, KV = range(10)


@dataclass(slots=True)
class Broker:
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
class Plan:
    """Everything decided up front, so that every instance simulates the same world."""

    start_ms: int
    end_ms: int
    hb_ms: int
    scan_ms: int
    stop_at_end: bool
    instances: list[str]
    brokers: list[Broker]
    bodies: list[RegisterBrokerBody]
    #: per instance: (ts, kind, arg) control events known in advance
    ctrl: list[list[tuple[int, int, Any]]]
    #: per instance: (start, [(stop_ts, kind, restart_ts, warm)]) kind = STOP or CRASH; warm:
    #: the new process recovers its routes from its journal (warmRestart), else starts empty
    lifecycle: list[tuple[int, list[tuple[int, int, int, bool]]]]
    stop_ts: list[int]
    queried: list[str]
    rates: list[list[float]]  # per instance, per queried topic: queries a minute
    injected: list[dict[str, Any]]


def _pick_write(rng: random.Random) -> int:
    """A write-queue count; uneven across brokers of a topic on purpose (skew > 1)."""
    return rng.choice((4, 8, 8, 16))


def make_plan(
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
) -> Plan:
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
    all_brokers: list[Broker] = []
    masters: list[Broker] = []
    slaves_of: dict[int, list[Broker]] = {}
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
            broker = Broker(
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

    # ---- instance lifecycles: a warm rolling restart (SIGTERM, back within 1.5 s), a warm
    # crash (kill -9; down long enough that some brokers may expire while it is down) and a
    # cold restart (warmRestart=false: the new process starts empty)
    lifecycle: list[tuple[int, list[tuple[int, int, int, bool]]]] = []
    for k in range(instances):
        lifecycle.append((start_ms + 97 * k + rng.randint(0, 50), []))
    forbidden: list[tuple[int, int]] = []
    quick_warm: list[tuple[int, int]] = []  # (instance, stop) of the fast warm restarts
    if run_ms >= MIN_LIFECYCLE_RUN_MS:
        for kind, k, lo, hi, down_range, warm in (
            (STOP, 0, 0.25, 0.4, (300, 1_500), True),
            (CRASH, 1 % instances, 0.55, 0.75, (5_000, 110_000), True),
            (STOP, 0, 0.8, 0.9, (20_000, 90_000), False),
        ):
            at = start_ms + int(run_ms * rng.uniform(lo, hi))
            if at % MINUTE_MS == 0:
                at += 7
            back = at + rng.randint(*down_range)
            lifecycle[k][1].append((at, kind, back, warm))
            forbidden.append((at - 3 * MINUTE_MS, back + 3 * MINUTE_MS))
            if warm and kind == STOP:
                quick_warm.append((k, at))
            injected.append(
                {
                    "kind": "restart" if kind == STOP else "crash",
                    "ns": ns_list[k],
                    "start": at,
                    "end": back,
                    "warm": warm,
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

    def place(length: int, candidates: list[Broker]) -> tuple[Broker, int] | None:
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

    # a broker that dies just before a fast warm restart: the restarted instance recovers it
    # (its deadline is ahead), it never registers again and expires provisional; the other
    # instances see an ordinary silent death. It comes back after its deadline.
    for k, at in quick_warm:
        for _ in range(80):
            broker = rng.choice(all_brokers)
            death = at - rng.randint(1_000, 20_000)
            down = rng.randint(160_000, 300_000)
            end = death + down + margin
            if death - margin < broker.start or any(
                death - margin < e and s < end for s, e in broker.busy
            ):
                continue
            broker.busy.append((death, end))
            downs.setdefault(broker.idx, []).append((death, death + down, "silent"))
            injected.append(
                {
                    "kind": "provisional_expired",
                    "ns": ns_list[k],
                    "broker": broker.addr,
                    "start": death,
                    "end": death + down,
                }
            )
            break

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
        ctrl[k].append((at, CLOSE, (broker.idx, reason)))
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
                    ctrl[k].append((t + rng.randint(0, 5), CLOSE, (broker.idx, "channel_closed")))
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
        for down, up, end_kind in sorted(downs.get(broker.idx, []), key=lambda d: d[0]):
            lives.append((start, down, end_kind))
            if end_kind == "unregister":
                for k in range(instances):
                    ctrl[k].append((down + rng.randint(0, 5), UNREG, broker.idx))
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
                ctrl[k].append((at + rng.randint(0, 5), PERM, (master.name, "wipe")))
                ctrl[k].append((back + rng.randint(0, 5), PERM, (master.name, "add")))
            injected.append(
                {"kind": "perm_wipe", "broker_name": master.name, "start": at, "end": back}
            )
        kv_topic = f"{masters[0].name}-t0"
        kv_put = rng.randint(lo_t, hi_t - 10 * MINUTE_MS)
        kv_del = rng.randint(kv_put + MINUTE_MS, hi_t)
        for k in range(instances):
            for at, op in ((kv_put, "put"), (kv_del, "delete")):
                ctrl[k].append((at + rng.randint(0, 5), KV, ("ORDER_TOPIC_CONFIG", kv_topic, op)))

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
    base_rates = [10 ** rng.uniform(0, 2.5) for _ in queried]
    rates = [[r * rng.uniform(0.3, 1.0) for r in base_rates] for _ in range(instances)]

    if not stop_at_end:
        _leave_after_last_snapshot(all_brokers, lifecycle, ctrl, injected, end_ms, hb_ms)

    return Plan(
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


def query_count(rate: float, factor: float, frac: float, i: int, j: int) -> int:
    """Route answers for queried topic ``i`` in route_queries line ``j`` (pure: the ground
    truth recomputes it instead of keeping millions of counts)."""
    return int(rate * factor * frac + ((i * 7919 + j * 104_729) % 100) / 100)


def _leave_after_last_snapshot(
    brokers: list[Broker],
    lifecycle: list[tuple[int, list[tuple[int, int, int, bool]]]],
    ctrl: list[list[tuple[int, int, Any]]],
    injected: list[dict[str, Any]],
    end_ms: int,
    hb_ms: int,
) -> None:
    """A data set that ends with instances running: one whole broker group unregisters
    between the last snapshot of every instance and the end, so the routes at the end of the
    data differ from every instance's last snapshot (what the pipeline once reported). The
    group is the first whose brokers are all up, untouched by any incident, from well before
    that moment to the end. Draws nothing from the plan's random stream: every other part of
    a seed's world stays as it was. Skipped when the last snapshot lies too close to the
    end."""
    last_snapshot = 0
    for start0, changes in lifecycle:
        start = max([start0, *(back for _, _, back, _ in changes)])
        last_snapshot = max(
            last_snapshot, start + (end_ms - 1 - start) // SNAPSHOT_MS * SNAPSHOT_MS
        )
    at = (last_snapshot + end_ms) // 2
    if not last_snapshot + LEAVE_MARGIN_MS <= at <= end_ms - LEAVE_MARGIN_MS:
        return
    calm_from = at - 2 * SNAPSHOT_MS

    def calm(broker: Broker) -> bool:
        return (
            bool(broker.lives)
            and broker.lives[-1][2] == "run_end"
            and broker.lives[-1][0] < calm_from
            and not broker.misses
            and all(end < calm_from for _, end in broker.busy)
        )

    groups: dict[str, list[Broker]] = {}
    for broker in brokers:
        groups.setdefault(broker.name, []).append(broker)
    members = next((g for g in groups.values() if all(calm(b) for b in g)), None)
    if members is None:
        return
    for broker in members:
        start, _, _ = broker.lives[-1]
        broker.lives[-1] = (start, at, "unregister")
        broker.busy.append((at, end_ms + 2 * hb_ms))
        for k, instance_ctrl in enumerate(ctrl):
            instance_ctrl.append((at + k, UNREG, broker.idx))
    injected.append(
        {
            "kind": "left_after_last_snapshot",
            "broker_name": members[0].name,
            "start": at,
            "end": None,
        }
    )
