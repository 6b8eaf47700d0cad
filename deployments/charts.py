"""Server-rendered SVG charts, generic. Pure: numbers in, an SVG string out; no Django, no I/O.

Every chart is one `<svg class="chart">` with an `<g class="series" data-series=NAME
data-points=N>` per series, axes with "nice" ticks and a legend, so the pages need no JS
chart library and tests can parse the result with ElementTree. Missing values (None) break
a line instead of being drawn as 0. Text is escaped.

The charts: `line_chart`, `scatter_chart`, `timeline_chart`. deployments/plots.py builds them
from stored shapes: telemetry rows per GPU, benchmark levels, per-request records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from html import escape
from typing import Any

PALETTE = (
    "#2f5fd0",
    "#d9480f",
    "#2b8a3e",
    "#ae3ec9",
    "#e8590c",
    "#1098ad",
    "#c2255c",
    "#5c940d",
    "#862e9c",
    "#495057",
)

Point = tuple[float, float | None]


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[Point]
    color: str = ""
    dash: bool = False
    meta: Sequence[str] = field(default_factory=tuple)  # per-point tooltip text (scatter)


@dataclass(frozen=True)
class Frame:
    width: int = 640
    height: int = 240
    left: int = 56
    right: int = 12
    top: int = 40
    bottom: int = 40

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom


# --- scales and ticks ------------------------------------------------------------------------


def nice_step(span: float, target: int = 5) -> float:
    """A 1/2/5 x 10^n step giving about `target` ticks over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        hi = lo + (abs(lo) or 1.0)
    step = nice_step(hi - lo, target)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value <= hi + step * 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < hi:
        ticks.append(round(value, 10))
    return ticks


def fmt_number(value: float) -> str:
    a = abs(value)
    if a >= 1e9:
        return f"{value / 1e9:g}G"
    if a >= 1e6:
        return f"{value / 1e6:g}M"
    if a >= 1e4:
        return f"{value / 1e3:g}k"
    if a >= 100 or float(value).is_integer():
        return f"{value:.0f}"
    if a >= 1:
        return f"{value:.1f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def fmt_clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M")


def finite(v: Any) -> bool:
    kind = type(v)  # floats and ints first: a telemetry chart asks this of some 20,000 values
    if kind is float:
        return bool(v - v == 0.0)  # nan and ±inf give nan
    if kind is int:
        return True
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _point(x: Any, y: Any) -> tuple[float, float] | None:
    return (float(x), float(y)) if finite(x) and finite(y) else None


def _bounds(series: Sequence[Series]) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for s in series:
        for x, y in s.points:
            if finite(x) and finite(y):
                xs.append(float(x))
                ys.append(float(y))  # type: ignore[arg-type]
    return xs, ys


# --- the pieces --------------------------------------------------------------------------------


def _open(frame: Frame, title: str, kind: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {escape(kind)}" role="img" '
        f'viewBox="0 0 {frame.width} {frame.height}" width="{frame.width}" height="{frame.height}" '
        f'aria-label="{escape(title)}" font-family="system-ui, sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text class="chart-title" x="{frame.left}" y="15" font-size="12" font-weight="600">{escape(title)}</text>',
    ]


def _empty(frame: Frame, title: str, kind: str, message: str) -> str:
    parts = _open(frame, title, kind)
    parts.append(
        f'<text class="no-data" x="{frame.width / 2:.0f}" y="{frame.height / 2:.0f}" text-anchor="middle" '
        f'fill="#6b7480">{escape(message)}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _axes(
    frame: Frame,
    xticks: Sequence[float],
    yticks: Sequence[float],
    sx: Callable[[float], float],
    sy: Callable[[float], float],
    *,
    x_label: str,
    y_label: str,
    x_fmt: Callable[[float], str],
    y_fmt: Callable[[float], str],
) -> list[str]:
    out = ['<g class="axes" stroke="#d0d5dc" stroke-width="1">']
    x0, x1 = frame.left, frame.left + frame.plot_w
    y0, y1 = frame.top + frame.plot_h, frame.top
    for t in yticks:
        y = sy(t)
        out.append(f'<line x1="{x0}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke-dasharray="2,3"/>')
    out.append(f'<line x1="{x0}" x2="{x1:.1f}" y1="{y0:.1f}" y2="{y0:.1f}" stroke="#8a939e"/>')
    out.append(f'<line x1="{x0}" x2="{x0}" y1="{y0:.1f}" y2="{y1:.1f}" stroke="#8a939e"/>')
    out.append("</g>")
    out.append('<g class="ticks" fill="#4b5563">')
    for t in yticks:
        out.append(f'<text x="{x0 - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{escape(y_fmt(t))}</text>')
    for t in xticks:
        out.append(f'<text x="{sx(t):.1f}" y="{y0 + 14:.1f}" text-anchor="middle">{escape(x_fmt(t))}</text>')
    out.append("</g>")
    if x_label:
        out.append(
            f'<text class="x-label" x="{frame.left + frame.plot_w / 2:.0f}" y="{frame.height - 6}" '
            f'text-anchor="middle" fill="#4b5563">{escape(x_label)}</text>'
        )
    if y_label:
        cy = frame.top + frame.plot_h / 2
        out.append(
            f'<text class="y-label" x="12" y="{cy:.0f}" text-anchor="middle" fill="#4b5563" '
            f'transform="rotate(-90 12 {cy:.0f})">{escape(y_label)}</text>'
        )
    return out


def _legend_layout(names: Sequence[str], frame: Frame) -> tuple[list[tuple[float, int]], int]:
    """Left-to-right legend items under the title, wrapping; returns positions and row count."""
    x, row, out = float(frame.left), 0, []
    limit = frame.width - frame.right
    for name in names:
        w = 16 + 6.2 * len(name)
        if x + w > limit and x > frame.left:
            x, row = float(frame.left), row + 1
        out.append((x, row))
        x += w + 12
    return out, (row + 1 if names else 0)


def _with_legend(frame: Frame, series: Sequence[Series]) -> Frame:
    _, rows = _legend_layout([s.name for s in series], frame)
    return replace(frame, top=22 + 14 * rows + 6)


def _legend(frame: Frame, series: Sequence[Series], colors: Sequence[str]) -> list[str]:
    positions, _ = _legend_layout([s.name for s in series], frame)
    out = ['<g class="legend">']
    for (lx, row), s, color in zip(positions, series, colors, strict=True):
        y = 22 + 14 * row
        out.append(f'<rect x="{lx:.1f}" y="{y:.1f}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 14:.1f}" y="{y + 9:.1f}">{escape(s.name)}</text>')
    out.append("</g>")
    return out


def _colors(series: Sequence[Series]) -> list[str]:
    return [s.color or PALETTE[i % len(PALETTE)] for i, s in enumerate(series)]


def _scales(
    frame: Frame,
    xs: list[float],
    ys: list[float],
    *,
    y_min: float | None,
    y_max: float | None,
    x_ticks: int,
    x_levels: bool = False,
) -> tuple[list[float], list[float], _Axis, _Axis]:
    """Ticks and scales. `x_levels`: x values are load levels (concurrency 1, 2, 4, ...): one
    tick per level, a little padding, and a log2 axis when they span a factor of 8 or more."""
    lo_y = min(ys) if y_min is None else min(y_min, min(ys))
    hi_y = max(ys) if y_max is None else max(y_max, max(ys))
    yticks = nice_ticks(lo_y, hi_y)
    ya, yb = yticks[0], yticks[-1]
    lo_x, hi_x = min(xs), max(xs)
    log = x_levels and lo_x > 0 and hi_x / lo_x >= 8

    def fx(x: float) -> float:
        return math.log2(x) if log else x

    if x_levels:
        xticks = sorted(set(xs))
        a, b = fx(lo_x), fx(hi_x)
        pad = (b - a) * 0.05 if b > a else 0.5
        lo_f, hi_f = a - pad, b + pad
    else:
        if lo_x == hi_x:
            lo_x, hi_x = lo_x - 1, hi_x + 1
        xticks = [t for t in nice_ticks(lo_x, hi_x, x_ticks) if lo_x <= t <= hi_x] or [lo_x, hi_x]
        lo_f, hi_f = lo_x, hi_x

    sx = _Axis(frame.left, lo_f, hi_f - lo_f, frame.plot_w, log=log)
    sy = _Axis(frame.top + frame.plot_h, ya, yb - ya, frame.plot_h, up=True)
    return xticks, yticks, sx, sy


@dataclass(frozen=True)
class _Axis:
    """A value's position on the canvas: `start + (value - lo) / span * size` (log2 of the value
    on a log axis; minus for a y axis, which grows up). Its numbers are read once: line_chart
    scales a telemetry chart's some 3,000 points with them without a call each."""

    start: float
    lo: float
    span: float
    size: float
    log: bool = False
    up: bool = False

    def __call__(self, value: float) -> float:
        offset = ((math.log2(value) if self.log else value) - self.lo) / self.span * self.size
        return self.start - offset if self.up else self.start + offset


# --- generic charts ----------------------------------------------------------------------------


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str = "",
    y_label: str = "",
    x_time: bool = False,
    y_min: float | None = 0.0,
    y_max: float | None = None,
    markers: bool = False,
    x_levels: bool = False,
    frame: Frame | None = None,
    empty_message: str = "no data",
) -> str:
    """One polyline per series; None values break the line. `x_time`: x is epoch seconds;
    `x_levels`: x is a load level (one tick per level, log2 axis over a wide sweep)."""
    frame = frame or Frame()
    # Each point once as floats, None where the line breaks (a telemetry chart has some 3,000:
    # plain finite floats pass without a call).
    lines = [
        # finite floats as they are (x - x is nan for nan and ±inf), anything else through _point
        [(x, y) if type(x) is type(y) is float and x - x == y - y == 0.0 else _point(x, y) for x, y in s.points]
        for s in series
    ]
    xs = [p[0] for line in lines for p in line if p is not None]
    ys = [p[1] for line in lines for p in line if p is not None]
    if not xs:
        return _empty(frame, title, "line", empty_message)
    frame = _with_legend(frame, series)
    xticks, yticks, sx, sy = _scales(frame, xs, ys, y_min=y_min, y_max=y_max, x_ticks=6, x_levels=x_levels)
    if x_time:
        span = max(xs) - min(xs)
        step = nice_step(span / 60.0, 6) * 60.0 if span > 120 else nice_step(span or 1, 6)
        xticks = [t for t in _range(math.ceil(min(xs) / step) * step, max(xs), step)] or [min(xs)]
    x_fmt = fmt_clock if x_time else fmt_number
    colors = _colors(series)
    parts = _open(frame, title, "line")
    parts += _axes(frame, xticks, yticks, sx, sy, x_label=x_label, y_label=y_label, x_fmt=x_fmt, y_fmt=fmt_number)
    for s, color, line in zip(series, colors, lines, strict=True):
        good = [p for p in line if p is not None]
        d = _path(line, sx, sy)
        dash = ' stroke-dasharray="5,3"' if s.dash else ""
        parts.append(f'<g class="series" data-series="{escape(s.name)}" data-points="{len(good)}">')
        if d:
            parts.append(f'<path d="{" ".join(d)}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>')
        if markers or len(good) == 1:
            for x, y in good:
                parts.append(
                    f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}">'
                    f"<title>{escape(s.name)}: {escape(x_fmt(x))} → {escape(fmt_number(y))}</title>"
                    "</circle>"
                )
        parts.append("</g>")
    parts += _legend(frame, series, colors)
    parts.append("</svg>")
    return "".join(parts)


def _path(line: Sequence[tuple[float, float] | None], sx: _Axis, sy: _Axis) -> list[str]:
    """A polyline's path commands: M where the pen comes down (first, and after a None: the line
    breaks there), L while it draws."""
    if sx.log:
        places = [f"{sx(p[0]):.1f},{sy(p[1]):.1f}" if p is not None else None for p in line]
    else:  # sx and sy written out: the same arithmetic in the same order, without a call a point
        x0, xlo, xspan, xsize = sx.start, sx.lo, sx.span, sx.size
        y0, ylo, yspan, ysize = sy.start, sy.lo, sy.span, sy.size
        places = [
            None if p is None else f"{x0 + (p[0] - xlo) / xspan * xsize:.1f},{y0 - (p[1] - ylo) / yspan * ysize:.1f}"
            for p in line
        ]
    d: list[str] = []
    pen = "M"
    for place in places:
        if place is None:
            pen = "M"
        else:
            d.append(pen + place)
            pen = "L"
    return d


def _range(start: float, stop: float, step: float) -> Iterable[float]:
    value = start
    n = 0
    while value <= stop + 1e-9 and n < 100:
        yield value
        value += step
        n += 1


def scatter_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str = "",
    y_label: str = "",
    y_min: float | None = 0.0,
    frame: Frame | None = None,
    empty_message: str = "no data",
) -> str:
    """One dot per point; `Series.meta` gives each dot a tooltip."""
    frame = frame or Frame()
    xs, ys = _bounds(series)
    if not xs:
        return _empty(frame, title, "scatter", empty_message)
    frame = _with_legend(frame, series)
    xticks, yticks, sx, sy = _scales(frame, xs, ys, y_min=y_min, y_max=None, x_ticks=6)
    colors = _colors(series)
    parts = _open(frame, title, "scatter")
    parts += _axes(frame, xticks, yticks, sx, sy, x_label=x_label, y_label=y_label, x_fmt=fmt_number, y_fmt=fmt_number)
    for s, color in zip(series, colors, strict=True):
        good = [(i, x, y) for i, (x, y) in enumerate(s.points) if finite(x) and finite(y)]
        parts.append(f'<g class="series" data-series="{escape(s.name)}" data-points="{len(good)}" fill="{color}">')
        for i, x, y in good:
            tip = s.meta[i] if i < len(s.meta) else f"{fmt_number(float(x))}, {fmt_number(float(y))}"  # type: ignore[arg-type]
            parts.append(
                f'<circle cx="{sx(float(x)):.1f}" cy="{sy(float(y)):.1f}" r="3" fill-opacity="0.75">'  # type: ignore[arg-type]
                f"<title>{escape(s.name)}: {escape(tip)}</title></circle>"
            )
        parts.append("</g>")
    parts += _legend(frame, series, colors)
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class Span:
    """One bar of a timeline: [start, end] with an optional first part (e.g. time to first token)."""

    start: float
    end: float
    first: float | None = None  # end of the first part
    group: str = ""
    ok: bool = True
    label: str = ""


def timeline_chart(
    spans: Sequence[Span],
    *,
    title: str,
    x_label: str = "seconds",
    first_label: str = "waiting for first token",
    rest_label: str = "decoding",
    max_rows: int = 400,
    width: int = 640,
    empty_message: str = "no requests",
) -> str:
    """A Gantt-style chart: one row per span, grouped (coloured) by `group`."""
    spans = [s for s in spans if finite(s.start) and finite(s.end)][:max_rows]
    row_h = 5 if len(spans) > 80 else 9
    if not spans:
        return _empty(Frame(width=width, height=120), title, "timeline", empty_message)
    groups = list(dict.fromkeys(s.group for s in spans))
    colors = {g: PALETTE[i % len(PALETTE)] for i, g in enumerate(groups)}
    legend = [Series(g, [], colors[g]) for g in groups]
    frame = replace(_with_legend(Frame(width=width), legend), bottom=54)
    frame = replace(frame, height=max(120, frame.top + frame.bottom + len(spans) * (row_h + 1)))
    lo = min(s.start for s in spans)
    hi = max(s.end for s in spans)
    if hi <= lo:
        hi = lo + 1
    xticks = [t for t in nice_ticks(lo, hi, 8) if lo <= t <= hi] or [lo]

    def sx(x: float) -> float:
        return frame.left + (x - lo) / (hi - lo) * frame.plot_w

    parts = _open(frame, title, "timeline")
    y0 = frame.top + frame.plot_h
    parts.append('<g class="axes" stroke="#8a939e">')
    parts.append(f'<line x1="{frame.left}" x2="{frame.left + frame.plot_w:.1f}" y1="{y0:.1f}" y2="{y0:.1f}"/>')
    parts.append('</g><g class="ticks" fill="#4b5563">')
    for t in xticks:
        parts.append(f'<text x="{sx(t):.1f}" y="{y0 + 14:.1f}" text-anchor="middle">{escape(fmt_number(t))}</text>')
    parts.append("</g>")
    parts.append(
        f'<text class="x-label" x="{frame.left + frame.plot_w / 2:.0f}" y="{frame.height - 22}" text-anchor="middle" '
        f'fill="#4b5563">{escape(x_label)}</text>'
    )
    for group in groups:
        members = [(i, s) for i, s in enumerate(spans) if s.group == group]
        color = colors[group]
        parts.append(f'<g class="series" data-series="{escape(group)}" data-points="{len(members)}">')
        for i, s in members:
            y = frame.top + i * (row_h + 1)
            x_start, x_end = sx(s.start), sx(s.end)
            tip = escape(s.label or f"{fmt_number(s.start)}–{fmt_number(s.end)} s")
            fill = color if s.ok else "#b42318"
            parts.append(f"<g><title>{escape(group)}: {tip}</title>")
            parts.append(
                f'<rect x="{x_start:.1f}" y="{y:.1f}" width="{max(1.0, x_end - x_start):.1f}" height="{row_h}" '
                f'fill="{fill}" fill-opacity="0.45"/>'
            )
            if s.first is not None and finite(s.first):
                x_first = sx(min(max(s.first, s.start), s.end))
                parts.append(
                    f'<rect x="{x_start:.1f}" y="{y:.1f}" width="{max(0.5, x_first - x_start):.1f}" '
                    f'height="{row_h}" fill="{fill}"/>'
                )
            parts.append("</g>")
        parts.append("</g>")
    parts += _legend(frame, legend, [colors[g] for g in groups])
    parts.append(
        f'<text class="note" x="{frame.left}" y="{frame.height - 6}" fill="#6b7480">'
        f"dark: {escape(first_label)} · light: {escape(rest_label)}</text>"
    )
    parts.append("</svg>")
    return "".join(parts)
