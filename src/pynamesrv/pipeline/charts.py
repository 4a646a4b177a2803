"""Inline SVG charts with labelled axes, and the number formats the report shows.

Part of ``report`` (its drawing half, kept apart so the page logic stays short): pure Python,
no Spark. Every chart draws both axes with a title that names the unit and ticks with
labelled values, because a bar without a scale tells a reader nothing; every text that comes
from the data goes through ``esc``: topic, broker and instance names are remote input.
Numbers are shown rounded and with their unit, times as UTC, never epoch milliseconds.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Final

SECOND_MS: Final = 1000
MINUTE_MS: Final = 60 * SECOND_MS
HOUR_MS: Final = 60 * MINUTE_MS
DAY_MS: Final = 24 * HOUR_MS
# Time-axis steps, each aligned to the UTC epoch so ticks fall on round clock times; no step
# is more than 2.5 times the one before, so an axis always gets at least two ticks.
TIME_STEPS_MS: Final = tuple(
    n * unit
    for unit, ns in (
        (SECOND_MS, (1, 2, 5, 10, 15, 30)),
        (MINUTE_MS, (1, 2, 5, 10, 15, 30)),
        (HOUR_MS, (1, 2, 3, 6, 12)),
        (DAY_MS, (1, 2, 3, 7, 14, 28)),
    )
    for n in ns
)
SERIES_COLORS: Final = (
    "#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#b279a2", "#9d755d",
)  # fmt: skip
AXIS_COLOR: Final = "#999"
GRID_COLOR: Final = "#e6e6e6"
TICK_LENGTH: Final = 4
CHAR_WIDTH: Final = 6.2  # px, an 11 px sans-serif character, to keep labels inside the margin


# ---------------------------------------------------------------------------- formats


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def when(ms: int | None) -> str:
    """``2026-01-01 00:01:40`` (UTC), or ``–`` for none."""
    if ms is None:
        return "–"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def count(value: float | None, unit: str, plural: str | None = None) -> str:
    """A whole number with thousands separators and its unit: ``12,345 queries``. A positive
    value that rounds to zero says so (``<1 query``) rather than hiding that it happened."""
    if value is None or math.isnan(value):
        return "–"
    whole = round(value)
    word = unit if whole == 1 else plural or f"{unit}s"
    if whole == 0 and value > 0:
        return f"<1 {unit}"
    return f"{whole:,} {word}"


def percent(fraction: float | None) -> str:
    """One decimal and ``%``; never rounds a shortfall up to ``100.0 %`` or a trace to ``0.0 %``
    (99.996 % routed is not 100 %)."""
    if fraction is None or math.isnan(fraction):
        return "–"
    value = fraction * 100
    if value < 100 and round(value, 1) >= 100:
        return ">99.9 %"
    if value > 0 and round(value, 1) <= 0:
        return "<0.1 %"
    return f"{value:.1f} %"


def duration(seconds: float | None) -> str:
    """``450 ms``, ``12.3 s``, ``2 min 5 s``, ``3 h 12 min``, ``2 d 4 h``."""
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds == 0:
        return "0 s"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def ratio(value: float | None) -> str:
    """A multiple such as queue skew: ``1.50×``."""
    if value is None or math.isnan(value):
        return "–"
    return f"{value:,.2f}×"


# ---------------------------------------------------------------------------- ticks


def value_ticks(top: float, *, most: int = 5, whole: bool = False) -> list[float]:
    """0 and round steps (1, 2 or 5 × 10^k) up to the first at or above ``top``: the axis of
    a chart whose largest value is ``top``. ``whole``: counts, so no step below 1."""
    top = max(top, 1.0 if whole else 0.0) or 1.0
    raw = top / most
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * step >= raw:
            step *= factor
            break
    if whole:
        step = max(step, 1)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def value_label(tick: float, ticks: Sequence[float]) -> str:
    """A tick with as many decimals as the step needs: ``0``, ``2,500``, ``0.5``."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    return f"{tick:,.{decimals}f}"


def time_ticks(lo: int, hi: int, *, most: int = 6) -> tuple[list[int], int]:
    """Round UTC clock times inside [lo, hi] (epoch ms), at most ``most`` of them, and the
    step between them."""
    span = max(hi - lo, 1)
    step = next((s for s in TIME_STEPS_MS if span / s <= most), TIME_STEPS_MS[-1])
    while span / step > most:
        step *= 2
    first = -(-lo // step) * step
    ticks = list(range(first, hi + 1, step))
    if len(ticks) < 2:  # under a second of data: its ends
        return sorted({lo, hi}), SECOND_MS
    return ticks, step


def time_label(ms: int, step: int, lo: int, hi: int) -> str:
    """``00:01:40`` for second steps, ``14:30`` inside one day, ``01-02 14:30`` across days."""
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    if step < MINUTE_MS:
        return moment.strftime("%H:%M:%S")
    if lo // DAY_MS == hi // DAY_MS:
        return moment.strftime("%H:%M")
    return moment.strftime("%m-%d %H:%M")


def time_axis_title(lo: int, hi: int) -> str:
    """``time (UTC, 2026-01-01)`` when the axis stays inside one day, else ``time (UTC)``."""
    if lo // DAY_MS == hi // DAY_MS:
        return f"time (UTC, {datetime.fromtimestamp(lo / 1000, UTC):%Y-%m-%d})"
    return "time (UTC)"


# ---------------------------------------------------------------------------- drawing


def _svg_open(width: int, height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" class="chart">'
    )


def _text(x: float, y: float, text: str, css: str, anchor: str = "middle") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{css}">{esc(text)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, color: str = AXIS_COLOR) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}"/>'


def _category_axis(
    labels: Sequence[str], x: float, top: float, row_height: float, bottom: float
) -> list[str]:
    """The y-axis of a chart with one row per label: its line, a tick and a label per row.
    A label longer than the margin is cut with ``…``; its tooltip keeps all of it."""
    room = max(int(x / CHAR_WIDTH) - 2, 8)
    parts = [_line(x, top, x, bottom)]
    for i, label in enumerate(labels):
        y = top + (i + 0.5) * row_height
        parts.append(_line(x - TICK_LENGTH, y, x, y))
        if len(label) <= room:
            parts.append(_text(x - TICK_LENGTH - 2, y + 4, label, "tick", "end"))
        else:
            parts.append(
                f'<text x="{x - TICK_LENGTH - 2:.1f}" y="{y + 4:.1f}" text-anchor="end" '
                f'class="tick"><title>{esc(label)}</title>{esc(label[: room - 1])}…</text>'
            )
    return parts


def _time_axis(lo: int, hi: int, left: float, width: float, y: float) -> list[str]:
    """The x-axis of a timeline: its line, round UTC times with ticks, and its title."""
    span = max(hi - lo, 1)
    ticks, step = time_ticks(lo, hi)
    parts = [_line(left, y, left + width, y)]
    for t in ticks:
        x = left + width * (t - lo) / span
        parts.append(_line(x, y, x, y + TICK_LENGTH))
        parts.append(_text(x, y + 16, time_label(t, step, lo, hi), "tick"))
    parts.append(_text(left + width / 2, y + 32, time_axis_title(lo, hi), "axis-title"))
    return parts


def svg_timeline(
    rows: Sequence[tuple[str, Sequence[tuple[int, int, str, str]]]],
    lo: int,
    hi: int,
    *,
    y_title: str,
    width: int = 960,
    label_width: int = 300,
    row_height: int = 14,
) -> str:
    """Horizontal bars on a shared UTC time axis: one row per label (the y-axis, titled
    ``y_title``), bars (start, end, color, title) per row."""
    span = max(hi - lo, 1)
    top, plot = 20, width - label_width - 30
    bottom = top + row_height * len(rows)
    parts = [
        _svg_open(width, bottom + 42),
        _text(label_width - TICK_LENGTH - 2, 12, y_title, "axis-title", "end"),
    ]
    for i, (_, bars) in enumerate(rows):
        y = top + i * row_height
        parts.append(
            f'<rect x="{label_width}" y="{y + 2}" width="{plot}" height="{row_height - 4}" '
            'fill="#f0f0f0"/>'
        )
        for start, end, color, title in bars:
            x0 = label_width + plot * (max(start, lo) - lo) / span
            x1 = label_width + plot * (min(end, hi) - lo) / span
            parts.append(
                f'<rect x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 0.8):.1f}" '
                f'height="{row_height - 4}" fill="{color}"><title>{esc(title)}</title></rect>'
            )
    parts += _category_axis([label for label, _ in rows], label_width, top, row_height, bottom)
    parts += _time_axis(lo, hi, label_width, plot, bottom)
    parts.append("</svg>")
    return "".join(parts)


def svg_hbars(
    items: Sequence[tuple[str, float, str]],
    *,
    y_title: str,
    x_title: str,
    value_text: Callable[[float], str],
    whole: bool = False,
    origin: float = 0.0,
    width: int = 960,
    label_width: int = 360,
    row_height: int = 18,
    color: str = "#e45756",
) -> str:
    """Horizontal bars, (label, value, title) per row: the labels are the y-axis (titled
    ``y_title``), the values are read on a ticked x-axis from ``origin`` (titled
    ``x_title``, with the unit); each bar ends in its value as ``value_text`` writes it.

    A bar is as long as its value's distance from ``origin``, the value that is nothing to
    see: 0 queries, or a skew of 1.0× (even), so the caption's "long bars are bad" holds and
    a value at the origin has no bar at all. A value just above it keeps a sliver."""
    top = max((v for _, v, _ in items), default=origin)
    ticks = [round(origin + t, 12) for t in value_ticks(max(top - origin, 0.0), whole=whole)]
    scale = ticks[-1] - origin
    top, plot = 20, width - label_width - 110
    bottom = top + row_height * len(items)
    parts = [
        _svg_open(width, bottom + 42),
        _text(label_width - TICK_LENGTH - 2, 12, y_title, "axis-title", "end"),
    ]
    for t in ticks:
        x = label_width + plot * (t - origin) / scale
        parts.append(_line(x, top, x, bottom, GRID_COLOR))
        parts.append(_line(x, bottom, x, bottom + TICK_LENGTH))
        parts.append(_text(x, bottom + 16, value_label(t, ticks), "tick"))
    for i, (_, value, title) in enumerate(items):
        y = top + i * row_height
        w = plot * max(value - origin, 0.0) / scale
        if value > origin:
            w = max(w, 0.8)
        parts.append(
            f'<rect x="{label_width}" y="{y + 3}" width="{w:.1f}" '
            f'height="{row_height - 6}" fill="{color}"><title>{esc(title)}</title></rect>'
        )
        parts.append(_text(label_width + w + 4, y + row_height - 5, value_text(value), "value",
                           "start"))  # fmt: skip
    parts += _category_axis([label for label, _, _ in items], label_width, top, row_height, bottom)
    parts.append(_line(label_width, bottom, label_width + plot, bottom))
    parts.append(_text(label_width + plot / 2, bottom + 32, x_title, "axis-title"))
    parts.append("</svg>")
    return "".join(parts)


def svg_histogram(
    series: dict[str, list[int]],
    bin_labels: Sequence[str],
    *,
    y_title: str,
    x_title: str,
    colors: Callable[[str, int], str] = lambda _, i: SERIES_COLORS[i % len(SERIES_COLORS)],
    width: int = 960,
    height: int = 240,
) -> str:
    """Grouped vertical bars, one group per bin and one bar per series, on a ticked count
    axis from 0 (titled ``y_title``); bins along the x-axis (titled ``x_title``); a legend."""
    names = sorted(series)
    ticks = value_ticks(max((c for cs in series.values() for c in cs), default=0), whole=True)
    scale = ticks[-1]
    left, top = 70, 24
    plot_w, plot_h = width - left - 10, height - top - 46
    base = top + plot_h
    group_w = plot_w / max(len(bin_labels), 1)
    bar_w = group_w * 0.8 / max(len(names), 1)
    parts = [
        _svg_open(width, height + 16 * len(names)),
        _text(left - TICK_LENGTH - 2, 12, y_title, "axis-title", "end"),
    ]
    for t in ticks:
        y = base - plot_h * t / scale
        parts.append(_line(left, y, left + plot_w, y, GRID_COLOR))
        parts.append(_line(left - TICK_LENGTH, y, left, y))
        parts.append(_text(left - TICK_LENGTH - 2, y + 4, value_label(t, ticks), "tick", "end"))
    for b, label in enumerate(bin_labels):
        gx = left + b * group_w
        for s, name in enumerate(names):
            n = series[name][b]
            h = plot_h * n / scale
            parts.append(
                f'<rect x="{gx + group_w * 0.1 + s * bar_w:.1f}" y="{base - h:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}" fill="{colors(name, s)}">'
                f"<title>{esc(name)} {esc(label)}: {n:,}</title></rect>"
            )
        parts.append(_text(gx + group_w / 2, base + 16, label, "tick"))
    parts.append(_line(left, top, left, base))
    parts.append(_line(left, base, left + plot_w, base))
    parts.append(_text(left + plot_w / 2, base + 34, x_title, "axis-title"))
    for s, name in enumerate(names):
        y = height + 16 * s
        parts.append(
            f'<rect x="{left}" y="{y - 10}" width="10" height="10" fill="{colors(name, s)}"/>'
        )
        parts.append(_text(left + 16, y, name, "legend", "start"))
    parts.append("</svg>")
    return "".join(parts)
