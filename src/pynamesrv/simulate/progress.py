"""The live view of a run: counters a few times a second, or a plain line every few seconds.

On a terminal the CLI shows ``live_table`` in a rich ``Live`` display; in a pipe or a CI log
it prints ``plain_line`` instead (no cursor tricks in a log file). Both read a ``Snapshot``
taken on the event loop, so the display never iterates structures the loop is changing.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

from pynamesrv.simulate.chaos import ChaosRunner
from pynamesrv.simulate.detection import DetectionTracker
from pynamesrv.simulate.scenario import SimConfig
from pynamesrv.simulate.stats import SimStats


@dataclass(slots=True)
class Snapshot:
    """The counters the live view shows, with rates over the last interval."""

    elapsed_s: float
    duration_s: float
    reg_ok: int
    reg_failed: int
    reg_rate: float
    answers_ok: int
    answers_not_exist: int
    answers_error: int
    answer_rate: float
    routed_seen: int
    routed_recent: int
    brokers: int
    chaos_fired: int
    chaos_planned: int
    open_watches: int


class Progress:
    """Turns the running counters into snapshots, remembering the last one for rates."""

    def __init__(
        self,
        stats: SimStats,
        tracker: DetectionTracker,
        chaos: ChaosRunner,
        config: SimConfig,
        brokers: int,
    ) -> None:
        self.stats = stats
        self.tracker = tracker
        self.chaos = chaos
        self.config = config
        self.brokers = brokers
        self._last = (0.0, 0, 0)

    def snapshot(self, now: float) -> Snapshot:
        totals = self.stats.totals()
        answers = totals.answers_ok + totals.answers_not_exist + totals.answers_error
        last_t, last_reg, last_answers = self._last
        span = max(now - last_t, 1e-9)
        self._last = (now, totals.reg_ok, answers)
        window = max(5.0, 2 * self.config.register_period_s)
        return Snapshot(
            elapsed_s=now,
            duration_s=self.config.duration_s,
            reg_ok=totals.reg_ok,
            reg_failed=totals.reg_failed,
            reg_rate=(totals.reg_ok - last_reg) / span,
            answers_ok=totals.answers_ok,
            answers_not_exist=totals.answers_not_exist,
            answers_error=totals.answers_error,
            answer_rate=(answers - last_answers) / span,
            routed_seen=self.stats.routed_seen(now),
            routed_recent=self.stats.routed_seen(now, window),
            brokers=self.brokers,
            chaos_fired=self.chaos.fired,
            chaos_planned=len(self.chaos.plan),
            open_watches=self.tracker.open_watches(),
        )


def plain_line(s: Snapshot) -> str:
    """One log line per interval when stdout is not a terminal."""
    return (
        f"[{s.elapsed_s:7.1f}s/{s.duration_s:.0f}s] "
        f"reg ok={s.reg_ok} failed={s.reg_failed} ({s.reg_rate:.0f}/s) | "
        f"answers ok={s.answers_ok} not_exist={s.answers_not_exist} "
        f"errors={s.answers_error} ({s.answer_rate:.0f}/s) | "
        f"routed brokers seen={s.routed_seen}/{s.brokers} | "
        f"chaos {s.chaos_fired} fired ({s.chaos_planned} planned), {s.open_watches} watching"
    )


def live_table(s: Snapshot) -> Table:
    """The live view: one row per concern, refreshed a few times a second."""
    table = Table(
        box=box.SIMPLE_HEAVY,
        show_header=False,
        title=(f"pynamesrv simulate  {s.elapsed_s:.1f}s / {s.duration_s:.0f}s"),
    )
    table.add_column(style="bold")
    table.add_column()
    failed = Text(str(s.reg_failed), style="red" if s.reg_failed else "green")
    table.add_row(
        "registrations", Text.assemble(f"ok {s.reg_ok}  failed ", failed, f"  ({s.reg_rate:.0f}/s)")
    )
    errors = Text(str(s.answers_error), style="red" if s.answers_error else "green")
    table.add_row(
        "route answers",
        Text.assemble(
            f"ok {s.answers_ok}  TOPIC_NOT_EXIST {s.answers_not_exist}  errors ",
            errors,
            f"  ({s.answer_rate:.0f}/s)",
        ),
    )
    table.add_row(
        "routed brokers seen", f"{s.routed_seen} of {s.brokers} ({s.routed_recent} recently)"
    )
    table.add_row(
        "chaos events",
        f"{s.chaos_fired} fired ({s.chaos_planned} planned), {s.open_watches} detections pending",
    )
    return table
