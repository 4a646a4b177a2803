"""One run on one event loop: fleet, chaos and query clients started together, stopped together.

Everything shares a single asyncio loop on purpose: a thousand brokers are a thousand
sleeping tasks and connections, not threads, and the timestamps of chaos actions and route
answers come from the same clock without cross-thread skew.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
from collections.abc import Callable
from typing import Any

from pynamesrv.simulate.chaos import ChaosRunner
from pynamesrv.simulate.detection import DetectionTracker
from pynamesrv.simulate.fleet import SimBroker
from pynamesrv.simulate.progress import Progress, Snapshot
from pynamesrv.simulate.queries import QueryClient, ZipfTopics
from pynamesrv.simulate.report import build_summary
from pynamesrv.simulate.scenario import SimConfig, build_fleet, plan_chaos, topic_universe
from pynamesrv.simulate.stats import Clock, SimStats

ProgressSink = Callable[[Snapshot], None]


async def run_simulation(
    config: SimConfig,
    *,
    on_progress: ProgressSink | None = None,
    progress_interval_s: float = 1.0,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Run the scenario for ``config.duration_s`` and return the summary (see ``report``).

    Setting ``stop`` ends the run early (Ctrl-C) with a summary of what happened so far.
    """
    config.validate()
    clock = Clock()
    universe = topic_universe(config)
    specs = build_fleet(config, universe)
    stats = SimStats(list(config.namesrv))
    tracker = DetectionTracker(list(config.namesrv))
    brokers = [SimBroker(spec, config, stats, tracker, clock) for spec in specs]
    chaos = ChaosRunner(
        plan_chaos(config),
        brokers,
        tracker,
        clock,
        seed=config.seed,
        flap_interval_s=config.flap_interval_s,
        duration_s=config.duration_s,
    )
    # Every name server gets at least one client, so detection is measured on each.
    client_count = max(config.query_clients, len(config.namesrv))
    rng = random.Random(config.seed ^ 0x0E57)
    zipf = ZipfTopics(universe, rng)
    clients = [
        QueryClient(
            config.namesrv[i % len(config.namesrv)],
            config.query_rate / client_count,
            zipf,
            tracker,
            stats,
            clock,
            random.Random(rng.random()),
            probe_share=config.probe_share,
            timeout_s=config.request_timeout_s,
        )
        for i in range(client_count)
    ]
    progress = Progress(stats, tracker, chaos, config, len(brokers))

    # Encode every registration body now, before the clock starts: a thousand 100-topic
    # bodies cost the simulator a second of CPU it must not spend inside the first period.
    for broker in brokers:
        broker.client.registration_request()
    # The fleet (100,000 topic configs for 1,000 brokers) lives for the whole run: keep it out
    # of the cyclic collector's way, whose full passes would otherwise stall the loop and show
    # up as registration and query latency that is the simulator's, not the name server's.
    gc.collect()
    gc.freeze()
    clock.reset()
    for broker in brokers:
        broker.start(broker.spec.phase_s)
    chaos_task = asyncio.create_task(chaos.run(), name="chaos")
    query_tasks = [asyncio.create_task(c.run(config.duration_s)) for c in clients]
    query_tasks.append(asyncio.create_task(_watch_loop_lag(stats, clock)))
    try:
        stop = stop or asyncio.Event()
        while (left := config.duration_s - clock.now()) > 0 and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(progress_interval_s, left))
            if on_progress is not None:
                on_progress(progress.snapshot(clock.now()))
    finally:
        elapsed = clock.now()
        chaos_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await chaos_task
        await chaos.cancel()
        for task in query_tasks:
            task.cancel()
        await asyncio.gather(*query_tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        await asyncio.gather(*(b.shutdown() for b in brokers), return_exceptions=True)
        gc.unfreeze()
    return build_summary(
        config, stats, tracker, chaos, elapsed_s=elapsed, brokers=len(brokers), topics=len(universe)
    )


async def _watch_loop_lag(stats: SimStats, clock: Clock, tick_s: float = 0.05) -> None:
    """Sample how late the loop wakes up: a late loop means the simulator, not the name
    server, is the bottleneck, and its latencies are then partly its own."""
    while True:
        expected = clock.now() + tick_s
        await asyncio.sleep(tick_s)
        stats.loop_lag_s.append(max(0.0, clock.now() - expected))
