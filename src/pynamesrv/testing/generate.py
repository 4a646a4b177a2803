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
  ``topics_changed``, ``topic_configs``, ``topic_count``, ``group_gone`` and the
  ``topic_removed`` lines are exactly what a real server writes (e.g. a master that comes
  back while its slave kept the group alive re-adds no topic; a group's last removal is one
  line that takes its topics). Only the idle 30 s re-registration, which the registry
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
  new data version), perm wipe/add, kv put/delete, and when the run lasts at least 30 minutes
  three instance restarts (the restarted process starts ``seq`` at 1 again, as the real writer
  does): a warm rolling restart (SIGTERM, back within 0.3-1.5 s), a warm crash (kill -9, no
  ``server_stopped``, down 5-110 s, so that some brokers may expire while it is down) and a
  cold restart (``warmRestart=false``, SIGTERM). A warm start recovers its routes the way the
  server does, with ``namesrv.recovery.recover`` over its own journal directory (the
  simulated kill -9 loses no line), journals one ``broker_recovered`` per provisional broker
  after ``server_started``, and those brokers then register again (``broker_registered``
  ``recovered: true``) or, for one broker that dies just before the rolling restart
  (``provisional_expired``), expire at their deadline.
- ``route_queries`` once a minute (and the partial window at stop, as the controller writes
  it): counts for a fixed set of queried topics, which includes the topics of the brokers that
  fail; a queried topic without a route at that moment is a miss, plus a few unknown topics.

Readings of docs/pipeline-semantics.md this ground truth follows (where the doc is silent or
could be read two ways):

1. Topic membership (stale_route_exposure) also ends when the instance's running interval
   ends (server_stopped / server_lost). A cold start begins empty; a warm start begins with
   the routes it recovered, which the truth takes from the registry right after recovery
   (the topics of its start's snapshot), as the doc says.
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

import random
from pathlib import Path

from pynamesrv.testing.plan import make_plan
from pynamesrv.testing.simulator import InstanceSimulator
from pynamesrv.testing.truth import GroundTruth, all_tables

__all__ = ["GroundTruth", "generate"]


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
    plan = make_plan(
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
        InstanceSimulator(plan, k, out_dir, random.Random(seed * 1_000_003 + k + 1)).run()
        for k in range(instances)
    ]
    result = GroundTruth(
        **all_tables(logs),
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
