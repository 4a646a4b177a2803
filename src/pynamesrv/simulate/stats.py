"""Counters and latency samples of a run, and the error kinds they are grouped by.

All counting happens on the one event loop, so plain ints and Counters suffice; the live
display and the summary read them from the same loop.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field


class Clock:
    """Seconds since the start of the run: every timestamp of the report uses this base."""

    def __init__(self) -> None:
        self._origin = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._origin

    def reset(self) -> None:
        """Start counting now: building a large fleet must not eat into the run's duration."""
        self._origin = time.monotonic()


def error_kind(message: str) -> str:
    """Fold an error message into a stable kind, so thousands of errors make a short table."""
    text = message.lower()
    if "timed out" in text or "no answer" in text:
        return "timeout"
    if "refused" in text:
        return "connection refused"
    if text.startswith("connect"):
        return "connect failed"
    if "closed" in text:
        return "connection closed"
    if text.startswith("code "):
        return text.split(":", 1)[0]
    return text[:60]


def percentile(samples: list[float], p: float) -> float | None:
    """Nearest-rank percentile (None without samples); sorts a copy, called once per report."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[rank]


def latency_summary(samples_s: list[float]) -> dict[str, float | None]:
    """p50/p99/max in milliseconds, rounded for humans."""

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {
        "p50": ms(percentile(samples_s, 50)),
        "p99": ms(percentile(samples_s, 99)),
        "max": ms(max(samples_s) if samples_s else None),
    }


@dataclass(slots=True)
class PerNamesrv:
    """Registration and route-answer counts for one name server."""

    reg_ok: int = 0
    reg_failed: int = 0
    answers_ok: int = 0
    answers_not_exist: int = 0
    answers_error: int = 0


@dataclass(slots=True)
class SimStats:
    """Everything counted during a run, per name server where it matters."""

    namesrv: list[str]
    per_ns: dict[str, PerNamesrv] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    register_latency_s: list[float] = field(default_factory=list)
    register_started_s: list[float] = field(default_factory=list)  # parallel to the above
    query_latency_s: list[float] = field(default_factory=list)
    queries_sent: int = 0
    queries_skipped: int = 0
    seen_at: dict[str, float] = field(default_factory=dict)
    loop_lag_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.per_ns = {addr: PerNamesrv() for addr in self.namesrv}

    def registration(self, namesrv: str, ok: bool, error: str | None) -> None:
        counts = self.per_ns[namesrv]
        if ok:
            counts.reg_ok += 1
        else:
            counts.reg_failed += 1
            self.errors[f"register: {error_kind(error or 'unknown')}"] += 1

    def answer(self, namesrv: str, kind: str, latency_s: float) -> None:
        """``kind`` is ``ok``, ``not_exist`` or an error kind."""
        counts = self.per_ns[namesrv]
        self.query_latency_s.append(latency_s)
        if kind == "ok":
            counts.answers_ok += 1
        elif kind == "not_exist":
            counts.answers_not_exist += 1
        else:
            counts.answers_error += 1
            self.errors[f"route query: {kind}"] += 1

    def query_error(self, namesrv: str, message: str) -> None:
        """A query that got no answer at all (timeout, lost connection)."""
        self.per_ns[namesrv].answers_error += 1
        self.errors[f"route query: {error_kind(message)}"] += 1

    def totals(self) -> PerNamesrv:
        total = PerNamesrv()
        for counts in self.per_ns.values():
            total.reg_ok += counts.reg_ok
            total.reg_failed += counts.reg_failed
            total.answers_ok += counts.answers_ok
            total.answers_not_exist += counts.answers_not_exist
            total.answers_error += counts.answers_error
        return total

    def routed_seen(self, now: float, window_s: float | None = None) -> int:
        """Distinct broker addresses clients saw in routes (within the last ``window_s``)."""
        if window_s is None:
            return len(self.seen_at)
        cutoff = now - window_s
        return sum(1 for t in self.seen_at.values() if t >= cutoff)
