"""The benchmark gate's verdict from two stored runs (serving.benchmarking.gate): pure, no database."""

from __future__ import annotations

from typing import Any

import pytest

from serving.benchmarking.gate import GateInputError, gate_decide, parse_limits, run_figures, validate_limits


def stored(decode: float, ttfts: list[float], *, j: float | None = None, label: str = "concurrency 1") -> tuple:
    """A run as the panel stores it: results with levels, and raw per-request records."""
    results: dict[str, Any] = {
        "levels": [
            {
                "label": label,
                "completed": len(ttfts),
                "decode_tokens_per_s": {"mean": decode, "p50": decode},
                "output_tokens_per_s": decode * 0.9,
            }
        ],
        "joules_per_output_token": j,
    }
    raw = [{"level": label, "ok": True, "ttft_ms": t} for t in ttfts]
    return results, raw


def decide(base: tuple, cand: tuple, limits: str):
    return gate_decide(run_figures(*base), run_figures(*cand), parse_limits(limits))


def test_a_slower_decode_beyond_its_limit_fails_and_says_by_how_much():
    verdict = decide(stored(100.0, [50] * 4), stored(80.0, [50] * 4), "decode=5,ttft_p95=10")
    assert not verdict.passed
    (decode,) = [r for r in verdict.rows if r.metric == "decode"]
    assert decode.passed is False and decode.change_pct == pytest.approx(-20.0)
    assert "20.0 % below, beyond the 5 % allowed" in decode.note
    assert verdict.summary.startswith("decode tokens/s per stream at concurrency 1: 20.0 % below")
    assert [r.passed for r in verdict.rows if r.metric == "ttft_p95"] == [True]


def test_within_the_limits_passes_and_a_faster_revision_passes():
    assert decide(stored(100.0, [50] * 4), stored(97.0, [54] * 4), "decode=5,ttft_p95=10").passed
    faster = decide(stored(100.0, [50] * 4), stored(130.0, [30] * 4), "decode=0,ttft_p95=0")
    assert faster.passed and faster.summary == "all 2 figures within the limits"


def test_ttft_p95_is_the_95th_percentile_of_the_requests_and_rises_fail():
    base = stored(100.0, [10, 10, 10, 10, 10, 10, 10, 10, 10, 10])
    cand = stored(100.0, [10, 10, 10, 10, 10, 10, 10, 10, 10, 100])  # one slow first token
    (row,) = decide(base, cand, "ttft_p95=10").rows
    assert row.baseline == 10 and row.candidate == pytest.approx(59.5)
    assert row.passed is False and "above" in row.note


def test_energy_is_judged_only_when_both_runs_measured_it():
    without = decide(stored(100.0, [5], j=None), stored(100.0, [5], j=0.5), "j_per_token=5,decode=5")
    (energy,) = [r for r in without.rows if r.metric == "j_per_token"]
    assert energy.passed is None and energy.note == "not measured on both"
    assert without.passed
    worse = decide(stored(100.0, [5], j=0.5), stored(100.0, [5], j=0.6), "j_per_token=5")
    assert not worse.passed and worse.rows[0].change_pct == pytest.approx(20.0)


def test_a_level_the_new_revision_measured_nothing_in_fails():
    base = stored(100.0, [5, 5])
    results, _raw = stored(0.0, [])
    verdict = decide(base, (results, []), "decode=50")
    assert not verdict.passed and verdict.rows[0].note == "the new revision measured nothing here"


def test_nothing_measured_on_both_is_no_pass():
    verdict = decide(stored(100.0, [5], j=None), stored(100.0, [5], j=None), "j_per_token=5")
    assert not verdict.passed and "nothing the limits name was measured" in verdict.summary


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one limit"),
        ("speed=5", "unknown gate metric 'speed'"),
        ("decode=-1", "0 % or more"),
        ("decode=abc", "must be a number"),
        ("decode=nan", "0 % or more"),
        ("decode=5000", "at most 1000 %"),
        ("decode", "METRIC=PERCENT"),
        ("decode=5,decode=6", "given twice"),
    ],
)
def test_bad_limits_are_refused_with_a_clear_reason(text, message):
    with pytest.raises(GateInputError, match=message):
        parse_limits(text)


def test_limits_from_a_json_body_are_checked_the_same_way():
    assert validate_limits({"decode": 5, "ttft_p95": "10"}) == {"decode": 5.0, "ttft_p95": 10.0}
    for bad in ({"decode": True}, {"decode": [1]}, {}, {"x": 1}):
        with pytest.raises(GateInputError):
            validate_limits(bad)
