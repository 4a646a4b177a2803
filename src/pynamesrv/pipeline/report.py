"""report.html: one self-contained page of charts over the pipeline's tables.

Self-contained because it is read where the job ran, often without network: no scripts, no
CDN, no fonts; every chart is inline SVG (``charts.py``) drawn from small aggregates, with a
line under it that says what good and bad look like, so the page reads without this code.
The aggregation (top-N, histograms, percentiles) happens in Spark over the written Parquet
tables, in one query; only those small results are collected, so the report costs the same
for a day of 10 brokers or of 10,000.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pynamesrv.pipeline.charts import (
    SERIES_COLORS,
    count,
    duration,
    esc,
    percent,
    ratio,
    svg_hbars,
    svg_histogram,
    svg_timeline,
    when,
)

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

    # Every figure in one query: the headline's one-row aggregates and each chart's rows
    # (collected as one array each) side by side, planned and run together.
    broker_key = ["ns", "cluster", "broker_name", "broker_addr"]
    worst = (
        availability.groupBy(*broker_key)
        .agg(F.sum("outages").alias("outages"), F.sum("routed_s").alias("routed_s"))
        .orderBy(F.col("outages").desc(), F.col("routed_s").asc(), *broker_key)
        .limit(TIMELINE_BROKERS)
    )
    removals = latency.where(F.col("latency_s").isNotNull())
    ranked = Window.partitionBy("cluster", "ns_a", "ns_b").orderBy(F.col("duration_s").desc())
    parts = [
        sessions.agg(
            F.min("start_ts").alias("lo"),
            F.max(F.greatest("start_ts", F.coalesce("end_ts", "start_ts"))).alias("hi"),
            F.count(F.lit(1)).alias("sessions"),
            F.countDistinct("cluster", "broker_addr").alias("brokers"),
        ),
        availability.agg(
            F.sum("outages").alias("outages"),
            F.avg("routed_fraction").alias("mean_fraction"),
            F.avg("mttr_s").alias("mttr_s"),
        ),
        exposure.agg(
            F.count(F.lit(1)).alias("minutes"),
            F.sum("stale_seconds").alias("stale_s"),
            F.sum("exposed_queries").alias("exposed"),
        ),
        divergence.agg(F.count(F.lit(1)).alias("intervals"), F.sum("duration_s").alias("seconds")),
        distribution.agg(
            F.count(F.lit(1)).alias("topics"),
            F.sum(F.col("single_broker").cast("int")).alias("single"),
            F.max("skew").alias("max_skew"),
            F.max("at_ts").alias("topics_at"),
        ),
        latency.agg(
            F.count(F.lit(1)).alias("removals"),
            F.percentile_approx("latency_s", 0.5).alias("p50"),
        ),
        _listed(
            "timeline_sessions",
            sessions.join(F.broadcast(worst.select(*broker_key)), broker_key).select(
                *broker_key, "start_ts", "end_ts", "end_reason"
            ),
        ),
        _listed(
            "latency_stats",
            removals.groupBy("reason").agg(
                F.count(F.lit(1)).alias("n"),
                F.percentile_approx("latency_s", [0.5, 0.9, 0.99]).alias("p"),
                F.max("latency_s").alias("max"),
            ),
            order=[("reason", False)],
        ),
        _listed(
            "latency_hist",
            removals.groupBy("reason", _bin_index("latency_s", LATENCY_BINS).alias("bin")).count(),
        ),
        _listed(
            "top_exposure",
            exposure.groupBy("ns", "topic").agg(
                F.sum("exposed_queries").alias("exposed"),
                F.sum("stale_seconds").alias("stale_s"),
                F.sum("queries").alias("queries"),
            ),
            order=[("exposed", True), ("stale_s", True), ("ns", False), ("topic", False)],
            limit=TOP_TOPICS,
        ),
        _listed(
            "divergence",
            divergence.withColumn("rank", F.row_number().over(ranked))
            .where(F.col("rank") <= MAX_DIVERGENCE_INTERVALS)
            .select("cluster", "ns_a", "ns_b", "start_ts", "end_ts", "only_in_a", "only_in_b"),
        ),
        _listed(
            "skew_hist",
            distribution.groupBy("ns", _bin_index("skew", SKEW_BINS).alias("bin")).count(),
        ),
        _listed(
            "top_skew",
            distribution.select(
                "ns", "topic", "skew", "brokers", "write_queues", "max_queues_per_broker"
            ),
            order=[("skew", True), ("ns", False), ("topic", False)],
            limit=TOP_TOPICS,
        ),
    ]
    combined = parts[0]
    for part in parts[1:]:
        combined = combined.crossJoin(part)
    one_row = combined.first()
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
        # the end of the data, the instant topic_distribution describes (one for all)
        "topics_at": one_row["topics_at"] if one_row["topics_at"] is not None else hi,
        "single_broker_topics": one_row["single"] or 0,
        "max_skew": one_row["max_skew"],
    }
    return {"headline": headline, **{name: _unlisted(one_row[name]) for name in LISTS}}


# The charts' rows, each collected as one array column of the report's query.
LISTS: Final = (
    "timeline_sessions",
    "latency_stats",
    "latency_hist",
    "top_exposure",
    "divergence",
    "skew_hist",
    "top_skew",
)
_ORDER: Final = "_order"


def _listed(
    name: str,
    frame: DataFrame,
    order: Sequence[tuple[str, bool]] = (),
    limit: int | None = None,
) -> DataFrame:
    """``frame``'s rows as the one array column ``name`` of a one-row frame; in ``order``
    ((column, descending) pairs; descending ones numeric) and only the first ``limit`` when
    given.

    No window: a row number over the whole frame is a window without a partition, which
    Spark runs in one partition and warns about on every run (a Connect server's log, a
    cluster driver's). The first ``limit`` rows are a global sort's (Spark takes them
    ordered, per partition then merged); the array is sorted by a key that orders
    ascending as ``order`` does."""
    columns = [F.col(c) for c in frame.columns]
    if not order:
        return frame.agg(F.collect_list(F.struct(*columns)).alias(name))
    if limit is not None:
        sort = [F.col(c).desc() if descending else F.col(c).asc() for c, descending in order]
        frame = frame.orderBy(*sort).limit(limit)
    key = F.struct(*[(-F.col(c) if descending else F.col(c)).alias(c) for c, descending in order])
    return frame.agg(
        F.sort_array(F.collect_list(F.struct(key.alias(_ORDER), *columns))).alias(name)
    )


def _unlisted(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """A ``_listed`` column back as plain rows, in order."""
    found = [r.asDict(recursive=True) for r in rows]
    for row in found:
        row.pop(_ORDER, None)
    return found


# ---------------------------------------------------------------------------- page


def _color(name: str | None, index: int) -> str:
    return PALETTE.get(name) or SERIES_COLORS[index % len(SERIES_COLORS)]


def _bin_labels(edges: Sequence[float], unit: str) -> list[str]:
    labels = [f"{edges[i]:g}–{edges[i + 1]:g}{unit}" for i in range(len(edges) - 1)]
    return [*labels, f"≥{edges[-1]:g}{unit}"]


def _figure(svg: str, good: str, bad: str) -> str:
    """A chart and, under it, the one line that says how to read it."""
    return (
        f'<figure>{svg}<figcaption class="verdict"><b>Good:</b> {esc(good)} '
        f"<b>Bad:</b> {esc(bad)}</figcaption></figure>"
    )


def _empty(note: str, good: str, bad: str) -> str:
    """A section without data: what that means, and the same reading guide."""
    return (
        f'<p class="note">{esc(note)}</p><p class="verdict"><b>Good:</b> {esc(good)} '
        f"<b>Bad:</b> {esc(bad)}</p>"
    )


def render_report(data: dict[str, Any]) -> str:
    """The whole page as one string."""
    head = data["headline"]
    lo, hi = head["from"], head["to"]
    sections = [
        _headline(head),
        _availability(data["timeline_sessions"], lo, hi, head["brokers"]),
        _latency(data["latency_stats"], data["latency_hist"]),
        _exposure(data["top_exposure"]),
        _divergence(data["divergence"], lo, hi),
        _skew(data["skew_hist"], data["top_skew"], head.get("topics_at")),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>pynamesrv pipeline report</title><style>"
        "body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}"
        "h1{font-size:22px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd}"
        ".cards{display:flex;flex-wrap:wrap;gap:10px}"
        ".card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:140px}"
        ".card b{display:block;font-size:20px}.chart text{font-size:11px}"
        ".chart .tick,.chart .value{fill:#555}.chart .axis-title{fill:#222;font-weight:600}"
        "figure{margin:12px 0}figcaption,.verdict{color:#444;margin:4px 0 12px}"
        "table{border-collapse:collapse}"
        "td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}"
        "td:first-child,th:first-child{text-align:left}.note{color:#666}"
        "</style></head><body>"
        f'<h1>pynamesrv pipeline report</h1><p class="note">{esc(when(lo))} – '
        f"{esc(when(hi))} UTC</p>" + "".join(sections) + "</body></html>\n"
    )


def _headline(head: dict[str, Any]) -> str:
    cards = [
        ("journal", count(head["events"], "event")),
        ("name servers", count(head["instances"], "instance")),
        (
            "skipped lines",
            f"{count(head.get('malformed_lines', 0), 'malformed line')}, "
            f"{count(head.get('invalid_lines', 0), 'line')} without ts/ns/type",
        ),
        ("brokers seen", count(head["brokers"], "broker")),
        ("routed sessions", count(head["sessions"], "session")),
        ("broker outages", count(head["outages"], "outage")),
        ("mean routed fraction", percent(head["mean_routed_fraction"])),
        ("mean time to recover", duration(head["mean_mttr_s"])),
        ("broker removals", count(head["removals"], "removal")),
        ("median detection latency", duration(head["median_detection_s"])),
        ("stale route exposure", count(head["stale_topic_minutes"], "topic-minute")),
        ("exposed queries", count(head["exposed_queries"], "query", "queries")),
        (
            "name-server divergence",
            f"{count(head['divergence_intervals'], 'interval')}, "
            f"{duration(head['divergence_seconds'])}",
        ),
        ("topics at the end of the data", count(head["topics"], "topic")),
        ("single-broker topics", count(head["single_broker_topics"], "topic")),
        ("max queue skew", ratio(head["max_skew"])),
    ]
    body = "".join(f'<div class="card">{esc(k)}<b>{esc(v)}</b></div>' for k, v in cards)
    return f'<h2>Headline</h2><div class="cards">{body}</div>'


AVAILABILITY_GOOD: Final = "one unbroken bar per broker, green to the end: routed the whole time."
AVAILABILITY_BAD: Final = (
    "gaps, when this name server did not route the broker; a bar ending red (expired) or in a "
    "channel colour is a broker that failed rather than unregistered (blue, a clean shutdown); "
    "grey and yellow ends are this name server stopping or crashing."
)


def _availability(
    sessions: list[dict[str, Any]], lo: int | None, hi: int | None, brokers_seen: int
) -> str:
    title = "<h2>Availability timeline per broker</h2>"
    if not sessions or lo is None or hi is None:
        return title + _empty("No broker sessions.", AVAILABILITY_GOOD, AVAILABILITY_BAD)
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
                f"{when(s['start_ts'])} – {when(s['end_ts'])} UTC ({reason or 'open'})",
            )
        )
    rows = [(f"{n} {a} @{ns}", bars) for (_, n, a, ns), bars in sorted(by_broker.items())]
    legend = " ".join(
        f'<span style="color:{c}">■</span> {esc(k or "open")}' for k, c in PALETTE.items()
    )
    chart = svg_timeline(rows, lo, hi, y_title="broker address @ name server")
    return (
        title + f'<p class="note">{esc(_timeline_scope(by_broker, brokers_seen))}; '
        f"colour = how the session ended. {legend}</p>"
        + _figure(chart, AVAILABILITY_GOOD, AVAILABILITY_BAD)
    )


def _timeline_scope(rows: Collection[tuple[str, ...]], brokers_seen: int) -> str:
    """What the timeline shows, counted as the headline counts brokers (addresses, per
    cluster): a row is one broker as one name server routed it."""
    brokers = len({(cluster, addr) for cluster, _, addr, _ in rows})
    servers = count(len({ns for *_, ns in rows}), "name server")
    if brokers >= brokers_seen:
        return (
            f"Routed sessions of all {count(brokers, 'broker')}, one row per broker and name "
            f"server ({count(len(rows), 'row')}, {servers})"
        )
    return (
        f"Routed sessions of the {count(len(rows), 'row')} with the most outages (a row is a "
        f"broker on one name server): {brokers:,} of {count(brokers_seen, 'broker')}, {servers}"
    )


LATENCY_GOOD: Final = (
    "removals under 30 s (one heartbeat interval), by unregister or a closed channel: a "
    "broker that leaves is dropped at once, so only the time since its last heartbeat counts."
)
LATENCY_BAD: Final = (
    "expired removals: each is a broker that went silent and stayed in routes until its "
    "timeout (120 s by default); bars well past the timeout mean expiry ran late."
)


def _latency(stats: list[dict[str, Any]], hist: list[dict[str, Any]]) -> str:
    title = "<h2>Detection latency by reason</h2>"
    if not stats:
        return title + _empty("No removals with a last heartbeat.", LATENCY_GOOD, LATENCY_BAD)
    labels = _bin_labels(LATENCY_BINS, " s")
    series: dict[str, list[int]] = {s["reason"]: [0] * len(labels) for s in stats}
    for h in hist:
        series.setdefault(h["reason"], [0] * len(labels))[int(h["bin"])] += int(h["count"])
    table = "".join(
        f"<tr><td>{esc(s['reason'])}</td><td>{esc(count(s['n'], 'removal'))}</td>"
        + "".join(f"<td>{esc(duration(p))}</td>" for p in (s["p"] or [None] * 3))
        + f"<td>{esc(duration(s['max']))}</td></tr>"
        for s in stats
    )
    chart = svg_histogram(
        series,
        labels,
        y_title="removals",
        x_title="seconds from the last heartbeat to the removal (s)",
        colors=_color,
    )
    return (
        title
        + _figure(chart, LATENCY_GOOD, LATENCY_BAD)
        + "<table><tr><th>reason</th><th>removals</th><th>p50</th><th>p90</th>"
        + f"<th>p99</th><th>max</th></tr>{table}</table>"
    )


EXPOSURE_GOOD: Final = (
    "no bars: no route answer listed a broker silent for longer than the heartbeat interval."
)
EXPOSURE_BAD: Final = (
    "any bar above zero: about that many route answers for the topic still sent clients to a "
    "broker that had stopped heart-beating."
)


def _exposure(top: list[dict[str, Any]]) -> str:
    title = "<h2>Stale-route exposure by topic</h2>"
    if not top:
        return title + _empty("No route listed a silent broker.", EXPOSURE_GOOD, EXPOSURE_BAD)
    items = [
        (
            f"{t['topic']} @{t['ns']}",
            float(t["exposed"] or 0.0),
            f"stale for {duration(t['stale_s'])}, {count(t['queries'], 'query', 'queries')} "
            "in those minutes",
        )
        for t in top
    ]
    chart = svg_hbars(
        items,
        y_title="topic @ name server",
        x_title="exposed queries (queries × stale seconds / 60)",
        value_text=lambda v: count(v, "query", "queries"),
        whole=True,
    )
    return (
        title + f'<p class="note">Top {len(items)} topics by exposed queries, summed over '
        "minutes.</p>" + _figure(chart, EXPOSURE_GOOD, EXPOSURE_BAD)
    )


DIVERGENCE_GOOD: Final = (
    "no bars, or slivers of a few seconds while a broker joins or leaves (each name server "
    "learns of it at its own moment)."
)
DIVERGENCE_BAD: Final = (
    "long bars: the two name servers routed different live brokers of the cluster, so clients "
    "got different routes depending on which one they asked."
)


def _divergence(rows: list[dict[str, Any]], lo: int | None, hi: int | None) -> str:
    title = "<h2>Name-server divergence per pair of instances</h2>"
    if not rows or lo is None or hi is None:
        return title + _empty(
            "The instances never disagreed on a live broker set.", DIVERGENCE_GOOD, DIVERGENCE_BAD
        )
    by_pair: dict[tuple[str, str, str], list[tuple[int, int, str, str]]] = {}
    for r in rows:
        only = f"only in a: {', '.join(r['only_in_a']) or '-'}; only in b: " + (
            ", ".join(r["only_in_b"]) or "-"
        )
        by_pair.setdefault((r["cluster"], r["ns_a"], r["ns_b"]), []).append(
            (r["start_ts"], r["end_ts"], "#b279a2", f"{when(r['start_ts'])} UTC: {only}")
        )
    timeline = [(f"{c}: {a} ≠ {b}", bars) for (c, a, b), bars in sorted(by_pair.items())]
    chart = svg_timeline(
        timeline, lo, hi, y_title="cluster: name server a ≠ name server b", label_width=360
    )
    return title + _figure(chart, DIVERGENCE_GOOD, DIVERGENCE_BAD)


SKEW_GOOD: Final = (
    "every topic in the first bin, 1–1.01: its write queues spread evenly over its brokers "
    "(a topic on a single broker is 1 too; the headline counts those)."
)
SKEW_BAD: Final = (
    "topics further right: their busiest broker holds that multiple of an even share of the "
    "write queues, and takes that much more of the producers' messages."
)
TOP_SKEW_GOOD: Final = (
    "no bars, the axis starts at 1.00× (even): every broker of the topic has the same write queues."
)
TOP_SKEW_BAD: Final = (
    "long bars: the topic's busiest broker gets that multiple of an even share of its "
    "messages, and is the first to run out of disk or throughput."
)


def _skew(hist: list[dict[str, Any]], top: list[dict[str, Any]], at: int | None) -> str:
    title = "<h2>Queue skew</h2>"
    scope = (
        f"The routes each name server answered at the end of the data, {when(at)} UTC (its "
        "last snapshot and every change journaled after it)"
    )
    if not hist:
        return title + _empty(
            f"{scope}: no topic had a route on any name server.", SKEW_GOOD, SKEW_BAD
        )
    labels = _bin_labels(SKEW_BINS, "")
    series: dict[str, list[int]] = {}
    for h in hist:
        series.setdefault(h["ns"], [0] * len(labels))[int(h["bin"])] += int(h["count"])
    items = [
        (
            f"{t['topic']} @{t['ns']}",
            float(t["skew"]),
            f"{count(t['brokers'], 'broker')}, {count(t['write_queues'], 'write queue')}, "
            f"at most {t['max_queues_per_broker']:,} on one",
        )
        for t in top
        if t["skew"] is not None and not math.isnan(t["skew"])
    ]
    histogram = svg_histogram(
        series,
        labels,
        y_title="topics",
        x_title="skew: max / mean write queues per broker (×), by name server",
    )
    bars = svg_hbars(
        items,
        y_title="topic @ name server",
        x_title="skew: max / mean write queues per broker (×)",
        value_text=ratio,
        origin=1.0,  # even: no bar
        color="#f58518",
    )
    return (
        title + f'<p class="note">{esc(scope)}: topics per skew bin, by instance; then the '
        "most skewed topics.</p>"
        + _figure(histogram, SKEW_GOOD, SKEW_BAD)
        + _figure(bars, TOP_SKEW_GOOD, TOP_SKEW_BAD)
    )
