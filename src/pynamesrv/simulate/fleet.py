"""One simulated broker: a ``BrokerClient`` on its own registration schedule, plus chaos verbs.

The loop here replaces ``BrokerClient.start``'s own periodic task because the simulator must
(a) start each broker at its phase within the first period, so registrations are spread out,
(b) count every registration and its latency, (c) leave out name servers a partition makes
unreachable, and (d) never let a chaos action cut a registration in half: actions take the
same lock as a registration round, so a drop or a stop lands between two rounds, as the
brief's expectations ("every registration succeeded") assume.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.simulate.detection import DetectionTracker
from pynamesrv.simulate.scenario import BrokerSpec, SimConfig
from pynamesrv.simulate.stats import Clock, SimStats

BrokerState = Literal["pending", "up", "killed", "stopped", "down"]


class _CachedBrokerClient(BrokerClient):
    """A ``BrokerClient`` that encodes its unchanged registration body once.

    A real broker re-sends the same topic table every period too; encoding 100 topics as
    fastjson for each of thousands of registrations per second would make the simulator,
    not the name server, the bottleneck. The cache is keyed by the data version, which
    ``update_topics`` replaces whenever the table changes.
    """

    _cached: tuple[object, RemotingCommand] | None = None

    def registration_request(self) -> RemotingCommand:
        cached = self._cached
        if cached is None or cached[0] is not self.data_version:
            cached = (self.data_version, BrokerClient.registration_request(self))
            self._cached = cached
        return cached[1]


class SimBroker:
    """A broker process of the fleet, as the name servers see it."""

    def __init__(
        self,
        spec: BrokerSpec,
        config: SimConfig,
        stats: SimStats,
        tracker: DetectionTracker,
        clock: Clock,
    ) -> None:
        self.spec = spec
        self.namesrv = list(config.namesrv)
        self.period_s = config.register_period_s
        self.client = _CachedBrokerClient(
            namesrv_addrs=list(config.namesrv),
            cluster=spec.cluster,
            broker_name=spec.name,
            broker_id=spec.broker_id,
            broker_addr=spec.addr,
            ha_server_addr=spec.ha_addr,
            topics={
                t: TopicConfig(t, read_queue_nums=config.queues, write_queue_nums=config.queues)
                for t in spec.topics
            },
            register_period_s=config.register_period_s,
            compressed=config.compressed,
            timeout_s=config.request_timeout_s,
            heartbeat_timeout_ms=config.heartbeat_timeout_ms,
        )
        self.stats = stats
        self.tracker = tracker
        self.clock = clock
        self.state: BrokerState = "pending"
        self.unreachable: set[str] = set()
        self.last_ok: dict[str, float] = {}
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ registration loop

    def start(self, delay_s: float) -> None:
        """Begin registering after ``delay_s``, then every period."""
        self._task = asyncio.create_task(self._loop(delay_s), name=f"broker {self.spec.addr}")

    async def _loop(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        next_at = self.clock.now()
        while True:
            async with self._lock:
                await self._round()
            # No catch-up bursts after a slow round: a late broker just registers late.
            next_at = max(next_at + self.period_s, self.clock.now())
            await asyncio.sleep(next_at - self.clock.now())

    async def _round(self) -> None:
        targets = [addr for addr in self.namesrv if addr not in self.unreachable]
        if not targets:
            return
        self.client.namesrv_addrs = targets
        started = self.clock.now()
        outcomes = await self.client.register_all()
        done = self.clock.now()
        self.stats.rounds += 1
        self.stats.register_latency_s.append(done - started)
        self.stats.register_started_s.append(started)
        for outcome in outcomes:
            self.stats.registration(outcome.namesrv, outcome.ok, outcome.error)
            if outcome.ok:
                self.last_ok[outcome.namesrv] = done
                self.tracker.registered(self.spec.addr, outcome.namesrv, started)
        if self.state == "pending" and any(o.ok for o in outcomes):
            self.state = "up"

    async def _cancel_loop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ chaos verbs

    async def kill(self) -> float:
        """Stop heartbeating, keep the connections open (a hung process); returns when."""
        async with self._lock:
            await self._cancel_loop()
            self.state = "killed"
            return self.clock.now()

    async def stop(self) -> float:
        """Graceful shutdown: unregister from every reachable name server, then close."""
        async with self._lock:
            await self._cancel_loop()
            self.state = "stopped"
            at = self.clock.now()
            self.client.namesrv_addrs = [a for a in self.namesrv if a not in self.unreachable]
            await self.client.stop(unregister=True)
            return at

    async def drop(self) -> float:
        """Close the connections; the loop reconnects at the next period, as a broker does."""
        async with self._lock:
            at = self.clock.now()
            await self.client.close_connections()
            return at

    async def crash(self) -> float:
        """The process dies (connections close with it): the down half of a flap."""
        async with self._lock:
            await self._cancel_loop()
            self.state = "down"
            at = self.clock.now()
            await self.client.close_connections()
            return at

    def resume(self) -> float:
        """The process is back: it registers at once, then every period."""
        self.state = "up"
        self.start(0.0)
        return self.clock.now()

    async def shutdown(self) -> None:
        """End of the run: stop without unregistering (closing the connections suffices)."""
        await self._cancel_loop()
        await self.client.close_connections()
