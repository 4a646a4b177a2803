"""What a run tells its operator when it ends (the live view is in ``progress``).

The summary is plain JSON-ready data first (``build_summary``; ``--json`` writes it, tests
assert on it) and tables second (``summary_parts``, drawn by ``print_summary`` on a terminal
and written as plain lines by the CLI otherwise), so the two can never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from pynamesrv.simulate.chaos import ChaosRunner
from pynamesrv.simulate.detection import DetectionTracker, Watch
from pynamesrv.simulate.scenario import SimConfig
from pynamesrv.simulate.stats import SimStats, latency_summary, percentile

# Rows of the per-event detection table before it is cut (the JSON keeps them all).
_MAX_EVENT_ROWS = 40


# ---------------------------------------------------------------------- summary data


def _config_json(config: SimConfig) -> dict[str, Any]:
    out = asdict(config)
    out["partitions"] = [f"{p.broker}@{p.namesrv}:{p.seconds:g}" for p in config.partitions]
    return out


def _stat(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(values, 50),
        "max": max(values) if values else None,
    }


def _aggregate(tracker: DetectionTracker) -> list[dict[str, Any]]:
    """Per chaos kind and name server: how many were detected and how fast."""
    groups: dict[tuple[str, str, str], list[Watch]] = defaultdict(list)
    for event in tracker.events:
        for watch in event.watches:
            groups[(event.kind, watch.namesrv, watch.expect)].append(watch)
    rows = []
    for (kind, namesrv, expect), watches in groups.items():
        row: dict[str, Any] = {
            "kind": kind,
            "namesrv": namesrv,
            "expect": expect,
            "events": len(watches),
        }
        if expect == "kept":
            row["lost"] = sum(1 for w in watches if w.missing_s is not None)
        else:
            gone = [w.to_json()["gone_ms"] for w in watches if w.gone_s is not None]
            row["gone_detected"] = len(gone)
            row["gone_ms"] = _stat(gone)
            if watches[0].event.expect_back:
                back = [
                    w.to_json()["back_after_restore_ms"]
                    for w in watches
                    if w.back_s is not None and w.restored_s is not None
                ]
                row["back_detected"] = sum(1 for w in watches if w.back_s is not None)
                row["back_after_restore_ms"] = _stat(back)
        rows.append(row)
    rows.sort(key=lambda r: (r["kind"], r["namesrv"]))
    return rows


def build_summary(
    config: SimConfig,
    stats: SimStats,
    tracker: DetectionTracker,
    chaos: ChaosRunner,
    *,
    elapsed_s: float,
    brokers: int,
    topics: int,
) -> dict[str, Any]:
    """The whole result of a run as JSON-ready data (the ``--json`` file)."""
    totals = stats.totals()
    span = max(elapsed_s, 1e-9)
    events = []
    for event in tracker.events:
        item: dict[str, Any] = {
            "id": event.id,
            "kind": event.kind,
            "at_s": round(event.at_s, 3),
            "broker": event.broker,
            "broker_id": event.broker_id,
            "addr": event.addr,
            "last_registration_s": {k: round(v, 3) for k, v in event.last_registration_s.items()},
        }
        if event.cycle is not None:
            item["cycle"] = event.cycle
        if event.restore_s is not None:
            item["restore_s"] = round(event.restore_s, 3)
        if event.partition_namesrv is not None:
            item["partition_namesrv"] = event.partition_namesrv
        item["detection"] = [w.to_json() for w in event.watches]
        events.append(item)
    return {
        "config": _config_json(config),
        "elapsed_s": round(elapsed_s, 3),
        "fleet": {
            "groups": config.brokers,
            "brokers": brokers,
            "topics": topics,
            "topics_per_group": config.topics,
        },
        "registrations": {
            "ok": totals.reg_ok,
            "failed": totals.reg_failed,
            "rounds": stats.rounds,
            "per_second": round(totals.reg_ok / span, 2),
            "round_latency_ms": latency_summary(stats.register_latency_s),
            # After the first period: every topic exists, each registration is a refresh.
            "steady_round_latency_ms": latency_summary(
                [
                    latency
                    for latency, started in zip(
                        stats.register_latency_s, stats.register_started_s, strict=True
                    )
                    if started >= config.register_period_s
                ]
            ),
            "by_namesrv": {
                ns: {"ok": c.reg_ok, "failed": c.reg_failed} for ns, c in stats.per_ns.items()
            },
        },
        "route_answers": {
            "sent": stats.queries_sent,
            "ok": totals.answers_ok,
            "topic_not_exist": totals.answers_not_exist,
            "errors": totals.answers_error,
            "skipped": stats.queries_skipped,
            "per_second": round((totals.answers_ok + totals.answers_not_exist) / span, 2),
            "latency_ms": latency_summary(stats.query_latency_s),
            "by_namesrv": {
                ns: {
                    "ok": c.answers_ok,
                    "topic_not_exist": c.answers_not_exist,
                    "errors": c.answers_error,
                }
                for ns, c in stats.per_ns.items()
            },
        },
        "errors": dict(stats.errors.most_common()),
        "routed_brokers_seen": stats.routed_seen(elapsed_s),
        "simulator_loop_lag_ms": latency_summary(stats.loop_lag_s),
        "chaos": {
            "planned": len(chaos.plan),
            "fired": chaos.fired,
            "skipped": chaos.skipped,
            "events": events,
        },
        "detection": _aggregate(tracker),
    }


# ---------------------------------------------------------------------- summary tables


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _keep_addresses(tables: list[Table], width: int) -> None:
    """Never cut a name-server address: on a narrow terminal the other columns give way."""
    for table in tables:
        for column in table.columns:
            if column.header == "name server":
                column.no_wrap = True
                column.min_width = width


def print_summary(console: Console, summary: dict[str, Any]) -> None:
    """The summary as tables (same numbers as the JSON)."""
    console.print(Group(*summary_parts(summary)))


def summary_parts(summary: dict[str, Any]) -> list[Table | Text]:
    """The summary's tables and notes, for a terminal (``print_summary``) or, written as
    plain lines by the CLI, for a pipe."""
    regs = summary["registrations"]
    answers = summary["route_answers"]
    table = Table(title="Registrations and route answers", box=box.SIMPLE_HEAVY)
    for column in (
        "name server",
        "reg ok",
        "reg failed",
        "answers ok",
        "TOPIC_NOT_EXIST",
        "answer errors",
    ):
        table.add_column(column, justify="left" if column == "name server" else "right")
    for ns, reg in regs["by_namesrv"].items():
        ans = answers["by_namesrv"][ns]
        table.add_row(
            ns,
            _fmt(reg["ok"]),
            _fmt(reg["failed"]),
            _fmt(ans["ok"]),
            _fmt(ans["topic_not_exist"]),
            _fmt(ans["errors"]),
        )
    table.add_row(
        "total",
        _fmt(regs["ok"]),
        _fmt(regs["failed"]),
        _fmt(answers["ok"]),
        _fmt(answers["topic_not_exist"]),
        _fmt(answers["errors"]),
        style="bold",
    )
    rl, al = regs["round_latency_ms"], answers["latency_ms"]
    lag = summary["simulator_loop_lag_ms"]
    steady = regs["steady_round_latency_ms"]
    table.caption = (
        f"{summary['elapsed_s']:.1f}s, {summary['fleet']['brokers']} brokers, "
        f"{summary['fleet']['topics']} topics | registrations {regs['per_second']:.1f}/s, "
        f"round p50 {_fmt(rl['p50'])} ms p99 {_fmt(rl['p99'])} ms max {_fmt(rl['max'])} ms "
        f"(after the first period: p99 {_fmt(steady['p99'])} ms) | "
        f"answers {answers['per_second']:.1f}/s, p50 {_fmt(al['p50'])} ms "
        f"p99 {_fmt(al['p99'])} ms | routed brokers seen {summary['routed_brokers_seen']} | "
        f"simulator loop lag p99 {_fmt(lag['p99'])} ms max {_fmt(lag['max'])} ms"
    )
    parts: list[Table | Text] = [table]

    if summary["errors"]:
        errors = Table(title="Errors by kind", box=box.SIMPLE_HEAVY)
        errors.add_column("kind")
        errors.add_column("count", justify="right")
        for kind, count in summary["errors"].items():
            errors.add_row(kind, _fmt(count))
        parts.append(errors)

    if summary["detection"]:
        agg = Table(
            title="Detection delays seen by the route-query clients (ms)", box=box.SIMPLE_HEAVY
        )
        for column in (
            "kind",
            "name server",
            "expect",
            "events",
            "gone",
            "p50",
            "max",
            "back",
            "max ",
            "lost",
        ):
            agg.add_column(
                column, justify="left" if column in ("kind", "name server", "expect") else "right"
            )
        for row in summary["detection"]:
            gone = row.get("gone_ms", {})
            back = row.get("back_after_restore_ms", {})
            agg.add_row(
                row["kind"],
                row["namesrv"],
                row["expect"],
                _fmt(row["events"]),
                _fmt(row.get("gone_detected")),
                _fmt(gone.get("p50")),
                _fmt(gone.get("max")),
                _fmt(row.get("back_detected")),
                _fmt(back.get("max")),
                _fmt(row.get("lost")),
            )
        agg.caption = (
            "gone: events seen leaving, p50/max ms after the event | back: seen again, "
            "max ms after its re-registration was sent | lost: a name server that should "
            "have kept the broker dropped it"
        )
        parts.append(agg)

        events = Table(title="Chaos events (ms after the event)", box=box.SIMPLE_HEAVY)
        for column in ("#", "kind", "at s", "broker", "name server", "gone", "restored", "back"):
            events.add_column(
                column,
                justify="right" if column in ("#", "at s", "gone", "restored", "back") else "left",
            )
        rows = [(e, d) for e in summary["chaos"]["events"] for d in e["detection"]]
        for event, det in rows[:_MAX_EVENT_ROWS]:
            gone = (
                det.get("gone_ms")
                if det["expect"] == "gone"
                else (f"kept ({det['missing_answers']} misses)")
            )
            events.add_row(
                str(event["id"]),
                event["kind"] + (f" #{event['cycle']}" if "cycle" in event else ""),
                f"{event['at_s']:.2f}",
                f"{event['broker']}/{event['broker_id']} {event['addr']}",
                det["namesrv"],
                _fmt(gone),
                _fmt(det.get("restored_ms")),
                _fmt(det.get("back_ms")),
            )
        if len(rows) > _MAX_EVENT_ROWS:
            events.caption = f"{len(rows) - _MAX_EVENT_ROWS} more rows in the --json file"
        parts.append(events)
    for skipped in summary["chaos"]["skipped"]:
        parts.append(
            Text(
                f"chaos {skipped['kind']} at {skipped['at_s']}s skipped: {skipped['reason']}",
                style="yellow",
            )
        )
    width = max(len(ns) for ns in regs["by_namesrv"])
    _keep_addresses([p for p in parts if isinstance(p, Table)], width)
    return parts
