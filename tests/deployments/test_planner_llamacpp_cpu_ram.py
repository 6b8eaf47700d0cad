"""The planner's host RAM for a CPU-only llama.cpp engine against real runs of the shipped model.

Replays tests/fixtures/cpu/llamacpp_memory.json (bench/bench_llamacpp_cpu_memory.py: the real
llama-server on the shipped Gemma 3 270M GGUF at contexts 2048-32768, 1-4 slots, three ubatch
sizes, flash attention on and off, a q8_0 cache; its peak RSS and its own buffer lines) and holds the
planner's figure for each setting against it, term by term, then in total.

What the planner does not follow, said here rather than hidden:
- the CPU_REPACK buffer (x86 weights repacked for the CPU kernels: 12.66 MiB here, 3-4 % of the
  peak) is inside the measured runtime constant, not a term of its own: which tensors are repacked
  needs the tensor types, which the catalog does not keep;
- the process's own memory grows with the prompt a slot holds (~30 MiB more after an 8k-token
  prompt than after 2k ones); slots longer than 8192 were not filled in the bench's time, so the
  planner keeps one measured constant (memory.LLAMA_CPU_RUNTIME);
- the prompt cache (--cache-ram): it grows with distinct prompts up to its limit, so the report
  names the limit (ram_parts["prompt_cache_limit"]) beside the total instead of in it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cpu_memory import planner_ram
from tests.support.llama import gemma_model_path

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "cpu" / "llamacpp_memory.json").read_text())
RUNS = FIXTURE["runs"]
MiB = 1 << 20


def _label(run: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in run["knobs"].items() if k not in ("n_gpu_layers", "threads"))


def _planned(run: dict[str, Any]) -> dict[str, int]:
    return planner_ram(run["knobs"], gemma_model_path())


def test_the_repack_buffer_the_runtime_constant_holds_is_this_size() -> None:
    """The x86 repack of the Q4_K tensors, logged by every run: inside LLAMA_CPU_RUNTIME, not a term."""
    assert {r["engine"]["model_buffers_mib"].get("CPU_REPACK") for r in RUNS} == {12.66}


def test_the_fixture_is_the_shipped_model_and_covers_the_settings() -> None:
    assert Path(gemma_model_path()).stat().st_size == FIXTURE["model"]["bytes"]
    knobs = [r["knobs"] for r in RUNS]
    assert {k["ctx_size"] for k in knobs} >= {2048, 8192, 32768}
    assert {k["parallel"] for k in knobs} >= {1, 2, 4}
    assert {k.get("ubatch_size", 512) for k in knobs} >= {128, 512, 1024}
    assert {k.get("flash_attn", "auto") for k in knobs} >= {"auto", "off"}
    assert any(r["after_fill"] for r in RUNS), "no run filled a slot: no peak with the compute buffer touched"


@pytest.mark.parametrize("run", RUNS, ids=_label)
def test_each_buffer_as_the_engine_logged_it(run: dict[str, Any]) -> None:
    """KV cache, compute buffer and output buffer: the planner's bytes against llama.cpp's own lines."""
    planned, logged = _planned(run), run["engine"]
    assert planned["kv_cache"] == pytest.approx(sum(logged["kv_mib"]) * MiB, abs=0.05 * MiB)
    assert planned["compute_buffer"] == pytest.approx(sum(logged["compute_mib"].values()) * MiB, rel=0.10)
    assert planned["output_buffer"] == pytest.approx(sum(logged["output_mib"].values()) * MiB, abs=0.05 * MiB)
    assert planned["weights"] == FIXTURE["model"]["bytes"]


@pytest.mark.parametrize("run", [r for r in RUNS if r["after_fill"]], ids=_label)
def test_total_within_ten_percent_of_the_peak_after_a_slot_was_filled(run: dict[str, Any]) -> None:
    """After one prompt filled a slot (every page of the compute buffer touched) the planner's total is
    within 10 % of llama-server's peak RSS."""
    planned, peak = _planned(run)["total"], run["peak_rss"]
    assert abs(planned - peak) <= 0.10 * peak, f"planned {planned / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB"


def test_the_gap_the_planner_leaves_grows_with_the_prompt_a_slot_held() -> None:
    """Stated, not hidden: the peak less the planner's total is within 4 % after prompts of up to 2k tokens and ~33 MiB
    (6.5 %) after an 8k-token one; the planner's runtime is one constant."""
    filled = [(r["after_fill"]["prompt_tokens"], r["peak_rss"], _planned(r)["total"]) for r in RUNS if r["after_fill"]]
    assert all(abs(peak - total) <= 0.04 * peak for tokens, peak, total in filled if tokens <= 2048)
    tokens, peak, total = max(filled)
    assert tokens > 8000
    assert 25 * MiB <= peak - total <= 40 * MiB


@pytest.mark.parametrize("run", [r for r in RUNS if not r["after_fill"]], ids=_label)
def test_never_below_the_peak_when_the_slot_was_too_long_to_fill(run: dict[str, Any]) -> None:
    """Slots too long to fill in the bench's time saw one short chat, which touches little of the
    compute buffer (it is sized for a full ubatch over every cell). The planner counts the whole
    buffer, as a long prompt will use it: never below the measured peak, and above it by no more
    than that buffer and 10 %."""
    planned, peak = _planned(run), run["peak_rss"]
    assert planned["total"] >= peak
    assert planned["total"] - planned["compute_buffer"] <= 1.10 * peak


def test_the_issues_setting_is_no_longer_planned_low() -> None:
    """Issue 41: ctx 2048 with 2 slots was planned at 277 MiB (weights + KV) against 364 MiB held."""
    run = next(
        r for r in RUNS if r["knobs"]["ctx_size"] == 2048 and r["knobs"]["parallel"] == 2 and len(r["knobs"]) == 4
    )
    planned = _planned(run)
    assert planned["weights"] + planned["kv_cache"] < 0.9 * run["peak_rss"]  # the old figure, still low
    assert abs(planned["total"] - run["peak_rss"]) <= 0.10 * run["peak_rss"]
    assert planned["prompt_cache_limit"] == 8192 * MiB  # llama-server's default --cache-ram, named


def test_the_prompt_cache_grows_past_the_plan_up_to_the_limit_it_names() -> None:
    """Issue 41's 647 MiB peak: llama-server keeps earlier prompts' slot states in its prompt cache as
    new ones arrive, so its RSS climbs past the planned total with use (8 distinct ~800-token prompts
    at ctx 2048, 2 slots). The planner names the cache's limit (--cache-ram, 8 GiB by default) beside
    the total instead of in it: counted in, no CPU host would fit a 270M model."""
    run = FIXTURE["prompt_cache"]
    planned = _planned(run)
    after = [s["VmRSS"] for s in run["after_distinct_prompts"]]
    assert len(after) == 8 and after == sorted(after)
    assert after[-1] - after[0] > 100 * MiB
    assert after[-1] > 1.2 * planned["total"]
    assert planned["prompt_cache_limit"] == 8192 * MiB
