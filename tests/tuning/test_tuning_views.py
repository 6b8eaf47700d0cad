"""The tuning pages through Django's test client: a host's runs, the form (the knobs of the base's
engine; bad input answered beside the field with nothing started; a protected host opens a change
request), a run's page with a trial in every state, the Pareto plots, the verdict with its diff and
the one button that proposes the best, and cancel. Runs and trials are rows as the services write
them (the services' own tests drive real runs: test_tuning_services.py)."""

from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree

import pytest
from django.urls import reverse

from changes.models import ChangeRequest
from changes.services import host_review_set
from deployments.models import Operation
from deployments.services.revisions import revision_derive
from serving.diffing import fmt
from tests.tuning.test_tuning_services import LEVEL, GiB, host, serving_host  # noqa: F401 - the fixture
from tuning.models import TuningRun, TuningTrial

pytestmark = pytest.mark.django_db
T = TuningTrial.State
SVG = "{http://www.w3.org/2000/svg}"


def _figures(throughput: float, ttft: float, j: float | None = None) -> dict[str, Any]:
    return {LEVEL: {"throughput": throughput, "decode": throughput / 4, "ttft_p95": ttft}, "run": {"j_per_token": j}}


def _rounds(*values: tuple[float, float]) -> list[dict[str, Any]]:
    return [{"run": None, "figures": _figures(t, ttft), "value": t} for t, ttft in values]


def _derived(on: Any, operator: Any, **knobs: Any) -> Any:
    return revision_derive(host=on, parent=on.base, changes={"set": knobs}, message=f"trial {knobs}", actor=operator)


@pytest.fixture
def run(host: Any, operator: Any) -> TuningRun:  # noqa: F811
    """An open run on `host` with a trial in every state: the base and trial 1 measured (trial 1
    the better, on the front), 2 ruled out by a limit, 3 refused by the planner, 4 failed, 5 being
    switched to."""
    run = TuningRun.objects.create(
        host=host,
        base=host.base,
        space={"parallel": [2, 4, 8], "flash_attn": ["on", "off"]},
        objective={"metric": "throughput", "level": LEVEL},
        limits=[{"metric": "ttft_p95", "level": LEVEL, "bound": 500.0, "of_base": False}],
        profile={"name": "t", "concurrency": [4]},
        max_trials=5,
        stage="trials",
        created_by=operator,
    )
    rows = [
        dict(number=0, revision=host.base, state=T.MEASURED, rounds=_rounds((50.0, 300.0)), value=50.0),
        dict(
            number=1,
            knobs={"parallel": 2, "flash_attn": "on"},
            revision=_derived(host, operator, parallel=2, flash_attn="on"),
            state=T.MEASURED,
            rounds=_rounds((80.0, 250.0)),
            value=80.0,
            passed=True,
            planned_memory={"ram": 2 * GiB},
            measured_memory={"ram": int(2.2 * GiB)},
        ),
        dict(
            number=2,
            knobs={"parallel": 4, "flash_attn": "on"},
            revision=_derived(host, operator, parallel=4, flash_attn="on"),
            state=T.RULED_OUT,
            rounds=_rounds((95.0, 900.0)),
            value=95.0,
            passed=False,
            reason="stopped after its first round: TTFT p95 at concurrency 4 <= 500 ms: measured 900 ms",
        ),
        dict(
            number=3,
            knobs={"parallel": 8, "flash_attn": "off"},
            state=T.REFUSED,
            reason="kv_quant_needs_fa: a quantized V cache needs flash attention",
            findings=[
                {
                    "severity": "error",
                    "code": "kv_quant_needs_fa",
                    "message": "a quantized V cache needs flash attention",
                },
                {"severity": "warning", "code": "ram_tight", "message": "little RAM left for the OS"},
            ],
        ),
        dict(
            number=4,
            knobs={"parallel": 2, "flash_attn": "off"},
            revision=_derived(host, operator, parallel=2, flash_attn="off"),
            state=T.FAILED,
            reason="its switch failed: the engine did not come up",
        ),
        dict(
            number=5,
            knobs={"parallel": 4, "flash_attn": "off"},
            revision=_derived(host, operator, parallel=4, flash_attn="off"),
            state=T.SWITCHING,
        ),
    ]
    for row in rows:
        TuningTrial.objects.create(run=run, **row)
    # It waits for the switch to trial 5.
    run.current_trial = run.trials.get(number=5)
    run.current_op = Operation.objects.create(
        kind="switch", host=host, revision=run.current_trial.revision, state="running", requested_by=operator
    )
    run.save()
    return run


def _end(run: TuningRun, *, beats_base: bool) -> TuningRun:
    best = run.trials.get(number=1)
    run.trials.filter(number=5).update(state=T.FAILED, reason="the run ended before it was measured")
    Operation.objects.filter(pk=run.current_op_id).update(state="succeeded")
    run.current_op = run.current_trial = None
    summary = (
        "+60.0 % over the base, beyond noise (the rounds' spread)"
        if beats_base
        else "+2.0 %: within the runs' own noise"
    )
    run.state, run.stage, run.best = TuningRun.State.SUCCEEDED, TuningRun.Stage.DONE, best
    run.verdict = {"beats_base": beats_base, "summary": summary, "best": 1, "base": 0}
    run.reason = f"trial 1 (parallel=2, flash_attn=on): {summary}"
    run.save()
    return run


def _row(html: str, number: int) -> str:
    start = html.index(f'data-number="{number}"')
    return html[start : html.index("</tr>", start)]


def test_the_host_page_links_to_its_tuning_runs_and_the_list_shows_them(client, host, run, viewer):  # noqa: F811
    client.force_login(viewer)
    page = client.get(reverse("hardware:host_detail", args=[host.name])).content.decode()
    assert reverse("tuning:list", args=[host.name]) in page
    listing = client.get(reverse("tuning:list", args=[host.name])).content.decode()
    assert reverse("tuning:detail", args=[run.pk]) in listing and "Running" in listing
    assert 'id="tuning-open"' in listing  # one run at a time: the open one is named
    assert 'id="tuning-new"' not in listing  # and a viewer is offered no form


def test_the_form_offers_the_knobs_of_the_base_engine_with_the_bases_values(client, host, operator):  # noqa: F811
    client.force_login(operator)
    page = client.get(reverse("tuning:new", args=[host.name])).content.decode()
    assert 'name="space__parallel"' in page and 'name="space__ctx_size"' in page
    assert 'name="space__mmproj"' not in page  # a file the engine reads is set on the base, not tuned
    base_row = page[page.index('data-knob="ctx_size"') :]
    assert "<code>1024</code>" in base_row[: base_row.index("</tr>")]
    assert f'hx-get="{reverse("tuning:new", args=[host.name])}"' in page  # another base swaps the knobs in
    assert 'id="tuning-start"' in page and "requires review" not in page


GOOD = {
    "base": "1",
    "space__parallel": "2,4",
    "objective": "throughput",
    "limits": "ttft_p95<=500",
    "profile": "custom",
    "concurrency": "4",
    "requests": "4",
    "input_tokens": "12",
    "output_tokens": "48",
    "max_trials": "4",
    "max_minutes": "30",
    "repeats": "3",
    "repeat_best": "1",
}


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"space__parallel": "2,2"}, "space__parallel", "lists 2 twice"),
        ({"space__parallel": "two,4"}, "space__parallel", "parallel"),
        ({"space__parallel": ""}, None, "search space is empty"),
        ({"limits": "ttft_p95>=5"}, "limits", "ttft_p95 is limited with &lt;="),
        ({"objective": "speed"}, "objective", "speed"),
        ({"level": "concurrency 99"}, "level", "has no level"),
        ({"max_trials": "0"}, "max_trials", "max_trials is a whole number from 1"),
        ({"base": "9"}, "base", "9"),
    ],
)
def test_bad_input_is_answered_beside_its_field_and_nothing_starts(client, host, operator, change, field, words):  # noqa: F811
    client.force_login(operator)
    response = client.post(reverse("tuning:new", args=[host.name]), {**GOOD, **change})
    assert response.status_code == 400
    page = response.content.decode()
    assert words in page
    if field is not None:  # beside its field: in the label (or the knob's row) that holds the input
        holder = page[: page.index(f'name="{field}"')]
        opened = holder.rfind('<tr class="tuning-knob' if field.startswith("space__") else "<label")
        assert "has-error" in holder[opened:], field
    assert not TuningRun.objects.exists() and not Operation.objects.exists()


def test_a_good_form_starts_the_run_and_opens_its_page(client, host, operator):  # noqa: F811
    client.force_login(operator)
    response = client.post(reverse("tuning:new", args=[host.name]), GOOD)
    run = TuningRun.objects.get()
    assert response.status_code == 302 and response.url == reverse("tuning:detail", args=[run.pk])
    assert run.space == {"parallel": [2, 4]} and run.max_trials == 4 and run.profile["concurrency"] == [4]
    assert run.current_op.kind == "benchmark"  # the base is measured first
    page = client.get(response.url).content.decode()
    assert f'hx-get="{reverse("tuning:status", args=[run.pk])}"' in page and 'hx-trigger="every 1s"' in page
    assert 'data-state="measuring"' in _row(page, 0)


def test_a_protected_host_opens_a_change_request_for_the_run(client, host, operator, admin_user):  # noqa: F811
    host_review_set(host=host, required=True, actor=admin_user)
    client.force_login(operator)
    form = client.get(reverse("tuning:new", args=[host.name])).content.decode()
    assert 'id="tuning-review"' in form and "Open a change request for the run" in form
    response = client.post(reverse("tuning:new", args=[host.name]), GOOD)
    change = ChangeRequest.objects.get()
    assert response.status_code == 302 and response.url == change.get_absolute_url()
    assert change.kind == "tuning" and change.params["space"] == {"parallel": [2, 4]}
    assert not TuningRun.objects.exists() and not Operation.objects.exists()


def test_the_run_page_shows_each_trial_as_it_stands(client, run, operator):
    client.force_login(operator)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    assert 'hx-trigger="every 1s"' in page and 'id="tuning-cancel"' in page
    assert "Measuring candidates" in page
    # Progress: 3 of the 5 candidates the budget allows ended (2 is ruled out, 4 failed, 3 was never started).
    assert '<span id="tuning-done">3 of 5</span>' in page and "1 refused by the planner" in page
    base, measured, ruled, refused, failed, switching = (_row(page, n) for n in range(6))
    assert "the base revision" in base and 'data-state="measured"' in base
    r1 = run.trials.get(number=1).revision
    assert reverse("deployments:revision_detail", args=[run.host.name, r1.number]) in measured
    assert "parallel=2, flash_attn=on" in measured and "80.00" in measured and "250.00" in measured
    planned, held = fmt.size_bytes(2 * GiB), fmt.size_bytes(int(2.2 * GiB))
    assert f"ram: {planned}" in re.sub(r"<[^>]+>", "", measured) and held in measured and "(10.0%)" in measured
    assert "front" in measured
    assert 'data-state="ruled_out"' in ruled and "measured 900 ms" in ruled
    assert "a quantized V cache needs flash attention" in refused and "little RAM left for the OS" in refused
    assert "–" in refused.split("</td>")[3]  # never started: no revision (after #, engine, knobs)
    # A trial stored without its engine (before runs tried others) ran the base's.
    assert '<td class="tuning-trial-engine">llama.cpp</td>' in refused
    assert "the engine did not come up" in failed
    assert 'data-state="switching"' in switching
    # The Pareto plot of throughput against TTFT, and of memory (measured on trial 1); no energy figure.
    svg = page[page.index('data-axis="ttft_p95"') :]
    chart = ElementTree.fromstring(svg[svg.index("<svg") : svg.index("</svg>") + 6])  # noqa: S314 - our own SVG
    series = {g.get("data-series"): g.get("data-points") for g in chart.iter(f"{SVG}g") if g.get("data-series")}
    assert series == {"base": "1", "Pareto front": "2"}  # trial 1 beats the base on both; trial 2 is the fastest
    assert 'data-axis="memory"' in page and 'data-axis="j_per_token"' not in page
    assert 'id="tuning-propose"' not in page  # nothing to propose while it runs
    status = client.get(reverse("tuning:status", args=[run.pk]))
    assert status.status_code == 200 and 'data-number="5"' in status.content.decode()


def test_a_viewer_sees_the_run_without_its_buttons(client, run, viewer):
    client.force_login(viewer)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    assert 'data-number="1"' in page and 'id="tuning-cancel"' not in page


def test_cancel_asks_the_run_to_stop(client, run, operator):
    client.force_login(operator)
    response = client.post(reverse("tuning:cancel", args=[run.pk]), follow=True)
    run.refresh_from_db()
    assert run.cancel_requested
    assert 'id="tuning-cancelling"' in response.content.decode()


def test_a_finished_winner_shows_its_diff_and_one_button_switches_to_it(client, run, operator):
    _end(run, beats_base=True)
    client.force_login(operator)
    status = client.get(reverse("tuning:status", args=[run.pk]))
    assert status.status_code == 286  # htmx stops polling: the verdict, diff and button are in
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    assert 'hx-trigger="every 1s"' not in page and 'id="tuning-cancel"' not in page
    r1 = run.best.revision
    assert "beyond noise" in page[page.index('id="tuning-winner"') :]
    diff = page[page.index('id="tuning-diff"') :]
    assert "parallel" in diff and "diff-changed" in diff or "diff-added" in diff
    assert reverse("deployments:revision_diff", args=[run.host.name, run.base.number, r1.number]) in page
    assert f"Switch {run.host.name} to r{r1.number}" in page
    response = client.post(reverse("tuning:propose", args=[run.pk]))
    op = Operation.objects.get(kind="switch", state="queued")
    assert op.revision == r1 and response.url == reverse("deployments:operation_detail", args=[op.pk])


def test_on_a_protected_host_the_button_opens_a_change_request(client, run, operator, admin_user):
    _end(run, beats_base=True)
    host_review_set(host=run.host, required=True, actor=admin_user)
    client.force_login(operator)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    assert "open a change request" in page[page.index('id="tuning-propose"') :]
    response = client.post(reverse("tuning:propose", args=[run.pk]))
    change = ChangeRequest.objects.get()
    assert response.url == reverse("changes:detail", args=[change.pk]) and change.kind == "switch"
    assert not Operation.objects.filter(kind="switch", state="queued").exists()


def test_no_candidate_beyond_noise_is_said_plainly_and_nothing_is_offered(client, run, operator):
    _end(run, beats_base=False)
    client.force_login(operator)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    said = page[page.index('id="tuning-no-winner"') :]
    assert (
        said.startswith('id="tuning-no-winner">No candidate beat the base beyond noise')
        and "+2.0 %: within the runs" in said
    )
    assert 'id="tuning-propose"' not in page
    response = client.post(reverse("tuning:propose", args=[run.pk]), follow=True)  # asked anyway: refused, said why
    assert "did not beat the base beyond noise" in response.content.decode()
    assert not Operation.objects.filter(kind="switch", state="queued").exists()


def _second_host_in(group: str, run: TuningRun, operator: Any) -> Any:
    """Another host serving the same small model with llama.cpp, and both tagged `group`."""
    from hardware.services import host_tags_set

    other = serving_host(
        "tuned-2",
        run.host.base.model_variant,
        operator,
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0, "flash_attn": "off"},
        message="the other host's own",
    )
    for tagged in (run.host, other):
        host_tags_set(host=tagged, tags=[group], actor=operator)
    return other


def test_the_winner_rolls_out_to_the_hosts_group_from_its_page(client, run, operator):
    """Fails on the old page: the best could only be switched to on the tuned host itself."""
    from rollouts.models import Rollout

    _end(run, beats_base=True)
    client.force_login(operator)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    assert 'id="tuning-rollout"' not in page  # the host is in no group yet
    other = _second_host_in("fleet", run, operator)
    page = client.get(reverse("tuning:detail", args=[run.pk])).content.decode()
    form = page[page.index('id="tuning-rollout"') :].split("</form>", 1)[0]
    assert '<option value="fleet">fleet</option>' in form and "parallel=2, flash_attn=on" in form
    response = client.post(reverse("tuning:propose", args=[run.pk]), {"group": "fleet", "batch_size": "1"})
    rollout = Rollout.objects.get()
    assert response.url == reverse("rollouts:detail", args=[rollout.pk])
    assert rollout.group == "fleet" and rollout.change["set"] == {"parallel": 2, "flash_attn": "on"}
    assert rollout.change["message"].startswith(f"tuning run #{run.pk} on {run.host.name}: trial 1")
    assert set(rollout.hosts.values_list("host__name", flat=True)) == {run.host.name, other.name}
    canary = Operation.objects.get(kind="switch", state="queued")  # the canary's switch, first by name
    assert canary.host.name == run.host.name and canary.revision.knobs["parallel"] == 2


def test_a_rollout_to_a_group_with_a_protected_host_opens_a_change_request(client, run, operator, admin_user):
    from rollouts.models import Rollout

    _end(run, beats_base=True)
    other = _second_host_in("fleet", run, operator)
    host_review_set(host=other, required=True, actor=admin_user)
    client.force_login(operator)
    response = client.post(reverse("tuning:propose", args=[run.pk]), {"group": "fleet", "batch_size": "1"})
    change = ChangeRequest.objects.get()
    assert response.url == reverse("changes:detail", args=[change.pk]) and change.kind == "rollout"
    assert not Rollout.objects.exists() and not Operation.objects.filter(kind="switch", state="queued").exists()


def test_a_rollout_to_no_such_group_is_refused_and_starts_nothing(client, run, operator):
    from rollouts.models import Rollout

    _end(run, beats_base=True)
    client.force_login(operator)
    response = client.post(
        reverse("tuning:propose", args=[run.pk]), {"group": "nowhere", "batch_size": "1"}, follow=True
    )
    assert "roll it out" in response.content.decode()
    assert not Rollout.objects.exists() and not Operation.objects.filter(kind="switch", state="queued").exists()
