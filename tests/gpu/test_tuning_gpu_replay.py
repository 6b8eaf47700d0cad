"""Issue 43's tuning run on a GPU, replayed (tests/fixtures/gpu/tuning/).

`tools/gpu_run/flow.py --tune --tune-trials 3 --tune-minutes 1` on a lent H100 (2026-12-07, README.md
there): the panel's own tuning run through the real agent and llama-server b11434 built with CUDA by
the panel's install code, on the random-weight 0.85B llama, from a plain base (all layers on the
GPU, 4 slots, flash attention off, f16 KV cache) over layers on the GPU, parallel slots, micro-batch
size, flash attention and the V cache's type (48 candidates: Optuna's TPE sampler picked them),
maximising output throughput at 8 streams with TTFT p95 at most 500 ms and J per token at most the
base's. What the little device time left allowed: three candidates measured, one refused by the
planner; none met the limits (12 of 16 layers on the GPU cost decode and energy), so the run says so
and proposes nothing.

The replay holds the panel's decisions to what was measured there: each trial's state follows from
its first round by the pure code the run used (limit_breaks), no winner since none passed (ranked),
the planner's refusal was never started, each measured trial is a revision derived from the base,
the planner's GPU memory per trial beside what the host measured, and the host ended on the base.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.tuning import Limit, Objective, limit_breaks, ranked, verdict
from serving.tuning.objective import Scored, mean_figures
from tests.tuning.test_tuning_services import host, serving_host  # noqa: F401 - the fixtures

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "tuning" / "flow_tune.json"


@pytest.fixture(scope="module")
def tune() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())["tuning"]


def _figures(trial: dict[str, Any], rounds: slice = slice(None)) -> dict[str, Any]:
    return mean_figures([r["figures"] for r in trial["rounds"][rounds]])


def _by_state(tune: dict[str, Any], state: str) -> list[dict[str, Any]]:
    return [t for t in tune["trials"] if t["number"] and t["state"] == state]


def test_the_run_ended_with_a_verdict_and_the_host_back_on_the_base(tune: dict[str, Any]) -> None:
    assert tune["state"] == "succeeded", tune["reason"]
    base = tune["trials"][0]
    assert base["number"] == 0 and base["state"] == "measured" and base["engine"] == "llama.cpp"
    # Repeats are for the best few that met the limits (and then the base): none did, so one round each.
    assert len(base["rounds"]) == (2 if tune["best"] is not None else 1)
    measured = [t for t in tune["trials"][1:] if t["state"] != "refused"]
    assert len(measured) == 3  # --tune-trials 3: refusals are not measured and do not count
    proposal = tune.get("proposal")
    if proposal:  # the winner proposed: a switch to its revision that succeeded
        assert proposal["state"] == "succeeded" and tune["serving_at_end"] == proposal["revision"]
    else:
        assert tune["serving_at_end"] == tune["base_revision"]


def test_a_quantized_v_cache_without_flash_attention_was_refused_by_the_planner_and_never_started(
    tune: dict[str, Any],
) -> None:
    for trial in _by_state(tune, "refused"):
        assert trial["revision"] is None and not trial["rounds"]
        assert trial["knobs"]["cache_type_v"] != "f16" and trial["knobs"]["flash_attn"] == "off"
        assert "llama.quantized_v_needs_flash_attn" in trial["reason"]
        assert any(f["severity"] == "error" for f in trial["findings"])


def test_each_trials_state_follows_from_its_rounds_and_the_limits(tune: dict[str, Any]) -> None:
    limits = tuple(Limit.from_dict(d) for d in tune["limits"])
    base = _figures(tune["trials"][0])
    for trial in [*_by_state(tune, "measured"), *_by_state(tune, "ruled_out")]:
        first = limit_breaks(_figures(trial, slice(0, 1)), limits, _figures(tune["trials"][0], slice(0, 1)))
        if trial["state"] == "ruled_out":  # stopped after its first round, for what that round broke
            assert len(trial["rounds"]) == 1 and first and trial["passed"] is False
            assert trial["reason"] == "stopped after its first round: " + "; ".join(first)
        else:
            assert trial["passed"] is (not limit_breaks(_figures(trial), limits, base))


def test_the_best_and_its_verdict_are_what_the_rounds_say(tune: dict[str, Any]) -> None:
    objective = Objective(**tune["objective"])
    scored = [Scored(t["number"], t["value"], bool(t["passed"])) for t in _by_state(tune, "measured")]
    order = ranked(scored, objective)
    if not order:
        assert tune["best"] is None and tune["reason"] == "no candidate met the limits"
        return
    assert order[0].key == tune["best"]
    best = next(t for t in tune["trials"] if t["number"] == tune["best"])
    again = verdict(objective, [r["value"] for r in tune["trials"][0]["rounds"]], [r["value"] for r in best["rounds"]])
    assert again.to_dict() == {k: tune["verdict"][k] for k in again.to_dict()}


def test_each_measured_trial_is_a_revision_derived_from_the_base(tune: dict[str, Any]) -> None:
    for trial in [*_by_state(tune, "measured"), *_by_state(tune, "ruled_out")]:
        assert trial["parent"] == tune["base_revision"] and trial["revision"] != tune["base_revision"]
        assert set(trial["knobs"]) == set(tune["space"])


def test_the_planners_gpu_memory_per_trial_is_within_5_percent_of_what_the_host_measured(tune: dict[str, Any]) -> None:
    """The trial table's planned against measured memory (what the planner learns from): on the H100,
    12 of 16 layers on the GPU planned 2.17-2.24 GiB against 2.12-2.20 GiB held (NVML, per process)."""
    compared = 0
    for trial in tune["trials"][1:]:
        planned, measured = trial["planned_memory"].get("gpu0"), trial["measured_memory"].get("gpu0")
        if planned and measured:
            assert abs(planned - measured) / measured < 0.05, (trial["number"], planned, measured)
            compared += 1
    assert compared == 3


def test_the_gpu_figures_show_why_partial_offload_lost(tune: dict[str, Any]) -> None:
    """Every measured candidate kept 4 of 16 layers on the CPU: its decode per stream at 8 streams fell
    to a seventh of the base's (40-51 against 361 tok/s) and its energy per output token rose by 40-111 %;
    the base itself breaks the TTFT limit (4 slots for 8 streams: 1.26 s), a limit every candidate had
    to meet on its own."""
    base = _figures(tune["trials"][0])["concurrency 8"]
    for trial in _by_state(tune, "ruled_out"):
        assert trial["knobs"]["n_gpu_layers"] == 12
        figures = _figures(trial)
        assert figures["concurrency 8"]["decode"] < base["decode"] / 5
        assert figures["run"]["j_per_token"] > 1.35 * _figures(tune["trials"][0])["run"]["j_per_token"]
    assert base["ttft_p95"] > 500


@pytest.mark.django_db
def test_the_run_page_shows_the_gpu_runs_trials_and_says_no_candidate_met_the_limits(
    client: Any,
    host: Any,  # noqa: F811 - the fixture
    operator: Any,
    tune: dict[str, Any],
) -> None:
    """The recorded run as rows on a host (its trials' revisions derived from the host's base with the
    recorded knobs), rendered: each trial's state and reason, the refusal's finding, the plain verdict."""
    from django.urls import reverse

    from deployments.services.revisions import revision_derive
    from tuning.models import TuningRun, TuningTrial

    run = TuningRun.objects.create(
        host=host,
        base=host.base,
        space=tune["space"],
        objective=tune["objective"],
        limits=tune["limits"],
        profile=tune["profile"],
        max_trials=3,
        state=tune["state"],
        stage="done",
        reason=tune["reason"],
        verdict=tune["verdict"],
        created_by=operator,
    )
    fields = ("knobs", "engine", "state", "reason", "findings", "rounds", "value", "passed")
    for trial in tune["trials"]:
        revision = host.base
        if trial["number"] and trial["revision"] is not None:
            revision = revision_derive(
                host=host, parent=host.base, changes={"set": trial["knobs"]}, message="gpu trial", actor=operator
            )
        elif trial["number"]:
            revision = None
        TuningTrial.objects.create(
            run=run,
            number=trial["number"],
            revision=revision,
            planned_memory=trial["planned_memory"],
            measured_memory=trial["measured_memory"],
            **{name: trial[name] for name in fields if trial[name] is not None or name in ("value", "passed")},
        )
    client.force_login(operator)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    said = page[page.index('id="tuning-no-winner"') :]
    assert said.startswith('id="tuning-no-winner">No candidate beat the base beyond noise: no candidate met the limits')
    assert 'id="tuning-propose"' not in page
    for trial in tune["trials"][1:]:
        row = page[page.index(f'data-number="{trial["number"]}"') :]
        row = row[: row.index("</tr>")]
        assert trial["state"].replace("_", " ") in row.lower(), row
        if trial["state"] == "refused":
            assert "quantized V cache needs flash attention" in row
        else:
            assert "TTFT p95 at concurrency 8" in row
