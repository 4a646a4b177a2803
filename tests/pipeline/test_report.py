"""report.html from hand-made aggregates (no Spark): rounded figures with units, ticked and
titled axes with UTC times, a good/bad line under every chart, and escaped remote names."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pynamesrv.pipeline.charts import (
    count,
    duration,
    percent,
    ratio,
    time_label,
    time_ticks,
    value_ticks,
)
from pynamesrv.pipeline.report import render_report

from .journals import T0, ms
from .report_page import Page, assert_charts_readable, raw_numbers

HOSTILE = '<script>alert("x")</script>&b'


def sample() -> dict[str, Any]:
    """Two hours of a day: every section has data, names include a hostile one."""
    headline = {
        "events": 1_234_567, "instances": 2, "malformed_lines": 1, "invalid_lines": 0,
        "from": T0, "to": ms(7200), "brokers": 3, "sessions": 5, "outages": 1,
        "mean_routed_fraction": 0.98234, "mean_mttr_s": 95.4, "removals": 3,
        "median_detection_s": 0.25, "stale_topic_minutes": 7, "stale_seconds": 312.5,
        "exposed_queries": 1234.56, "divergence_intervals": 2, "divergence_seconds": 12.34,
        "topics": 40, "single_broker_topics": 1, "max_skew": 1.5,
    }  # fmt: skip
    session = {"ns": "n1:9876", "cluster": "C", "broker_id": 0}
    return {
        "headline": headline,
        "timeline_sessions": [
            {
                **session,
                "broker_name": "b1",
                "broker_addr": "10.0.0.1:10911",
                "start_ts": ms(10),
                "end_ts": ms(3000),
                "end_reason": "expired",
            },
            {
                **session,
                "broker_name": "b1",
                "broker_addr": "10.0.0.1:10911",
                "start_ts": ms(3100),
                "end_ts": None,
                "end_reason": None,
            },
            {
                **session,
                "broker_name": HOSTILE,
                "broker_addr": "10.0.0.2:10911",
                "start_ts": ms(20),
                "end_ts": ms(7000),
                "end_reason": "unregister",
            },
        ],
        "latency_stats": [
            {"reason": "expired", "n": 2, "p": [121.0, 125.5, 125.5], "max": 125.5},
            {"reason": "unregister", "n": 1, "p": [0.25, 0.25, 0.25], "max": 0.25},
        ],
        "latency_hist": [
            {"reason": "expired", "bin": 8, "count": 2},
            {"reason": "unregister", "bin": 0, "count": 1},
        ],
        "top_exposure": [
            {
                "ns": "n1:9876",
                "topic": HOSTILE,
                "exposed": 1000.25,
                "stale_s": 250.0,
                "queries": 2400,
            },
            {"ns": "n1:9876", "topic": "T2", "exposed": 234.31, "stale_s": 62.5, "queries": 600},
        ],
        "divergence": [
            {
                "cluster": "C",
                "ns_a": "n1:9876",
                "ns_b": "n2:9876",
                "start_ts": ms(3000),
                "end_ts": ms(3010),
                "only_in_a": [],
                "only_in_b": ["10.0.0.1:10911"],
            },
        ],
        "skew_hist": [
            {"ns": "n1:9876", "bin": 0, "count": 39},
            {"ns": "n1:9876", "bin": 3, "count": 1},
        ],
        "top_skew": [
            {
                "ns": "n1:9876",
                "topic": "T3",
                "skew": 1.5,
                "brokers": 2,
                "write_queues": 8,
                "max_queues_per_broker": 6,
            },
            {
                "ns": "n1:9876",
                "topic": "T4",
                "skew": 1.0,
                "brokers": 2,
                "write_queues": 8,
                "max_queues_per_broker": 4,
            },
        ],
    }


def test_headline_figures_are_rounded_and_carry_their_units() -> None:
    cards = Page(render_report(sample())).cards
    assert cards["journal"] == "1,234,567 events"
    assert cards["name servers"] == "2 instances"
    assert cards["skipped lines"] == "1 malformed line, 0 lines without ts/ns/type"
    assert cards["broker outages"] == "1 outage"
    assert cards["mean routed fraction"] == "98.2 %"
    assert cards["mean time to recover"] == "1 min 35 s"
    assert cards["median detection latency"] == "250 ms"
    assert cards["stale route exposure"] == "7 topic-minutes"
    assert cards["exposed queries"] == "1,235 queries"
    assert cards["name-server divergence"] == "2 intervals, 12.3 s"
    assert cards["max queue skew"] == "1.50×"


def test_no_raw_float_or_epoch_number_is_visible() -> None:
    page = Page(render_report(sample()))
    assert raw_numbers(page) == []
    assert "2026-01-01 00:00:00 – 2026-01-01 02:00:00 UTC" in page.text


def test_every_chart_has_ticked_titled_axes_and_a_good_bad_line() -> None:
    page = Page(render_report(sample()))
    assert len(page.figures) == 6  # 2 timelines, 2 histograms, 2 bar charts
    assert_charts_readable(page)
    timeline, latency, exposure, divergence, skew, top_skew = page.figures
    assert [f.classes["axis-title"][0] for f in page.figures] == [
        "broker address @ name server", "removals", "topic @ name server",
        "cluster: name server a ≠ name server b", "topics", "topic @ name server",
    ]  # fmt: skip
    assert exposure.classes["axis-title"][1].startswith("exposed queries (")
    assert top_skew.classes["axis-title"][1].endswith("(×)")
    # Timelines: one tick per broker row, round UTC clock times along x.
    assert timeline.classes["axis-title"][-1] == "time (UTC, 2026-01-01)"
    assert {"00:00", "00:30", "01:00", "01:30", "02:00"} <= set(timeline.classes["tick"])
    assert "b1 10.0.0.1:10911 @n1:9876" in timeline.classes["tick"]
    assert any(t.endswith("…") for t in timeline.classes["tick"])  # too long: cut, in tooltip
    assert "C: n1:9876 ≠ n2:9876" in divergence.classes["tick"]
    # Count axes from 0 in whole steps; bins with their unit.
    assert latency.classes["tick"][:3] == ["0", "1", "2"]
    assert "120–300 s" in latency.classes["tick"]
    assert latency.classes["axis-title"] == [
        "removals", "seconds from the last heartbeat to the removal (s)",
    ]  # fmt: skip
    assert skew.classes["axis-title"][0] == "topics"
    # Bar charts: a value axis with round ticks, each bar ending in its value with the unit.
    assert {"0", "500", "1,000"} <= set(exposure.classes["tick"])
    assert exposure.classes["value"] == ["1,000 queries", "234 queries"]
    assert top_skew.classes["value"] == ["1.50×", "1.00×"]
    assert "Bad: expired removals" in latency.caption


def bar_widths(page: str, figure: int) -> list[float]:
    """The widths of the bars (``rect``) of one chart, top to bottom."""
    svg = page.split("<figure>")[figure + 1].split("</figure>")[0]
    return [float(w) for w in re.findall(r'<rect [^>]*width="([0-9.]+)"', svg)]


def test_bars_read_as_their_caption_says_long_is_bad() -> None:
    """A perfectly even topic (1.00×) has no bar, and the skew axis starts at 1: under a
    caption that calls long bars bad, 1.00× drawn full width read as the worst (issue 34);
    a query count of zero has no bar either."""
    data = sample()
    data["top_exposure"].append(
        {"ns": "n1:9876", "topic": "T0", "exposed": 0.0, "stale_s": 1.0, "queries": 0}
    )
    page = render_report(data)
    figures = Page(page).figures
    top_skew = figures[5]
    assert "Bad: long bars" in top_skew.caption
    assert top_skew.classes["tick"][:2] == ["1.0", "1.1"]  # the axis starts at even
    skewed, even = bar_widths(page, 5)
    assert skewed > 0 and even == 0
    *counted, nothing = bar_widths(page, 2)  # exposure: from 0 queries
    assert all(w > 0 for w in counted) and nothing == 0


def test_sections_without_data_still_say_what_good_and_bad_are() -> None:
    data = sample()
    for key in ("timeline_sessions", "latency_stats", "latency_hist", "top_exposure",
                "divergence", "skew_hist", "top_skew"):  # fmt: skip
        data[key] = []
    page = render_report(data)
    assert "<svg" not in page
    assert page.count('<p class="verdict"><b>Good:</b>') == 5
    assert "No route listed a silent broker." in page


def test_names_from_the_journal_are_escaped() -> None:
    page = render_report(sample())
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;b" in page
    assert HOSTILE in " ".join(Page(page).text)  # shown to the reader as written


@pytest.mark.parametrize(
    ("fraction", "shown"),
    [(0.98234, "98.2 %"), (1.0, "100.0 %"), (0.99996, ">99.9 %"), (0.0, "0.0 %"),
     (0.0000004, "<0.1 %"), (None, "–")],
)  # fmt: skip
def test_percent_rounds_to_one_decimal_without_claiming_100(
    fraction: float | None, shown: str
) -> None:
    assert percent(fraction) == shown


def test_counts_durations_and_ratios_read_as_words() -> None:
    assert count(1, "query", "queries") == "1 query"
    assert count(12345.4, "query", "queries") == "12,345 queries"
    assert count(0.3, "query", "queries") == "<1 query"
    assert count(0, "outage") == "0 outages"
    assert [duration(s) for s in (0, 0.0451, 12.34, 125.4, 3 * 3600 + 720, 2 * 86400 + 3600)] == [
        "0 s", "45 ms", "12.3 s", "2 min 5 s", "3 h 12 min", "2 d 1 h",
    ]  # fmt: skip
    assert ratio(2) == "2.00×"


@pytest.mark.parametrize(
    ("top", "whole", "ticks"),
    [(7, True, [0, 2, 4, 6, 8]), (2, True, [0, 1, 2]), (0, True, [0, 1]),
     (1234.56, False, [0, 500, 1000, 1500]), (1.5, False, [0, 0.5, 1, 1.5])],
)  # fmt: skip
def test_value_axis_runs_from_zero_in_round_steps_past_the_top(
    top: float, whole: bool, ticks: list[float]
) -> None:
    assert value_ticks(top, whole=whole) == ticks


def test_time_axis_ticks_are_round_utc_times_for_any_span() -> None:
    for span_ms in (1, 900, 7_000, 95_000, 3_600_000, 26 * 3_600_000, 13 * 86_400_000):
        lo = T0 + 1234
        ticks, step = time_ticks(lo, lo + span_ms)
        assert 1 <= len(ticks) <= 6 and all(lo <= t <= lo + span_ms for t in ticks), span_ms
        if span_ms >= 3000:
            assert len(ticks) >= 2 and all(t % step == 0 for t in ticks), span_ms
    ticks, step = time_ticks(T0, ms(95))
    assert [time_label(t, step, T0, ms(95)) for t in ticks] == [
        "00:00:00", "00:00:30", "00:01:00", "00:01:30",
    ]  # fmt: skip
    ticks, step = time_ticks(T0, ms(26 * 3600))
    assert time_label(ticks[-1], step, T0, ms(26 * 3600)) == "01-02 00:00"


def _timeline_note(html: str) -> str:
    start = html.index("Routed sessions of")
    return html[start : html.index(";", start)]


@pytest.mark.parametrize(
    ("brokers_seen", "note"),
    [
        (2, "Routed sessions of all 2 brokers, one row per broker and name server "
            "(4 rows, 2 name servers)"),
        (1_500, "Routed sessions of the 4 rows with the most outages (a row is a broker on one "
                "name server): 2 of 1,500 brokers, 2 name servers"),
    ],
)  # fmt: skip
def test_the_timeline_counts_brokers_as_the_headline_does(brokers_seen: int, note: str) -> None:
    """A timeline row is a broker address as one name server routed it: two brokers on two
    name servers are four rows and still two brokers, the number the headline shows."""
    data = sample()
    data["headline"]["brokers"] = brokers_seen
    data["timeline_sessions"] = [
        {"ns": ns, "cluster": "C", "broker_id": 0, "broker_name": name, "broker_addr": addr,
         "start_ts": ms(10), "end_ts": ms(3000), "end_reason": "expired"}
        for ns in ("n1:9876", "n2:9876")
        for name, addr in (("b1", "10.0.0.1:10911"), ("b2", "10.0.0.2:10911"))
    ]  # fmt: skip
    html = render_report(data)
    assert Page(html).cards["brokers seen"] == f"{brokers_seen:,} brokers"
    assert _timeline_note(html) == note
