"""Detection delays as the route-query clients experience them.

For every chaos event and every name server a ``Watch`` is opened. Route answers flow in
(``on_answer``); a watch that expects the broker to vanish records the first answer, to a
query sent after the event, whose routes for one of the broker's topics no longer contain the
broker's address; one that expects it back records the first answer containing it again. A
watch that expects the broker to stay (the other name servers during a partition) records
any answer that lost it. Timestamps are answer arrival times (seconds since the start), so a
delay is an upper bound of what a client polling at the run's query rate would notice.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from pynamesrv.simulate.scenario import ChaosKind

Expect = Literal["gone", "kept"]
Phase = Literal["gone", "wait", "back", "kept", "done"]


@dataclass(slots=True, eq=False)
class ChaosEvent:
    """One chaos action on one broker address (a flap makes one event per down/up cycle)."""

    id: int
    kind: ChaosKind
    at_s: float
    broker: str
    broker_id: int
    addr: str
    topics: tuple[str, ...]
    last_registration_s: dict[str, float]
    expect_back: bool
    restore_s: float | None = None  # flap up / partition end
    cycle: int | None = None
    partition_namesrv: str | None = None
    watches: list[Watch] = field(default_factory=list)
    topic_set: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.topic_set = frozenset(self.topics)


@dataclass(slots=True, eq=False)
class Watch:
    """What one name server's clients saw of one chaos event."""

    event: ChaosEvent
    namesrv: str
    expect: Expect
    back_from_s: float | None = None
    gone_s: float | None = None
    back_s: float | None = None
    restored_s: float | None = None
    missing_s: float | None = None
    missing_answers: int = 0
    closed: bool = False

    @property
    def phase(self) -> Phase:
        if self.closed:
            return "done"
        if self.expect == "kept":
            return "kept"
        if self.gone_s is None and self.back_from_s is None:
            return "gone"
        # Restored before the clients ever saw it leave (a partition shorter than the
        # heartbeat timeout): there is no return to measure.
        if not self.event.expect_back or self.gone_s is None or self.back_s is not None:
            return "done"
        return "back" if self.back_from_s is not None else "wait"

    def to_json(self) -> dict[str, Any]:
        at = self.event.at_s

        def ms(t: float | None, base: float | None = at) -> float | None:
            return None if t is None or base is None else round((t - base) * 1000, 1)

        out: dict[str, Any] = {"namesrv": self.namesrv, "expect": self.expect}
        if self.expect == "kept":
            out["missing_ms"] = ms(self.missing_s)
            out["missing_answers"] = self.missing_answers
            return out
        last = self.event.last_registration_s.get(self.namesrv)
        out["gone_ms"] = ms(self.gone_s)
        out["gone_after_last_registration_ms"] = ms(self.gone_s, last)
        if self.event.expect_back:
            out["restored_ms"] = ms(self.restored_s)
            out["back_ms"] = ms(self.back_s)
            out["back_after_restore_ms"] = ms(self.back_s, self.restored_s)
        return out


class DetectionTracker:
    """Holds the events and routes every route answer to the watches it concerns."""

    def __init__(self, namesrv: list[str]) -> None:
        self.namesrv = namesrv
        self.events: list[ChaosEvent] = []
        self._active: dict[str, list[Watch]] = {addr: [] for addr in namesrv}
        self._probe_turn: dict[str, int] = dict.fromkeys(namesrv, 0)
        # Watches still waiting for their broker's first successful registration; kept apart
        # from the active ones because clients may see the broker back before the
        # registration's answer reaches the broker.
        self._unrestored: dict[tuple[str, str], list[Watch]] = {}

    # ------------------------------------------------------------------ events

    def open(self, event: ChaosEvent, expect: dict[str, Expect]) -> None:
        """Start watching ``event`` on the given name servers."""
        self.events.append(event)
        for namesrv, what in expect.items():
            watch = Watch(event, namesrv, what)
            event.watches.append(watch)
            self._active[namesrv].append(watch)
            if event.expect_back and what == "gone":
                self._unrestored.setdefault((event.addr, namesrv), []).append(watch)

    def restore(self, event: ChaosEvent, at_s: float) -> None:
        """The broker is back up (flap) or reachable again (partition): look for it again."""
        event.restore_s = at_s
        for watch in event.watches:
            if watch.expect == "kept":
                watch.closed = True
            else:
                watch.back_from_s = at_s
        for namesrv, active in self._active.items():
            self._active[namesrv] = [w for w in active if w.phase != "done"]

    def registered(self, addr: str, namesrv: str, sent_s: float) -> None:
        """A registration sent at ``sent_s`` succeeded: the restore moment of open events.

        The send time, not the answer time, is recorded: the name server applies the
        registration in between, so a client can see the broker back before the answer
        arrives, never before the request left.
        """
        waiting = self._unrestored.get((addr, namesrv))
        if not waiting:
            return
        remaining = []
        for watch in waiting:
            if sent_s >= watch.event.at_s:
                watch.restored_s = sent_s
            else:
                remaining.append(watch)
        self._unrestored[(addr, namesrv)] = remaining

    # ------------------------------------------------------------------ answers

    def on_answer(
        self, namesrv: str, topic: str, sent_s: float, recv_s: float, addrs: set[str]
    ) -> None:
        """One route answer (``addrs`` empty for TOPIC_NOT_EXIST)."""
        active = self._active[namesrv]
        if not active:
            return
        finished = False
        for watch in active:
            event = watch.event
            if topic not in event.topic_set or sent_s < event.at_s:
                continue
            present = event.addr in addrs
            phase = watch.phase
            if phase == "kept":
                if not present:
                    watch.missing_answers += 1
                    if watch.missing_s is None:
                        watch.missing_s = recv_s
            elif phase == "gone":
                if not present:
                    watch.gone_s = recv_s
                    if event.expect_back and event.kind == "drop":
                        watch.back_from_s = recv_s  # a dropped broker returns by itself
            elif phase == "back" and present and sent_s >= (watch.back_from_s or 0.0):
                watch.back_s = recv_s
            finished = finished or watch.phase == "done"
        if finished:
            self._active[namesrv] = [w for w in active if w.phase != "done"]

    def probe_topic(self, namesrv: str, rng: random.Random) -> str | None:
        """A topic of a broker whose event is still open here, in turn; None if none is."""
        watching = [w for w in self._active[namesrv] if w.phase in ("gone", "back", "kept")]
        if not watching:
            return None
        turn = self._probe_turn[namesrv] = self._probe_turn[namesrv] + 1
        return rng.choice(watching[turn % len(watching)].event.topics)

    def open_watches(self) -> int:
        return sum(1 for ws in self._active.values() for w in ws if w.phase != "done")
