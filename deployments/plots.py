"""The panel's plots: its stored shapes (telemetry rows per GPU, benchmark levels, per-request
records, engine metrics, the host's CPU and memory, the planner's error) as deployments/charts.py's
SVG charts. Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from deployments.charts import (
    PALETTE,
    Frame,
    Point,
    Series,
    Span,
    finite,
    fmt_number,
    line_chart,
    scatter_chart,
    timeline_chart,
)

# --- telemetry ---------------------------------------------------------------------------------

TELEMETRY_FIELDS: dict[str, tuple[str, str, Callable[[Any], float | None] | None, float | None]] = {
    # key: (title, unit, value from row (None: as stored), fixed y max)
    "util_pct": ("GPU utilisation", "%", None, 100.0),
    "mem_used_bytes": ("Memory used", "GiB", lambda v: v / 1024**3, None),
    "power_w": ("Power", "W", None, None),
    "temp_c": ("Temperature", "°C", None, None),
}


def _epoch(ts: Any) -> float:
    if isinstance(ts, datetime):
        return ts.timestamp()
    return float(ts)


def telemetry_chart(
    rows_by_gpu: Mapping[Any, Sequence[Mapping[str, Any]]],
    key: str,
    *,
    gap_s: float = 180.0,
    frame: Frame | None = None,
) -> str:
    """One line per GPU of one telemetry field; a hole longer than `gap_s` breaks the line."""
    return _telemetry_chart(rows_by_gpu, key, _times(rows_by_gpu), gap_s=gap_s, frame=frame)


def _times(rows_by_gpu: Mapping[Any, Sequence[Mapping[str, Any]]]) -> dict[Any, list[float]]:
    """Each row's time in epoch seconds, read once for all of a GPU's charts."""
    return {gpu: [_epoch(row["ts"]) for row in rows] for gpu, rows in rows_by_gpu.items()}


def _telemetry_chart(
    rows_by_gpu: Mapping[Any, Sequence[Mapping[str, Any]]],
    key: str,
    times: Mapping[Any, Sequence[float]],
    *,
    gap_s: float = 180.0,
    frame: Frame | None = None,
) -> str:
    title, unit, conv, y_max = TELEMETRY_FIELDS[key]
    series = []
    for gpu, rows in rows_by_gpu.items():
        points: list[Point] = []
        last: float | None = None
        for t, row in zip(times[gpu], rows, strict=True):
            if last is not None and t - last > gap_s:
                points.append((t, None))
            value = row.get(key)
            points.append((t, value if conv is None or value is None else conv(value)))
            last = t
        series.append(Series(f"GPU{gpu}", points))
    return line_chart(
        series,
        title=f"{title} ({unit})",
        y_label=unit,
        x_time=True,
        y_max=y_max,
        frame=frame,
        empty_message="no telemetry in the last hour",
    )


def telemetry_charts(rows_by_gpu: Mapping[Any, Sequence[Mapping[str, Any]]]) -> dict[str, str]:
    times = _times(rows_by_gpu)
    return {key: _telemetry_chart(rows_by_gpu, key, times) for key in TELEMETRY_FIELDS}


# --- benchmarks --------------------------------------------------------------------------------


def _level_x(level: Mapping[str, Any], index: int) -> float:
    for key in ("concurrency", "rate"):
        if finite(level.get(key)):
            return float(level[key])
    return float(index + 1)


def _x_label(levels: Sequence[Mapping[str, Any]]) -> str:
    if levels and all(finite(lv.get("concurrency")) for lv in levels):
        return "concurrency (streams)"
    if levels and all(finite(lv.get("rate")) for lv in levels):
        return "request rate (req/s)"
    return "level"


def _num(value: Any) -> float | None:
    return float(value) if finite(value) else None


def throughput_chart(runs: Mapping[str, Sequence[Mapping[str, Any]]], *, total: bool = True) -> str:
    """Output (and total) tokens/s against concurrency; one run or several overlaid (compare)."""
    series = []
    all_levels: list[Mapping[str, Any]] = []
    several = len(runs) > 1
    for i, (name, levels) in enumerate(runs.items()):
        all_levels += list(levels)
        color = PALETTE[i % len(PALETTE)]
        ordered = sorted(enumerate(levels), key=lambda p: _level_x(p[1], p[0]))
        out = [(_level_x(lv, j), _num(lv.get("output_tokens_per_s"))) for j, lv in ordered]
        series.append(Series(f"{name} output tok/s" if several else "output tok/s", out, color=color))
        if total:
            tot = [(_level_x(lv, j), _num(lv.get("total_tokens_per_s"))) for j, lv in ordered]
            series.append(Series(f"{name} total tok/s" if several else "total tok/s", tot, color=color, dash=True))
    if not several and series:
        series = [Series(series[0].name, series[0].points, PALETTE[0])] + [
            Series(s.name, s.points, PALETTE[1], dash=True) for s in series[1:]
        ]
    return line_chart(
        series,
        title="Throughput vs concurrency",
        x_label=_x_label(all_levels),
        y_label="tokens/s",
        markers=True,
        x_levels=True,
        empty_message="no finished levels",
    )


def _percentile(level: Mapping[str, Any], metric: str, p: str) -> float | None:
    values = level.get(metric)
    return _num(values.get(p)) if isinstance(values, Mapping) else None


LATENCY_METRICS = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "E2E latency"}


def latency_chart(levels: Sequence[Mapping[str, Any]], metric: str) -> str:
    """p50, p90 and p99 of one latency metric per level."""
    ordered = sorted(enumerate(levels), key=lambda p: _level_x(p[1], p[0]))
    series = [
        Series(p, [(_level_x(lv, j), _percentile(lv, metric, p)) for j, lv in ordered]) for p in ("p50", "p90", "p99")
    ]
    return line_chart(
        series,
        title=f"{LATENCY_METRICS.get(metric, metric)} percentiles (ms)",
        x_label=_x_label(levels),
        y_label="ms",
        markers=True,
        x_levels=True,
        empty_message="no finished levels",
    )


def level_offsets(levels: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds from the run's start at which each level began (levels run one after another)."""
    offsets: dict[str, float] = {}
    t = 0.0
    for lv in levels:
        offsets[str(lv.get("label"))] = t
        t += float(lv.get("duration_s") or 0.0)
    return offsets


def request_spans(raw: Sequence[Mapping[str, Any]], levels: Sequence[Mapping[str, Any]]) -> list[Span]:
    offsets = level_offsets(levels)
    spans = []
    for rec in raw:
        if not finite(rec.get("start_ms")):
            continue
        base = offsets.get(str(rec.get("level")), 0.0)
        start = base + float(rec["start_ms"]) / 1000.0
        e2e = _num(rec.get("e2e_ms"))
        ttft = _num(rec.get("ttft_ms"))
        end = start + (e2e / 1000.0 if e2e is not None else 0.0)
        label = (
            f"start {start:.2f}s · TTFT {fmt_number(ttft) if ttft is not None else '–'} ms · "
            f"E2E {fmt_number(e2e) if e2e is not None else '–'} ms · {rec.get('output_tokens') or 0} tokens"
            + ("" if rec.get("ok", True) else f" · failed: {rec.get('error') or ''}")
        )
        spans.append(
            Span(
                start=start,
                end=end,
                first=start + ttft / 1000.0 if ttft is not None else None,
                group=f"level {rec.get('level')}",
                ok=bool(rec.get("ok", True)),
                label=label,
            )
        )
    return spans


def request_scatter(raw: Sequence[Mapping[str, Any]], levels: Sequence[Mapping[str, Any]]) -> str:
    """E2E latency of every request against when it started in the run, coloured by level."""
    offsets = level_offsets(levels)
    by_level: dict[str, list[Point]] = {}
    meta: dict[str, list[str]] = {}
    for rec in raw:
        label = str(rec.get("level"))
        start = rec.get("start_ms")
        e2e = _num(rec.get("e2e_ms"))
        if not finite(start) or e2e is None:
            continue
        x = offsets.get(label, 0.0) + float(start) / 1000.0
        by_level.setdefault(label, []).append((x, e2e))
        ttft = _num(rec.get("ttft_ms"))
        meta.setdefault(label, []).append(
            f"at {x:.2f}s: E2E {fmt_number(e2e)} ms, TTFT {fmt_number(ttft) if ttft is not None else '–'} ms"
        )
    series = [Series(f"level {k}", pts, meta=meta[k]) for k, pts in by_level.items()]
    return scatter_chart(
        series,
        title="Per-request E2E latency over the run",
        x_label="seconds since the run started",
        y_label="ms",
        empty_message="no per-request records",
    )


def request_timeline(raw: Sequence[Mapping[str, Any]], levels: Sequence[Mapping[str, Any]]) -> str:
    spans = request_spans(raw, levels)
    return timeline_chart(spans, title="Requests over time", x_label="seconds since the run started")


# --- engine metrics ----------------------------------------------------------------------------


def engine_charts(rows: Sequence[Mapping[str, Any]], *, gap_s: float = 180.0) -> dict[str, str]:
    """The engine's own last hour: requests running/waiting, KV cache use, generated tokens/s
    (from the counter's increase between samples; a counter that drops means a restart)."""
    running: list[Point] = []
    waiting: list[Point] = []
    kv: list[Point] = []
    rate: list[Point] = []
    last_t: float | None = None
    last_count: float | None = None
    for row in rows:
        t = _epoch(row["ts"])
        if last_t is not None and t - last_t > gap_s:
            for points in (running, waiting, kv, rate):
                points.append((t, None))
        running.append((t, _num(row.get("requests_running"))))
        waiting.append((t, _num(row.get("requests_waiting"))))
        usage = _num(row.get("kv_cache_usage"))
        kv.append((t, usage * 100.0 if usage is not None else None))
        count = _num(row.get("generation_tokens_total"))
        if count is not None and last_count is not None and last_t is not None and t > last_t and count >= last_count:
            rate.append((t, (count - last_count) / (t - last_t)))
        last_t, last_count = t, count if count is not None else last_count
    # The three share the time axis and what they say when the hour holds no sample.
    chart = partial(line_chart, x_time=True, empty_message="no engine metrics in the last hour")
    return {
        "engine_requests": chart(
            [Series("running", running), Series("waiting", waiting, dash=True)],
            title="Engine requests",
            y_label="requests",
        ),
        "engine_kv": chart([Series("KV cache used", kv)], title="KV cache usage (%)", y_label="%", y_max=100.0),
        "engine_tokens": chart([Series("generated", rate)], title="Generated tokens/s", y_label="tok/s"),
    }


# --- the host's CPU and memory -----------------------------------------------------------------


def _lines(
    rows: Sequence[Mapping[str, Any]], values: Mapping[str, Callable[[Mapping[str, Any]], float | None]], gap_s: float
) -> dict[str, list[Point]]:
    """One line of points per name in `values` over time; a hole longer than `gap_s` breaks them all."""
    lines: dict[str, list[Point]] = {name: [] for name in values}
    last: float | None = None
    for row in rows:
        t = _epoch(row["ts"])
        for name, value in values.items():
            if last is not None and t - last > gap_s:
                lines[name].append((t, None))
            lines[name].append((t, value(row)))
        last = t
    return lines


def _gib_of(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda row: v / 1024**3 if (v := _num(row.get(key))) is not None else None


def usage_charts(rows: Sequence[Mapping[str, Any]], *, gap_s: float = 180.0) -> dict[str, str]:
    """The host's own last hour (hardware.selectors.usage_series): CPU busy, load average, and
    RAM used of its total with swap used."""
    lines = _lines(
        rows,
        {
            "cpu": lambda row: _num(row.get("cpu_pct")),
            "load_1": lambda row: _num(row.get("load_1")),
            "load_15": lambda row: _num(row.get("load_15")),
            "ram_used": _gib_of("mem_used_bytes"),
            "ram_total": _gib_of("mem_total_bytes"),
            "swap_used": _gib_of("swap_used_bytes"),
        },
        gap_s,
    )
    empty = "no CPU or memory samples in the last hour"
    return {
        "host_cpu": line_chart(
            [Series("CPU busy", lines["cpu"])],
            title="CPU busy, all cores (%)",
            y_label="%",
            x_time=True,
            y_max=100.0,
            empty_message=empty,
        ),
        "host_load": line_chart(
            [Series("1 min", lines["load_1"]), Series("15 min", lines["load_15"], dash=True)],
            title="Load average",
            y_label="tasks",
            x_time=True,
            empty_message=empty,
        ),
        "host_memory": line_chart(
            [
                Series("RAM used", lines["ram_used"]),
                Series("RAM total", lines["ram_total"], dash=True),
                Series("swap used", lines["swap_used"]),
            ],
            title="Memory (GiB)",
            y_label="GiB",
            x_time=True,
            empty_message=empty,
        ),
    }


def planner_error_chart(points: Sequence[Mapping[str, Any]]) -> str:
    """A host's planner error over time (deployments.memory_models.PlannerErrorPoint rows: ts,
    label, planned_bytes, measured_bytes): measured minus planned, in % of planned, one line per
    revision and device. Above 0 the engine held more than the planner said."""
    lines: dict[str, list[Point]] = {}
    for row in points:
        planned, measured = _num(row.get("planned_bytes")), _num(row.get("measured_bytes"))
        error = 100.0 * (measured - planned) / planned if planned and measured is not None else None
        lines.setdefault(str(row.get("label")), []).append((_epoch(row["ts"]), error))
    return line_chart(
        [Series(name, line) for name, line in lines.items()],
        title="Planner error: measured vs planned memory (%)",
        y_label="%",
        x_time=True,
        y_min=None,
        markers=True,
        empty_message="no memory measured on this host yet",
    )


# --- tuning runs -------------------------------------------------------------------------------


def pareto_chart(
    points: Sequence[Mapping[str, Any]], *, title: str, x_label: str, y_label: str, empty_message: str = ""
) -> str:
    """A tuning run's measured trials, the objective (y) against one cost (x): the base revision,
    the trials on the Pareto front (nothing beats them on both at once) and the others, each dot
    named in its tooltip. `points`: {"x", "y", "label", "front": bool, "base": bool}."""
    groups: dict[str, tuple[str, list[Point], list[str]]] = {
        "base": ("#495057", [], []),
        "Pareto front": (PALETTE[1], [], []),
        "other trials": (PALETTE[0], [], []),
    }
    for p in points:
        x, y = _num(p.get("x")), _num(p.get("y"))
        if x is None or y is None:
            continue
        name = "base" if p.get("base") else "Pareto front" if p.get("front") else "other trials"
        _, dots, tips = groups[name]
        dots.append((x, y))
        tips.append(f"{p.get('label', '')}: {fmt_number(x)} {x_label}, {fmt_number(y)} {y_label}")
    series = [Series(name, dots, color, meta=tips) for name, (color, dots, tips) in groups.items() if dots]
    return scatter_chart(
        series,
        title=title,
        x_label=x_label,
        y_label=y_label,
        empty_message=empty_message or "no trial measured this yet",
    )
