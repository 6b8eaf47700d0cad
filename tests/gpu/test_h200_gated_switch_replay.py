"""Issue 28's gated switches on the H200, replayed (tests/fixtures/gpu/h200/flow_gate*.json).

`tools/gpu_run/flow.py --gate` on a lent H200 (2026-12-04): the panel's own flow on the
random-weight 0.85B llama (r1 serving), then two switches from r1 through the real agent, each
carrying the gate `decode=5,ttft_p95=15,j_per_token=10` on the profile `gate-h200` (24 requests
of 512 in / 256 out at 1 and 8 streams): to r3, the same model prefilling 16 tokens at a time
(slower on purpose), and to r4, the same settings as r1. The gate ran r1's profile first (r1 had
no run of it), then the candidate's once its health gate passed, decided, and kept or rolled back.

`flow_gate.json` (commit 9a2adb7, each run's prompts naming the run): r3 rolled back by its
decode at 8 streams, r4 kept. `flow_gate_cached.json` (commit ff30785, before that): r4 was
rolled back too, because r1 had served the same prompts in the flow's earlier sweep and answered
the baseline from llama-server's prompt cache (509 of 512 tokens) while the freshly started r4
prefilled all of them; that is why every run's prompts now name the run
(serving/benchmarking/workload.py, tests/hostagent/runtime/test_loadgen.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.benchmarking.gate import gate_decide, parse_limits, run_figures
from serving.planner.memory import planned_bytes_per_gpu
from tests.gpu.test_h200_decode_gate_replay import levels

H200 = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h200"
LIMITS = "decode=5,ttft_p95=15,j_per_token=10"  # the gate the two switches carried


def gate(revision: int, name: str = "flow_gate.json") -> dict[str, Any]:
    (found,) = [g for g in json.loads((H200 / name).read_text())["gates"] if g["revision"] == revision]
    return found


def decide(entry: dict[str, Any], limits: str = LIMITS) -> Any:
    base, cand = entry["runs"]["baseline"], entry["runs"]["candidate"]
    return gate_decide(
        run_figures(base["results"], base["raw"]), run_figures(cand["results"], cand["raw"]), parse_limits(limits)
    )


def cached_tokens(run: dict[str, Any]) -> list[int]:
    """llama-server's `cache_n` of each request: prompt tokens it took from its cache."""
    return [record["server_timings"]["cache_n"] for record in run["raw"]]


def test_the_slower_revision_is_rolled_back_by_its_decode_with_the_panels_own_verdict() -> None:
    slow = gate(3)
    assert slow["state"] == "rolled_back" and slow["runs"]["baseline"]["revision"] == 1
    again = decide(slow)
    assert not again.passed and again.summary == slow["verdict"]["summary"]
    rows = {(row.metric, row.level): row for row in again.rows}
    assert rows[("decode", "concurrency 8")].change_pct == pytest.approx(-29.5, abs=0.1)
    assert rows[("decode", "concurrency 1")].passed  # one stream is no slower: prefill is what changed
    assert rows[("ttft_p95", "concurrency 1")].change_pct > 100  # 16-token prefill chunks: first tokens wait
    assert [r["passed"] for r in slow["verdict"]["rows"]] == [row.passed for row in again.rows]


def test_the_revision_equal_to_the_running_one_is_kept() -> None:
    equal = gate(4)
    assert equal["state"] == "passed" and equal["message"] == "the same as r1"  # the gate's state: kept
    again = decide(equal)
    assert again.passed and again.summary == equal["verdict"]["summary"] == "all 5 figures within the limits"
    rows = {(row.metric, row.level): row for row in again.rows}
    assert abs(rows[("j_per_token", "run")].change_pct) < 3 and abs(rows[("decode", "concurrency 1")].change_pct) < 3


@pytest.mark.parametrize("revision", [3, 4])
def test_the_panels_decode_agrees_with_the_engines_own_timings_and_energy_is_measured(revision: int) -> None:
    for side in ("baseline", "candidate"):
        run = gate(revision)["runs"][side]
        assert run["results"]["energy_source"] and run["results"]["joules_per_output_token"] > 0
        assert max(cached_tokens(run)) < 40  # the chat template's opening at most: every prompt prefilled
        for concurrency, level in levels(run).items():
            assert level.completed == level.requested == 24 and level.failed == 0
            panel, engine = level.decode_tokens_per_s["mean"], level.engine_decode_tokens_per_s["mean"]
            assert abs(panel / engine - 1) <= 0.03, (revision, side, concurrency, panel, engine)


@pytest.mark.parametrize("revision", [3, 4])
def test_planned_against_measured_gpu_memory_of_each_candidate(revision: int) -> None:
    entry = gate(revision)
    plan = entry["planner"]
    # The planner's bytes per GPU as the panel stores them (deployments.planning.planned_memory).
    planned = planned_bytes_per_gpu(
        plan["weights_bytes_per_gpu"], plan["kv_pool_bytes_per_gpu"], plan["overheads_per_gpu"]
    )
    (sample,) = entry["gpu_samples_while_measured"]
    (engine,) = sample["processes"]  # the candidate's llama-server, the only process on the GPU
    measured = engine["used_memory_bytes"]
    error = 100 * (measured - planned) / planned
    print(f"r{revision}: planned {planned / 2**30:.2f} GiB, measured {measured / 2**30:.2f} GiB ({error:+.1f} %)")
    assert -10 < error < 5  # the plan is an upper bound, within a tenth


def test_before_runs_named_themselves_a_cached_baseline_rolled_back_the_equal_revision() -> None:
    equal = gate(4, "flow_gate_cached.json")
    baseline, candidate = equal["runs"]["baseline"], equal["runs"]["candidate"]
    assert min(cached_tokens(baseline)) > 500 and max(cached_tokens(candidate)) < 40
    assert equal["state"] == "rolled_back"
    failed = [(row.metric, row.level) for row in decide(equal).rows if not row.passed]
    assert failed == [("ttft_p95", "concurrency 8")]  # the first token only: decode and J/token agreed
