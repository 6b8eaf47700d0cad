"""Benchmark regressions, on the figures of two real sweeps of the same revision and profile
(tests/fixtures/gpu/h200: flow.json and flow_partial.json, recorded on an H200 about 30 minutes
apart): what a rule's limits call a regression, and what stays run-to-run noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from notifications.regression import DEFAULT_THRESHOLDS, Comparison, compare, regressions

H200 = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h200"


def results(name: str) -> dict:
    return json.loads((H200 / name).read_text())["benchmark"]["export"]["results"]


def test_the_default_limits_call_two_recorded_runs_of_one_config_noise():
    """Decode -8.6 % and TTFT +15.7 % at 16 streams between two runs of one config: within
    the default limits (decode 10 %, TTFT p50 20 %), so nobody is woken for it."""
    pairs = compare(results("flow.json"), results("flow_partial.json"))
    assert {c.level for c in pairs} == {f"concurrency {n}" for n in (1, 2, 4, 8, 16)} | {"run"}
    assert regressions(pairs, DEFAULT_THRESHOLDS) == []


def test_tighter_limits_find_the_slower_level_and_say_by_how_much():
    pairs = compare(results("flow.json"), results("flow_partial.json"))
    found = regressions(pairs, {"decode_tok_s": 5, "ttft_p50": 10})
    assert [(r.comparison.metric, r.comparison.level) for r in found] == [
        ("decode_tok_s", "concurrency 16"),
        ("ttft_p50", "concurrency 16"),
    ]
    decode, ttft = (r.line for r in found)
    assert decode == "decode tok/s (median request) at concurrency 16: 193.5 -> 177.0 (-8.6 %, limit -5 %)"
    assert ttft == "TTFT p50 at concurrency 16: 305.2 ms -> 353.1 ms (+15.7 %, limit +10 %)"


def test_direction_matters_faster_is_never_a_regression():
    after_faster = Comparison("decode_tok_s", "c1", before=40.0, after=80.0)
    lower_latency = Comparison("ttft_p50", "c1", before=200.0, after=100.0)
    assert regressions([after_faster, lower_latency], {"decode_tok_s": 1, "ttft_p50": 1}) == []
    assert after_faster.worse_pct == pytest.approx(-100.0)


def test_missing_zero_and_garbage_figures_are_skipped_not_fatal():
    before = {"levels": [{"label": "c1", "ttft_ms": {"p50": 0}, "decode_tokens_per_s": {"p50": "fast"}}, "junk"]}
    after = {"levels": [{"label": "c1", "ttft_ms": {"p50": 50.0}, "decode_tokens_per_s": {"p50": float("nan")}}, 7]}
    pairs = compare(before, after)
    assert [c.metric for c in pairs] == ["ttft_p50"]  # zero before: no percentage, no regression
    assert regressions(pairs, {"ttft_p50": 1}) == []
    assert compare({}, {"levels": None}) == []
