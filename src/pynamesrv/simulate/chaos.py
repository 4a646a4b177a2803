"""Runs the chaos plan: at each planned moment pick a victim that is up, act, open watches.

Victims are drawn (seeded) only from brokers that have registered at least once and whose
group was not hit before, so every event is measurable and no two events blur each other: a
slave's route entry depends on its master (a group's queue data comes from the master's
registration), so a killed master would also hide its flapping slave's return. The groups of
``--partition`` options are reserved up front for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from pynamesrv.simulate.detection import ChaosEvent, DetectionTracker, Expect
from pynamesrv.simulate.fleet import SimBroker
from pynamesrv.simulate.scenario import ChaosKind, PartitionSpec, PlannedEvent, resolve_group
from pynamesrv.simulate.stats import Clock


class ChaosRunner:
    """Executes ``PlannedEvent``s on the fleet; counts what it did for the live display."""

    def __init__(
        self,
        plan: list[PlannedEvent],
        brokers: list[SimBroker],
        tracker: DetectionTracker,
        clock: Clock,
        *,
        seed: int,
        flap_interval_s: float,
        duration_s: float,
    ) -> None:
        self.plan = plan
        self.brokers = brokers
        self.tracker = tracker
        self.clock = clock
        self.flap_interval_s = flap_interval_s
        self.duration_s = duration_s
        self.rng = random.Random(seed ^ 0xC4A05)
        self.fired = 0
        self.skipped: list[dict[str, object]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._next_id = 1
        self._groups = len({b.spec.group for b in brokers})
        self._reserved: set[int] = set()
        for planned in plan:
            if planned.partition is not None:
                self._reserved.add(self._group_index(planned.partition))

    async def run(self) -> None:
        """Fire each planned event at its moment; actions run as tasks so none delays another."""
        for planned in self.plan:
            delay = planned.at_s - self.clock.now()
            if delay > 0:
                await asyncio.sleep(delay)
            self._tasks.append(asyncio.create_task(self._fire(planned)))
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------------ events

    async def _fire(self, planned: PlannedEvent) -> None:
        if planned.partition is not None:
            await self._partition(planned.partition)
            return
        victim = self._pick()
        if victim is None:
            self.skipped.append(
                {
                    "kind": planned.kind,
                    "at_s": round(self.clock.now(), 3),
                    "reason": "no broker up in a group not hit yet",
                }
            )
            return
        if planned.kind == "kill":
            self._open("kill", victim, await victim.kill(), expect_back=False)
        elif planned.kind == "stop":
            self._open("stop", victim, await victim.stop(), expect_back=False)
        elif planned.kind == "drop":
            self._open("drop", victim, await victim.drop(), expect_back=True)
        else:
            await self._flap(victim)

    def _pick(self) -> SimBroker | None:
        eligible = [
            b for b in self.brokers if b.state == "up" and b.spec.group not in self._reserved
        ]
        if not eligible:
            return None
        victim = self.rng.choice(eligible)
        self._reserved.add(victim.spec.group)
        return victim

    def _open(
        self,
        kind: ChaosKind,
        broker: SimBroker,
        at_s: float,
        *,
        expect_back: bool,
        cycle: int | None = None,
        partition_namesrv: str | None = None,
    ) -> ChaosEvent:
        self.fired += 1
        event = ChaosEvent(
            id=self._next_id,
            kind=kind,
            at_s=at_s,
            broker=broker.spec.name,
            broker_id=broker.spec.broker_id,
            addr=broker.spec.addr,
            topics=broker.spec.topics,
            last_registration_s=dict(broker.last_ok),
            expect_back=expect_back,
            cycle=cycle,
            partition_namesrv=partition_namesrv,
        )
        self._next_id += 1
        expect: dict[str, Expect] = {}
        for namesrv in broker.namesrv:
            if partition_namesrv is None or namesrv == partition_namesrv:
                expect[namesrv] = "gone"
            else:
                expect[namesrv] = "kept"
        self.tracker.open(event, expect)
        return event

    async def _flap(self, broker: SimBroker) -> None:
        """Down for an interval, up for an interval, until too little run is left to see it."""
        interval = self.flap_interval_s
        cycle = 0
        while self.clock.now() + interval + 1.0 < self.duration_s:
            event = self._open("flap", broker, await broker.crash(), expect_back=True, cycle=cycle)
            await asyncio.sleep(interval)
            self.tracker.restore(event, broker.resume())
            await asyncio.sleep(interval)
            cycle += 1

    def _group_index(self, spec: PartitionSpec) -> int:
        group = resolve_group(spec.broker, self._groups)
        if group is None:  # SimConfig.validate rejects this before the run
            raise ValueError(f"unknown broker group {spec.broker!r}")
        return group

    def _group(self, spec: PartitionSpec) -> list[SimBroker]:
        group = self._group_index(spec)
        return [b for b in self.brokers if b.spec.group == group]

    async def _partition(self, spec: PartitionSpec) -> None:
        """The group skips one name server for a while; the others must keep it all along."""
        members = self._group(spec)
        at = self.clock.now()
        events = []
        for broker in members:
            broker.unreachable.add(spec.namesrv)
            events.append(
                self._open(
                    "partition", broker, at, expect_back=True, partition_namesrv=spec.namesrv
                )
            )
        await asyncio.sleep(spec.seconds)
        healed = self.clock.now()
        for broker, event in zip(members, events, strict=True):
            broker.unreachable.discard(spec.namesrv)
            self.tracker.restore(event, healed)
