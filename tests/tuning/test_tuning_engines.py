"""A tuning run over other engines too, where the base's model allows: a candidate of another engine
becomes a revision of that engine derived from the base (its knobs from none, its newest install, the
base's context and GPU split), planned with that engine; an engine that cannot load the model's
format, or that the host has not installed, is refused with the reason and nothing is stored. The
form, the API and `manage.py tune` take the other engines' knobs. A switch to a revision whose engine
cannot load its model is refused.

The host is a GPU host (one H100 row, as the agent reports one; four where the base is TP=4) serving
an HF checkpoint with vLLM, with vLLM and SGLang installs recorded; operations end through the
services the agent's port calls."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

from api.tokens import token_create
from changes.models import ChangeRequest
from changes.services import change_approve, host_review_set
from core.models import AuditEvent
from deployments.choices import OperationKind
from deployments.models import DeploymentRevision, ModelVariant, Operation
from deployments.services.preflight import FAIL, panel_preflight
from deployments.services.revisions import revision_mark_active
from deployments.services.switch import switch_request
from hardware.models import GPU, Host
from hardware.review import ChangeRequested
from tests.support.revisions import make_revision
from tests.tuning.test_tuning_services import (  # noqa: F401 - the fixtures
    PROFILE,
    _finish_benchmark,
    host,
    reviewer,
)
from tuning.management.commands.tune import parse_engines
from tuning.models import TuningRun, TuningTrial
from tuning.services import other_engines, tuning_propose, tuning_start, tuning_sweep

pytestmark = pytest.mark.django_db
T = TuningTrial.State
VLLM = {"vllm": {"0.17.0": {"path": "/opt/venvs/vllm-0.17.0"}}}
SGLANG = {"sglang": {"0.5.9": {"path": "/opt/venvs/sglang-0.5.9"}}}


def _hf_model() -> ModelVariant:
    """The catalog's Qwen3-32B-AWQ as imported without its hub commit (nothing to download first)."""
    model = ModelVariant.objects.get(name="Qwen3-32B-AWQ")
    model.pk, model.name, model.revision, model.hub_files = None, "qwen3-32b-awq-local", "", []
    model.save()
    return model


def gpu_host(operator: Any, installs: dict[str, Any], *, gpus: int = 1, split: dict[str, Any] | None = None) -> Host:
    """A host with `gpus` H100s serving the HF model with vLLM, its knobs and `split` (its active
    revision, also `host.base`)."""
    gpu = Host.objects.create(name="gpu", nvml_available=True, model_dirs=["/srv/models"], engine_installs=installs)
    for index in range(gpus):
        GPU.objects.create(
            host=gpu, index=index, name="NVIDIA H100 80GB HBM3", memory_bytes=80 << 30, compute_capability="9.0"
        )
    base = make_revision(
        host=gpu,
        engine="vllm",
        model_variant=_hf_model(),
        knobs={"max_model_len": 8192, "max_num_seqs": 8, **(split or {})},
        served_name="qwen",
        port=8001,
        message="the base",
        actor=operator,
    )
    revision_mark_active(revision=base, actor=operator)
    gpu.base = base  # type: ignore[attr-defined]
    return gpu


@pytest.fixture
def both(catalog: None, operator: Any) -> Host:
    return gpu_host(operator, {**VLLM, **SGLANG})


def _past_the_base(run: TuningRun) -> TuningRun:
    _finish_benchmark(run.current_op, throughput=50.0, ttft=300.0)
    tuning_sweep()
    run.refresh_from_db()
    return run


def test_a_candidate_of_another_engine_is_a_revision_of_that_engine_derived_from_the_base(both, operator):
    run = tuning_start(
        host=both, space={}, engines={"sglang": {"max_running_requests": ["4", 8]}}, profile=PROFILE, actor=operator
    )
    assert (run.space, run.engines) == ({}, {"sglang": {"max_running_requests": [4, 8]}})
    assert run.trials.get(number=0).engine == "vllm"
    started = AuditEvent.objects.get(action="tuning.start")
    assert "over SGLang: max_running_requests in [4, 8]" in started.summary
    assert started.data["engines"] == {"sglang": {"max_running_requests": [4, 8]}}

    run = _past_the_base(run)
    first = run.trials.get(number=1)
    assert (first.engine, first.knobs, first.state) == ("sglang", {"max_running_requests": 4}, T.SWITCHING)
    revision = first.revision
    # SGLang's revision: the base is its parent; it starts from none of vLLM's knobs, at SGLang's newest
    # install ("" = latest), and keeps the served name and the base's served context (vLLM's
    # max_model_len as SGLang's context_length), not the model's native one.
    assert (revision.engine, revision.parent, revision.engine_version) == ("sglang", both.base, "")
    assert revision.knobs == {"max_running_requests": 4, "context_length": 8192} and revision.served_name == "qwen"
    assert f"Tuning run #{run.pk}, trial 1: SGLang max_running_requests=4" in revision.message
    assert first.planned_memory.get("gpu0", 0) > 0  # planned as SGLang on the H100
    assert (run.current_op.kind, run.current_op.revision) == (OperationKind.SWITCH, revision)


def test_a_space_that_sets_the_other_engines_context_keeps_its_own(both, operator):
    run = tuning_start(
        host=both, space={}, engines={"sglang": {"context_length": [4096, 16384]}}, profile=PROFILE, actor=operator
    )
    first = _past_the_base(run).trials.get(number=1)
    assert first.revision.knobs == {"context_length": 4096}  # the space's value, not the base's 8192


def test_a_candidate_of_another_engine_keeps_the_bases_gpu_split(catalog, operator):
    # A TP=4 vLLM base on four H100s: its SGLang candidate is derived with tp_size=4 and planned on the
    # four GPUs, not started on one (SGLang's default) and measured as a smaller machine.
    four = gpu_host(operator, {**VLLM, **SGLANG}, gpus=4, split={"tensor_parallel_size": 4})
    run = tuning_start(
        host=four, space={}, engines={"sglang": {"max_running_requests": [4, 8]}}, profile=PROFILE, actor=operator
    )
    first = _past_the_base(run).trials.get(number=1)
    assert (first.engine, first.knobs, first.state) == ("sglang", {"max_running_requests": 4}, T.SWITCHING)
    assert first.revision.knobs == {"max_running_requests": 4, "context_length": 8192, "tp_size": 4}
    assert sorted(first.planned_memory) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert min(first.planned_memory.values()) > 0
    assert run.trials.get(number=0).revision.knobs["tensor_parallel_size"] == 4  # the base is untouched


def test_a_space_that_sets_the_other_engines_split_keeps_its_own(catalog, operator):
    four = gpu_host(operator, {**VLLM, **SGLANG}, gpus=4, split={"tensor_parallel_size": 4})
    run = tuning_start(host=four, space={}, engines={"sglang": {"tp_size": [2, 1]}}, profile=PROFILE, actor=operator)
    first = _past_the_base(run).trials.get(number=1)
    # The space's TP=2, not the base's 4 (nor 4 as well as 2): the space chose the split.
    assert first.revision.knobs == {"tp_size": 2, "context_length": 8192}
    assert sorted(first.planned_memory) == ["gpu0", "gpu1"]


def test_the_planner_judges_each_candidate_with_its_own_engine(both, operator):
    run = tuning_start(
        host=both,
        space={},
        engines={"sglang": {"mem_fraction_static": [0.05, 0.9]}},
        profile=PROFILE,
        actor=operator,
    )
    run = _past_the_base(run)
    refused, planned = run.trials.filter(number__in=[1, 2]).order_by("number")
    # 5% of the H100 holds no 19 GB of weights under SGLang's static fraction: refused, never started.
    assert (refused.engine, refused.knobs, refused.state) == ("sglang", {"mem_fraction_static": 0.05}, T.REFUSED)
    assert refused.revision is None and any(f["severity"] == "error" for f in refused.findings)
    assert (planned.engine, planned.state, planned.revision.engine) == ("sglang", T.SWITCHING, "sglang")
    assert run.current_op.revision == planned.revision


def test_an_engine_the_host_has_not_installed_is_refused_with_the_reason_and_nothing_stored(catalog, operator):
    only_vllm = gpu_host(operator, VLLM)
    revisions = DeploymentRevision.objects.count()
    with pytest.raises(ValidationError) as exc:
        tuning_start(
            host=only_vllm,
            space={"max_num_seqs": [4, 16]},
            engines={"sglang": {"max_running_requests": [4, 8]}},
            profile=PROFILE,
            actor=operator,
        )
    (message,) = exc.value.message_dict["engines"]
    assert message.startswith("SGLang is not installed on the host (its engines: vLLM)")
    assert not TuningRun.objects.exists() and not Operation.objects.exists()
    assert DeploymentRevision.objects.count() == revisions


def test_an_engine_that_cannot_load_the_bases_model_is_refused(both, operator, host):  # noqa: F811
    with pytest.raises(ValidationError) as exc:
        tuning_start(
            host=both,
            space={"max_num_seqs": [4, 8]},
            engines={"llama.cpp": {"parallel": [1, 2]}},
            profile=PROFILE,
            actor=operator,
        )
    assert "llama.cpp cannot load a Hugging Face checkpoint" in exc.value.message_dict["engines"][0]
    assert not TuningRun.objects.exists() and not Operation.objects.exists()
    # vLLM reads the .gguf file a host downloaded: from llama.cpp's GGUF base it may be tried.
    host.engine_installs = VLLM
    host.save()
    assert other_engines(host=host, base=host.base) == ["vllm"]


def test_an_engine_that_cannot_load_the_model_is_refused_at_creation_and_an_old_row_at_the_switch(both, operator):
    # An Ollama revision of the HF checkpoint the host serves with vLLM (Ollama would pull the name
    # as a tag): refused when it is made, with nothing stored.
    before = DeploymentRevision.objects.count()
    with pytest.raises(ValidationError, match="Ollama cannot load a Hugging Face checkpoint"):
        make_revision(host=both, engine="ollama", model_variant=both.base.model_variant, port=8002, actor=operator)
    assert DeploymentRevision.objects.count() == before
    # A row made before that rule (written around the service, as it was stored then) is never switched to.
    wrong = DeploymentRevision.objects.create(
        host=both, number=both.revisions.count() + 1, parent=both.base, engine="ollama",
        model_variant=both.base.model_variant, port=8002, author=operator, message="made before the rule",
    )  # fmt: skip
    with pytest.raises(
        ValidationError, match="Ollama cannot load a Hugging Face checkpoint: the panel launches it with an Ollama tag"
    ):
        switch_request(revision=wrong, actor=operator)
    assert not Operation.objects.exists()
    (check,) = [c for c in panel_preflight(wrong) if c.name == "model"]
    assert check.status == FAIL and "with an engine that loads it" in check.message
    assert not [c for c in panel_preflight(both.base) if c.name == "model"]  # vLLM loads it: nothing to say


def test_the_form_offers_the_other_engines_the_host_can_run_and_starts_a_run_over_them(client, both, operator):
    client.force_login(operator)
    url = reverse("tuning:new", args=[both.name])
    page = client.get(url).content.decode()
    # SGLang is installed and loads the checkpoint; llama.cpp and Ollama do not load it.
    assert 'name="engine__sglang"' in page and "engine__llama_cpp" not in page and "engine__ollama" not in page
    form = {"base": both.base.number, "objective": "throughput", "profile": "quick"}
    form |= {"max_trials": 4, "max_minutes": 30, "repeats": 2, "repeat_best": 1}
    bad = client.post(url, {**form, "engine__sglang": "max_num_seqs=4,8"})
    assert bad.status_code == 400 and "sglang has no knob" in bad.content.decode()
    assert not TuningRun.objects.exists()
    response = client.post(url, {**form, "space__max_num_seqs": "4,16", "engine__sglang": "max_running_requests=4,8"})
    run = TuningRun.objects.get()
    assert response.status_code == 302 and response.url == reverse("tuning:detail", args=[run.pk])
    assert (run.space, run.engines) == ({"max_num_seqs": [4, 16]}, {"sglang": {"max_running_requests": [4, 8]}})
    detail = client.get(response.url).content.decode()
    assert "SGLang: max_running_requests in 4, 8" in detail
    assert '<td class="tuning-trial-engine">vLLM</td>' in detail  # the base's row names its engine


def test_the_api_and_the_command_take_other_engines(client, both, operator):
    token = token_create(user=operator, name="t", actor=operator).secret
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = {"space": {}, "engines": {"sglang": {}, "llama.cpp": {"parallel": [1, 2]}}, "profile": PROFILE}
    refused = client.post(f"/api/v1/hosts/{both.name}/tuning/", json.dumps(body), "application/json", **headers)
    assert refused.status_code == 400 and "llama.cpp cannot load a Hugging Face checkpoint" in refused.content.decode()
    body["engines"] = {"sglang": {"max_running_requests": [4, 8]}}
    made = client.post(f"/api/v1/hosts/{both.name}/tuning/", json.dumps(body), "application/json", **headers)
    assert made.status_code == 201, made.content
    data = made.json()
    assert data["engines"] == {"sglang": {"max_running_requests": [4, 8]}} and data["trials"][0]["engine"] == "vllm"
    TuningRun.objects.update(state=TuningRun.State.CANCELLED)  # the host's one open run out of the way
    Operation.objects.update(state="cancelled")

    assert parse_engines(["sglang:max_running_requests=4,8", "sglang:mem_fraction_static=0.8,0.9", "vllm"]) == {
        "sglang": {"max_running_requests": [4, 8], "mem_fraction_static": [0.8, 0.9]},
        "vllm": {},
    }
    out = StringIO()
    call_command(
        "tune", "start", "--host", both.name, "--space", "max_num_seqs=4,16",
        "--engine", "sglang:max_running_requests=4,8", "--profile", "quick", stdout=out,
    )  # fmt: skip
    run = TuningRun.objects.latest("pk")
    assert run.engines == {"sglang": {"max_running_requests": [4, 8]}} and f"Tuning run #{run.pk}" in out.getvalue()


def test_the_best_of_another_engine_is_proposed_as_a_switch_never_rolled_out_as_knobs(both, operator):
    run = tuning_start(
        host=both, space={}, engines={"sglang": {"max_running_requests": [4, 8]}}, profile=PROFILE, actor=operator
    )
    run = _past_the_base(run)
    best = run.trials.get(number=1)
    TuningTrial.objects.filter(pk=best.pk).update(state=T.MEASURED, value=80.0, passed=True)
    Operation.objects.filter(pk=run.current_op_id).update(state="cancelled")  # its switch out of the way
    TuningRun.objects.filter(pk=run.pk).update(
        state=TuningRun.State.SUCCEEDED, best=best, verdict={"beats_base": True, "summary": "+60 %"}
    )
    run.refresh_from_db()
    with pytest.raises(ValidationError, match="Trial 1 runs SGLang, not the base's engine"):
        tuning_propose(run=run, group="fleet", actor=operator)
    proposal = tuning_propose(run=run, actor=operator)  # a switch of this host to the SGLang revision
    assert (proposal.operation.kind, proposal.revision.engine) == (OperationKind.SWITCH, "sglang")


def test_a_protected_hosts_change_request_keeps_the_other_engines_and_its_run_tries_them(
    both,
    operator,
    admin_user,
    reviewer,  # noqa: F811 - the fixture
):
    host_review_set(host=both, required=True, actor=admin_user)
    engines = {"sglang": {"max_running_requests": [4, 8]}}
    with pytest.raises(ChangeRequested) as opened:
        tuning_start(host=both, space={"max_num_seqs": [4, 16]}, engines=engines, profile=PROFILE, actor=operator)
    change = ChangeRequest.objects.get(pk=opened.value.change.pk)
    assert change.params["engines"] == engines and "SGLang: max_running_requests in [4, 8]" in change.summary
    change_approve(change=change, actor=reviewer)
    run = TuningRun.objects.get()
    assert (run.space, run.engines, run.change_request) == ({"max_num_seqs": [4, 16]}, engines, change.pk)
