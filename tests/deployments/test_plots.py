"""The SVG charts: valid SVG, the right series and points, gaps for missing values, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from deployments import charts, plots

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    assert root.tag == f"{NS}svg"
    assert root.get("viewBox")
    return root


def series_of(svg: str) -> list[tuple[str, int]]:
    root = parse(svg)
    return [
        (g.get("data-series"), int(g.get("data-points"))) for g in root.iter(f"{NS}g") if g.get("class") == "series"
    ]


def levels(*specs: tuple[int, float]) -> list[dict]:
    return [
        {
            "label": f"c={c}",
            "concurrency": c,
            "duration_s": 2.0,
            "output_tokens_per_s": tps,
            "total_tokens_per_s": tps * 3,
            "ttft_ms": {"mean": 12.0, "p50": 10.0 * c, "p90": 20.0 * c, "p99": 30.0 * c},
            "tpot_ms": {"mean": 5.0, "p50": 5.0, "p90": 6.0, "p99": 7.0},
            "e2e_ms": {"mean": 300.0, "p50": 300.0, "p90": 400.0, "p99": None},
        }
        for c, tps in specs
    ]


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(0, 100), (0, 1), (3.2, 3.2), (0, 123456), (-5, 5), (0.001, 0.004)],
)
def test_nice_ticks_cover_the_range(lo, hi):
    ticks = charts.nice_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert 2 <= len(ticks) <= 12
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) == 1


def test_line_chart_series_points_and_gaps():
    svg = charts.line_chart(
        [
            charts.Series("a", [(0, 1), (1, 2), (2, None), (3, 4), (4, 5)]),
            charts.Series("b", [(0, 3), (4, 3)]),
        ],
        title="Two series",
        x_label="x",
        y_label="y",
    )
    assert series_of(svg) == [("a", 4), ("b", 2)]
    root = parse(svg)
    path = next(g for g in root.iter(f"{NS}g") if g.get("data-series") == "a").find(f"{NS}path")
    assert path.get("d").count("M") == 2  # the None breaks the line
    assert root.find(f"{NS}title").text == "Two series"
    legend = [t.text for g in root.iter(f"{NS}g") if g.get("class") == "legend" for t in g.iter(f"{NS}text")]
    assert legend == ["a", "b"]


def test_text_is_escaped():
    svg = charts.line_chart([charts.Series("<b>&", [(0, 1), (1, 2)])], title='x "<script>"')
    root = parse(svg)
    assert root.find(f"{NS}title").text == 'x "<script>"'
    assert "<script>" not in svg


def test_empty_chart_says_so():
    root = parse(charts.line_chart([], title="Nothing"))
    assert [t.text for t in root.iter(f"{NS}text") if t.get("class") == "no-data"] == ["no data"]
    assert series_of(charts.line_chart([charts.Series("a", [(0, None)])], title="n")) == []


def test_telemetry_chart_one_series_per_gpu_and_breaks_at_holes():
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    rows = {
        i: [
            {"ts": start + timedelta(seconds=10 * k), "util_pct": 50.0, "mem_used_bytes": 2 * 1024**3, "power_w": None}
            for k in range(360)
            if not (i == 1 and 100 <= k < 150)  # GPU1 lost 500 s of samples
        ]
        for i in range(8)
    }
    charts = plots.telemetry_charts(rows)
    assert set(charts) == {"util_pct", "mem_used_bytes", "power_w", "temp_c"}
    assert series_of(charts["util_pct"]) == [(f"GPU{i}", 310 if i == 1 else 360) for i in range(8)]
    gpu1 = next(g for g in parse(charts["util_pct"]).iter(f"{NS}g") if g.get("data-series") == "GPU1")
    assert gpu1.find(f"{NS}path").get("d").count("M") == 2
    # power was never reported: no points, no line, the chart still renders
    assert series_of(charts["power_w"]) == []
    ticks = [t.text for g in parse(charts["util_pct"]).iter(f"{NS}g") if g.get("class") == "ticks" for t in g]
    assert "12:10" in ticks and "100" in ticks  # clock times on x, utilisation up to 100 %


def test_throughput_chart_single_and_compared():
    one = plots.throughput_chart({"run": levels((1, 30.0), (4, 90.0), (2, 55.0))})
    assert series_of(one) == [("output tok/s", 3), ("total tok/s", 3)]
    root = parse(one)
    circles = next(g for g in root.iter(f"{NS}g") if g.get("data-series") == "output tok/s").findall(f"{NS}circle")
    xs = [float(c.get("cx")) for c in circles]
    assert xs == sorted(xs)  # plotted in concurrency order
    both = plots.throughput_chart(
        {"A": levels((1, 30.0), (4, 90.0)), "B": levels((1, 35.0), (4, 120.0), (8, 150.0))}, total=False
    )
    assert series_of(both) == [("A output tok/s", 2), ("B output tok/s", 3)]
    assert "concurrency (streams)" in both


def test_latency_chart_has_three_percentiles():
    svg = plots.latency_chart(levels((1, 30.0), (4, 90.0)), "e2e_ms")
    assert series_of(svg) == [("p50", 2), ("p90", 2), ("p99", 0)]
    assert "E2E latency percentiles (ms)" in svg
    broken = plots.latency_chart([{"label": "x", "concurrency": 1, "ttft_ms": "oops"}], "ttft_ms")
    assert series_of(broken) == []


def test_rate_levels_use_the_rate_axis():
    svg = plots.throughput_chart(
        {"r": [{"label": "2.0 req/s", "concurrency": None, "rate": 2.0, "output_tokens_per_s": 9}]}
    )
    assert series_of(svg)[0] == ("output tok/s", 1)
    assert "request rate (req/s)" in svg


def test_request_scatter_and_timeline_follow_the_levels():
    lv = levels((1, 30.0), (2, 50.0))
    raw = [
        {"level": "c=1", "start_ms": 0.0, "ttft_ms": 20.0, "e2e_ms": 500.0, "ok": True, "output_tokens": 16},
        {"level": "c=1", "start_ms": 600.0, "ttft_ms": 20.0, "e2e_ms": 500.0, "ok": True, "output_tokens": 16},
        {"level": "c=2", "start_ms": 0.0, "ttft_ms": 30.0, "e2e_ms": 700.0, "ok": True, "output_tokens": 16},
        {"level": "c=2", "start_ms": 1.0, "ttft_ms": None, "e2e_ms": None, "ok": False, "error": "boom"},
    ]
    assert series_of(plots.request_scatter(raw, lv)) == [("level c=1", 2), ("level c=2", 1)]
    spans = plots.request_spans(raw, lv)
    assert spans[2].start == pytest.approx(2.0)  # level c=2 began after c=1's 2 s
    assert spans[3].ok is False and spans[3].first is None
    timeline = plots.request_timeline(raw, lv)
    assert series_of(timeline) == [("level c=1", 2), ("level c=2", 2)]
    assert "failed: boom" in timeline
    assert series_of(plots.request_timeline([], lv)) == []
