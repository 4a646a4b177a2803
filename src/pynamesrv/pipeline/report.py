"""report.html: one self-contained page of charts over the pipeline's tables.

Self-contained because it is read where the job ran, often without network: no scripts, no
CDN, no fonts; every chart is inline SVG drawn here from small aggregates. The aggregation
(top-N, histograms, percentiles) happens in Spark over the written Parquet tables; only
those small results are collected, so the report costs the same for a day of 10 brokers or
of 10,000.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

LATENCY_BINS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
SKEW_BINS = (1.0, 1.01, 1.25, 1.5, 2.0, 3.0)
TIMELINE_BROKERS = 40
TOP_TOPICS = 20
MAX_DIVERGENCE_INTERVALS = 3000
PALETTE = {
    "unregister": "#4c78a8",
    "expired": "#e45756",
    "channel_closed": "#f58518",
    "channel_error": "#b279a2",
    "channel_idle": "#72b7b2",
    "server_stopped": "#9d9d9d",
    "server_lost": "#eeca3b",
    None: "#2f7d32",
}


# ---------------------------------------------------------------------------- data


def _bin_index(column: str, edges: Sequence[float]) -> Any:
    """Index of the bin of ``column`` (last bin open-ended), as a Spark expression."""
    expr = F.lit(len(edges) - 1)
    for i in range(len(edges) - 1, 0, -1):
        expr = F.when(F.col(column) < F.lit(edges[i]), F.lit(i - 1)).otherwise(expr)
    return expr


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in frame.collect()]


def collect_report_data(
    table: Callable[[str], DataFrame],
    events: int,
    instances: int,
    data_range: tuple[int | None, int | None] = (None, None),
    bad_lines: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """Small aggregates of the tables (``table(name)`` gives one), as plain Python data.
    ``bad_lines``: journal lines skipped as malformed (torn, garbage) and as JSON without
    ts / ns / type."""

    sessions = table("broker_sessions")
    availability = table("broker_availability")
    latency = table("detection_latency")
    exposure = table("stale_route_exposure")
    divergence = table("namesrv_divergence")
    distribution = table("topic_distribution")

    # Every headline figure in one job: six one-row aggregates side by side.
    one_row = (
        sessions.agg(
            F.min("start_ts").alias("lo"),
            F.max(F.greatest("start_ts", F.coalesce("end_ts", "start_ts"))).alias("hi"),
            F.count(F.lit(1)).alias("sessions"),
            F.countDistinct("cluster", "broker_addr").alias("brokers"),
        )
        .crossJoin(
            availability.agg(
                F.sum("outages").alias("outages"),
                F.avg("routed_fraction").alias("mean_fraction"),
                F.avg("mttr_s").alias("mttr_s"),
            )
        )
        .crossJoin(
            exposure.agg(
                F.count(F.lit(1)).alias("minutes"),
                F.sum("stale_seconds").alias("stale_s"),
                F.sum("exposed_queries").alias("exposed"),
            )
        )
        .crossJoin(
            divergence.agg(
                F.count(F.lit(1)).alias("intervals"), F.sum("duration_s").alias("seconds")
            )
        )
        .crossJoin(
            distribution.agg(
                F.count(F.lit(1)).alias("topics"),
                F.sum(F.col("single_broker").cast("int")).alias("single"),
                F.max("skew").alias("max_skew"),
            )
        )
        .crossJoin(
            latency.agg(
                F.count(F.lit(1)).alias("removals"),
                F.percentile_approx("latency_s", 0.5).alias("p50"),
            )
        )
        .first()
    )
    assert one_row is not None
    first_ts, last_ts = data_range
    lo = first_ts if first_ts is not None else one_row["lo"]
    hi = last_ts if last_ts is not None else one_row["hi"]

    headline = {
        "events": events,
        "instances": instances,
        "malformed_lines": bad_lines[0],
        "invalid_lines": bad_lines[1],
        "from": lo,
        "to": hi,
        "brokers": one_row["brokers"] or 0,
        "sessions": one_row["sessions"] or 0,
        "outages": one_row["outages"] or 0,
        "mean_routed_fraction": one_row["mean_fraction"],
        "mean_mttr_s": one_row["mttr_s"],
        "removals": one_row["removals"] or 0,
        "median_detection_s": one_row["p50"],
        "stale_topic_minutes": one_row["minutes"] or 0,
        "stale_seconds": one_row["stale_s"] or 0.0,
        "exposed_queries": one_row["exposed"] or 0.0,
        "divergence_intervals": one_row["intervals"] or 0,
        "divergence_seconds": one_row["seconds"] or 0.0,
        "topics": one_row["topics"] or 0,
        "single_broker_topics": one_row["single"] or 0,
        "max_skew": one_row["max_skew"],
    }

    broker_key = ["ns", "cluster", "broker_name", "broker_addr"]
    worst = (
        availability.groupBy(*broker_key)
        .agg(F.sum("outages").alias("outages"), F.sum("routed_s").alias("routed_s"))
        .orderBy(F.col("outages").desc(), F.col("routed_s").asc(), *broker_key)
        .limit(TIMELINE_BROKERS)
    )
    timeline_sessions = _rows(
        sessions.join(F.broadcast(worst.select(*broker_key)), broker_key).select(
            *broker_key, "start_ts", "end_ts", "end_reason"
        )
    )
    latency_stats = _rows(
        latency.where(F.col("latency_s").isNotNull())
        .groupBy("reason")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.percentile_approx("latency_s", [0.5, 0.9, 0.99]).alias("p"),
            F.max("latency_s").alias("max"),
        )
        .orderBy("reason")
    )
    latency_hist = _rows(
        latency.where(F.col("latency_s").isNotNull())
        .groupBy("reason", _bin_index("latency_s", LATENCY_BINS).alias("bin"))
        .count()
    )
    top_exposure = _rows(
        exposure.groupBy("ns", "topic")
        .agg(
            F.sum("exposed_queries").alias("exposed"),
            F.sum("stale_seconds").alias("stale_s"),
            F.sum("queries").alias("queries"),
        )
        .orderBy(F.col("exposed").desc(), F.col("stale_s").desc(), "ns", "topic")
        .limit(TOP_TOPICS)
    )
    ranked = Window.partitionBy("cluster", "ns_a", "ns_b").orderBy(F.col("duration_s").desc())
    divergence_rows = _rows(
        divergence.withColumn("rank", F.row_number().over(ranked))
        .where(F.col("rank") <= MAX_DIVERGENCE_INTERVALS)
        .select("cluster", "ns_a", "ns_b", "start_ts", "end_ts", "only_in_a", "only_in_b")
    )
    skew_hist = _rows(
        distribution.groupBy("ns", _bin_index("skew", SKEW_BINS).alias("bin")).count()
    )
    top_skew = _rows(
        distribution.orderBy(F.col("skew").desc(), "ns", "topic")
        .select("ns", "topic", "skew", "brokers", "write_queues", "max_queues_per_broker")
        .limit(TOP_TOPICS)
    )
    return {
        "headline": headline,
        "timeline_sessions": timeline_sessions,
        "latency_stats": latency_stats,
        "latency_hist": latency_hist,
        "top_exposure": top_exposure,
        "divergence": divergence_rows,
        "skew_hist": skew_hist,
        "top_skew": top_skew,
    }


# ---------------------------------------------------------------------------- SVG


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _tick(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%m-%d %H:%M")


def _number(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def svg_timeline(
    rows: Sequence[tuple[str, Sequence[tuple[int, int, str, str]]]],
    lo: int,
    hi: int,
    *,
    width: int = 960,
    label_width: int = 300,
    row_height: int = 14,
) -> str:
    """Horizontal bars on a shared time axis: one row per label, (start, end, color, title)."""
    span = max(hi - lo, 1)
    plot = width - label_width - 10
    height = row_height * len(rows) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="chart">'
    ]
    for i, (label, bars) in enumerate(rows):
        y = i * row_height
        parts.append(
            f'<text x="{label_width - 6}" y="{y + row_height - 3}" text-anchor="end">'
            f"{_esc(label)}</text>"
        )
        parts.append(
            f'<rect x="{label_width}" y="{y + 2}" width="{plot}" height="{row_height - 4}" '
            'fill="#f0f0f0"/>'
        )
        for start, end, color, title in bars:
            x0 = label_width + plot * (max(start, lo) - lo) / span
            x1 = label_width + plot * (min(end, hi) - lo) / span
            parts.append(
                f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 0.8):.1f}" '
                f'height="{row_height - 4}" fill="{color}"><title>{_esc(title)}</title></rect>'
            )
    axis_y = row_height * len(rows) + 14
    for k in range(5):
        t = lo + span * k // 4
        x = label_width + plot * k / 4
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        parts.append(
            f'<text x="{x:.1f}" y="{axis_y}" text-anchor="{anchor}" class="axis">'
            f"{_esc(_tick(t))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def svg_hbars(
    items: Sequence[tuple[str, float, str]],
    *,
    width: int = 960,
    label_width: int = 360,
    row_height: int = 18,
    color: str = "#e45756",
) -> str:
    """A horizontal bar chart: (label, value, title) per row, scaled to the largest value."""
    top = max((v for _, v, _ in items), default=0.0) or 1.0
    plot = width - label_width - 90
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{row_height * len(items) + 4}" class="chart">'
    ]
    for i, (label, value, title) in enumerate(items):
        y = i * row_height
        w = plot * value / top
        parts.append(
            f'<text x="{label_width - 6}" y="{y + row_height - 5}" text-anchor="end">'
            f"{_esc(label)}</text>"
            f'<rect x="{label_width}" y="{y + 3}" width="{max(w, 0.8):.1f}" '
            f'height="{row_height - 6}" fill="{color}"><title>{_esc(title)}</title></rect>'
            f'<text x="{label_width + w + 4:.1f}" y="{y + row_height - 5}">'
            f"{_esc(_number(value))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def svg_histogram(
    series: dict[str, list[int]],
    bin_labels: Sequence[str],
    *,
    width: int = 960,
    height: int = 220,
) -> str:
    """Grouped vertical bars: one group per bin, one bar per series, log-free counts."""
    names = sorted(series)
    top = max((c for counts in series.values() for c in counts), default=0) or 1
    left, bottom, legend = 50, 40, 16 * max(len(names), 1)
    plot_w, plot_h = width - left - 10, height - bottom - 10
    group_w = plot_w / max(len(bin_labels), 1)
    bar_w = group_w * 0.8 / max(len(names), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height + legend}" class="chart">'
        f'<text x="{left - 6}" y="16" text-anchor="end" class="axis">{top:,}</text>'
        f'<line x1="{left}" y1="{10 + plot_h}" x2="{left + plot_w}" y2="{10 + plot_h}" '
        'stroke="#999"/>'
    ]
    for b, label in enumerate(bin_labels):
        gx = left + b * group_w
        for s, name in enumerate(names):
            count = series[name][b]
            h = plot_h * count / top
            parts.append(
                f'<rect x="{gx + group_w * 0.1 + s * bar_w:.1f}" y="{10 + plot_h - h:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}" fill="{_color(name, s)}">'
                f"<title>{_esc(name)} {_esc(label)}: {count:,}</title></rect>"
            )
        parts.append(
            f'<text x="{gx + group_w / 2:.1f}" y="{10 + plot_h + 16}" text-anchor="middle" '
            f'class="axis">{_esc(label)}</text>'
        )
    for s, name in enumerate(names):
        y = height + 16 * s
        parts.append(
            f'<rect x="{left}" y="{y - 10}" width="10" height="10" fill="{_color(name, s)}"/>'
            f'<text x="{left + 16}" y="{y}">{_esc(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


_SERIES_COLORS = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#b279a2", "#9d755d")


def _color(name: str | None, index: int) -> str:
    return PALETTE.get(name) or _SERIES_COLORS[index % len(_SERIES_COLORS)]


def _bin_labels(edges: Sequence[float], unit: str) -> list[str]:
    labels = [f"{edges[i]:g}–{edges[i + 1]:g}{unit}" for i in range(len(edges) - 1)]
    return [*labels, f"≥{edges[-1]:g}{unit}"]


# ---------------------------------------------------------------------------- page


def render_report(data: dict[str, Any]) -> str:
    """The whole page as one string."""
    head = data["headline"]
    lo, hi = head["from"], head["to"]
    sections = [
        _headline(head),
        _availability(data["timeline_sessions"], lo, hi),
        _latency(data["latency_stats"], data["latency_hist"]),
        _exposure(data["top_exposure"]),
        _divergence(data["divergence"], lo, hi),
        _skew(data["skew_hist"], data["top_skew"]),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>pynamesrv pipeline report</title><style>"
        "body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}"
        "h1{font-size:22px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd}"
        ".cards{display:flex;flex-wrap:wrap;gap:10px}"
        ".card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:140px}"
        ".card b{display:block;font-size:20px}.chart text{font-size:11px}"
        ".chart .axis{fill:#666}table{border-collapse:collapse}"
        "td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}"
        "td:first-child,th:first-child{text-align:left}.note{color:#666}"
        "</style></head><body>"
        f'<h1>pynamesrv pipeline report</h1><p class="note">{_esc(_when(lo))} – '
        f"{_esc(_when(hi))} UTC</p>" + "".join(sections) + "</body></html>\n"
    )


def _headline(head: dict[str, Any]) -> str:
    fraction = head["mean_routed_fraction"]
    cards = [
        ("events", _number(head["events"])),
        ("instances", _number(head["instances"])),
        (
            "skipped lines",
            f"{_number(head.get('malformed_lines', 0))} malformed, "
            f"{_number(head.get('invalid_lines', 0))} without ts/ns/type",
        ),
        ("brokers", _number(head["brokers"])),
        ("sessions", _number(head["sessions"])),
        ("outages", _number(head["outages"])),
        ("mean routed fraction", "-" if fraction is None else f"{fraction:.4%}"),
        ("mean time to recover", f"{_number(head['mean_mttr_s'])} s"),
        ("removals", _number(head["removals"])),
        ("median detection", f"{_number(head['median_detection_s'])} s"),
        ("stale topic-minutes", _number(head["stale_topic_minutes"])),
        ("exposed queries", _number(head["exposed_queries"], 1)),
        (
            "divergence",
            f"{head['divergence_intervals']:,} / {_number(head['divergence_seconds'], 1)} s",
        ),
        ("topics", _number(head["topics"])),
        ("single-broker topics", _number(head["single_broker_topics"])),
        ("max queue skew", _number(head["max_skew"])),
    ]
    body = "".join(f'<div class="card">{_esc(k)}<b>{_esc(v)}</b></div>' for k, v in cards)
    return f'<h2>Headline</h2><div class="cards">{body}</div>'


def _availability(sessions: list[dict[str, Any]], lo: int | None, hi: int | None) -> str:
    title = "<h2>Availability timeline per broker</h2>"
    if not sessions or lo is None or hi is None:
        return title + '<p class="note">No broker sessions.</p>'
    by_broker: dict[tuple[str, ...], list[tuple[int, int, str, str]]] = {}
    for s in sessions:
        label = (s["cluster"], s["broker_name"], s["broker_addr"], s["ns"])
        end = s["end_ts"] if s["end_ts"] is not None else hi
        reason = s["end_reason"]
        by_broker.setdefault(label, []).append(
            (
                s["start_ts"],
                end,
                _color(reason, 0),
                f"{_when(s['start_ts'])} – {_when(s['end_ts'])} ({reason or 'open'})",
            )
        )
    rows = [(f"{n} {a} @{ns}", bars) for (_, n, a, ns), bars in sorted(by_broker.items())]
    legend = " ".join(
        f'<span style="color:{c}">■</span> {_esc(k or "open")}' for k, c in PALETTE.items()
    )
    return (
        title
        + f'<p class="note">Routed sessions of the {len(rows)} brokers with the most outages; '
        f"colour = how the session ended. {legend}</p>" + svg_timeline(rows, lo, hi)
    )


def _latency(stats: list[dict[str, Any]], hist: list[dict[str, Any]]) -> str:
    title = "<h2>Detection latency by reason</h2>"
    if not stats:
        return title + '<p class="note">No removals with a last heartbeat.</p>'
    labels = _bin_labels(LATENCY_BINS, " s")
    series: dict[str, list[int]] = {s["reason"]: [0] * len(labels) for s in stats}
    for h in hist:
        series.setdefault(h["reason"], [0] * len(labels))[int(h["bin"])] += int(h["count"])
    table = "".join(
        f"<tr><td>{_esc(s['reason'])}</td><td>{s['n']:,}</td>"
        + "".join(f"<td>{_number(p)}</td>" for p in (s["p"] or [None] * 3))
        + f"<td>{_number(s['max'])}</td></tr>"
        for s in stats
    )
    return (
        title
        + svg_histogram(series, labels)
        + "<table><tr><th>reason</th><th>removals</th><th>p50 s</th><th>p90 s</th>"
        + f"<th>p99 s</th><th>max s</th></tr>{table}</table>"
    )


def _exposure(top: list[dict[str, Any]]) -> str:
    title = "<h2>Stale-route exposure by topic</h2>"
    if not top:
        return title + '<p class="note">No route listed a silent broker.</p>'
    items = [
        (
            f"{t['topic']} @{t['ns']}",
            float(t["exposed"] or 0.0),
            f"{t['stale_s']:.1f} stale s, {t['queries']:,} queries",
        )
        for t in top
    ]
    return (
        title + f'<p class="note">Top {len(items)} topics by exposed queries (queries × stale '
        "seconds / 60, summed over minutes).</p>" + svg_hbars(items)
    )


def _divergence(rows: list[dict[str, Any]], lo: int | None, hi: int | None) -> str:
    title = "<h2>Name-server divergence per pair of instances</h2>"
    if not rows or lo is None or hi is None:
        return title + '<p class="note">The instances never disagreed on a live broker set.</p>'
    by_pair: dict[tuple[str, str, str], list[tuple[int, int, str, str]]] = {}
    for r in rows:
        only = f"only in a: {', '.join(r['only_in_a']) or '-'}; only in b: " + (
            ", ".join(r["only_in_b"]) or "-"
        )
        by_pair.setdefault((r["cluster"], r["ns_a"], r["ns_b"]), []).append(
            (r["start_ts"], r["end_ts"], "#b279a2", f"{_when(r['start_ts'])}: {only}")
        )
    timeline = [(f"{c}: {a} ≠ {b}", bars) for (c, a, b), bars in sorted(by_pair.items())]
    return title + svg_timeline(timeline, lo, hi, label_width=360)


def _skew(hist: list[dict[str, Any]], top: list[dict[str, Any]]) -> str:
    title = "<h2>Queue skew</h2>"
    if not hist:
        return title + '<p class="note">No snapshot in the data.</p>'
    labels = _bin_labels(SKEW_BINS, "")
    series: dict[str, list[int]] = {}
    for h in hist:
        series.setdefault(h["ns"], [0] * len(labels))[int(h["bin"])] += int(h["count"])
    items = [
        (
            f"{t['topic']} @{t['ns']}",
            float(t["skew"]),
            f"{t['brokers']} brokers, {t['write_queues']} write queues, "
            f"max {t['max_queues_per_broker']} on one",
        )
        for t in top
        if t["skew"] is not None and not math.isnan(t["skew"])
    ]
    return (
        title + '<p class="note">Topics per skew bin (max / mean write queues per broker), by '
        "instance; then the most skewed topics.</p>"
        + svg_histogram(series, labels)
        + svg_hbars(items, color="#f58518")
    )
