"""Revision pages: detail, history, new revision with the live planner, comments, switch."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from deployments.models import BenchmarkRun, DeploymentRevision, ModelVariant, Operation, RevisionComment
from deployments.services.revisions import revision_mark_active
from deployments.services.secrets import secret_set
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.operations import record_sent_tasks
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

QWEN = "Qwen3.8-27B-W4A16-AWQ"
GOOD_KNOBS = {"tensor_parallel_size": 2, "max_model_len": 32768, "reasoning_parser": "qwen3"}
BAD_KNOBS = {"tensor_parallel_size": 3}  # 3-way TP on 2 GPUs: the planner refuses


def make_lab(operator, *, name: str = "lab", knobs: dict | None = None, gpus: int = 2):
    """A host with two RTX 3090s and r1 (vLLM, Qwen3.8-27B, TP 2) active."""
    host = HostFactory(  # online (an offline host offers no Switch), with the vLLM build r1 pins installed
        name=name,
        address=f"{name}.lan",  # where laptops reach it: the client exports point there
        last_heartbeat=timezone.now(),
        engine_installs={"vllm": {"0.17.0": {"path": "/opt/venvs/vllm-0.17.0", "installed_at": "2026-11-30T10:00:00"}}},
    )
    for i in range(gpus):
        GPUFactory(host=host, index=i)
    r1 = make_revision(
        host=host,
        engine="vllm",
        engine_version="0.17.0",
        model_variant=ModelVariant.objects.get(name=QWEN),
        knobs=knobs or GOOD_KNOBS,
        env={"NCCL_P2P_DISABLE": "1"},
        served_name="qwen",
        port=8001,
        tag="first",
        message="serve Qwen3.8 on both cards",
        actor=operator,
    )
    revision_mark_active(revision=r1, actor=operator)
    host.refresh_from_db()
    return host, r1


def add_revision(host, operator, *, knobs=None, message="tweak", **kwargs):
    values = {
        "engine": "vllm",
        "engine_version": "0.17.0",
        "model_variant": ModelVariant.objects.get(name=QWEN),
        "knobs": GOOD_KNOBS if knobs is None else knobs,
        "port": 8001,
        "served_name": "qwen",
    }
    values.update(kwargs)
    return make_revision(host=host, message=message, actor=operator, **values)


def bench_results(ttft: float, tps: float, agg: float) -> dict:
    return {
        "status": "completed",
        "tokens_per_wh": 1234.0,
        "levels": [
            {
                "label": "c=1",
                "concurrency": 1,
                "ttft_ms": {"p50": ttft, "p99": ttft * 2},
                "tpot_ms": {"p50": 1000 / tps},
                "decode_tokens_per_s": {"p50": tps},
                "output_tokens_per_s": tps,
                "requests_per_s": 0.5,
            },
            {
                "label": "c=4",
                "concurrency": 4,
                "ttft_ms": {"p50": ttft * 3},
                "tpot_ms": {"p50": 4000 / agg},
                "decode_tokens_per_s": {"p50": agg / 4},
                "output_tokens_per_s": agg,
                "requests_per_s": 1.5,
            },
        ],
    }


def add_bench(revision, *, ttft=210.0, tps=41.5, agg=120.0, profile="chat"):
    return BenchmarkRun.objects.create(
        revision=revision,
        profile_name=profile,
        engine=revision.engine,
        status="completed",
        results=bench_results(ttft, tps, agg),
        finished_at=timezone.now(),
    )


# --- detail -------------------------------------------------------------------------------------


def test_detail_shows_command_env_scripts_planner_and_benchmarks(client, catalog, operator, viewer):
    host, r1 = make_lab(operator)
    add_bench(r1)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_detail", args=["lab", 1])).content.decode()
    # the exact command line, flag by flag
    assert "vllm serve philbert440/Qwen3.8-27B-W4A16-AWQ --served-model-name qwen" in page
    assert "--tensor-parallel-size 2" in page and "--max-model-len 32768" in page
    assert "NCCL_P2P_DISABLE" in page
    assert "#!/usr/bin/env bash" in page  # start script
    assert "[Service]" in page and "TimeoutStartSec=600" in page  # systemd unit
    # the planner's report: KV per token, pool, full-length sequences, findings with badges
    assert "KV per token" in page and '<span class="size" title="32,768 bytes">32 KiB</span>' in page
    assert "Full-length sequences" in page
    assert 'class="badge warning">warning</span> <code>kv.concurrency_short</code>' in page
    # benchmark headline figures
    assert "210 ms" in page and "41.5" in page and "120.0 @ c=4" in page
    # viewers see no switch button
    assert "Switch lab to r1" not in page


def test_detail_masks_the_api_key_and_never_shows_a_secret(client, catalog, operator, admin_user):
    host, _ = make_lab(operator)
    secret_set(host=host, name="vllm-key", value="sk-very-secret-123", actor=admin_user)
    add_revision(host, operator, api_key_secret="vllm-key", message="use an API key")
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_detail", args=["lab", 2])).content.decode()
    assert "sk-very-secret-123" not in page
    assert "VLLM_API_KEY" in page and "********" in page
    assert "vllm-key" in page  # named, not shown
    assert "Switch lab to r2" in page  # operators get the button


def test_detail_of_a_revision_the_engine_would_refuse_is_not_a_500(client, catalog, operator, viewer):
    host, _ = make_lab(operator)
    DeploymentRevision.objects.create(  # written around the service on purpose: a bad stored row
        host=host,
        number=2,
        engine="vllm",
        model_variant=ModelVariant.objects.get(name=QWEN),
        knobs={"tensor_parallel_size": "lots"},
        message="broken",
    )
    client.force_login(viewer)
    response = client.get(reverse("deployments:revision_detail", args=["lab", 2]))
    assert response.status_code == 200
    assert "The engine would refuse this revision" in response.content.decode()


def test_comment_by_htmx_returns_the_fragment_and_records_it(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    url = reverse("deployments:revision_comment", args=["lab", 1])
    response = client.post(url, {"body": "TP 2 looks right"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.startswith('<div id="comments">') and "TP 2 looks right" in body
    assert RevisionComment.objects.get().author == viewer
    assert AuditEvent.objects.filter(action="revision.comment").count() == 1


def test_empty_comment_shows_the_error_and_writes_nothing(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    response = client.post(reverse("deployments:revision_comment", args=["lab", 1]), {"body": "  "})
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    assert not RevisionComment.objects.exists()


# --- history ------------------------------------------------------------------------------------


def test_history_is_a_commit_log_with_switch_outcomes_and_benchmarks(client, catalog, operator, viewer):
    host, r1 = make_lab(operator)
    r2 = add_revision(host, operator, knobs={**GOOD_KNOBS, "max_num_seqs": 8}, message="more sequences")
    r3 = add_revision(host, operator, knobs={**GOOD_KNOBS, "max_num_seqs": 16}, message="even more", tag="greedy")
    now = timezone.now()
    Operation.objects.create(
        kind="switch", host=host, revision=r2, requested_by=operator, state="succeeded", finished_at=now
    )
    Operation.objects.create(
        kind="switch",
        host=host,
        revision=r3,
        requested_by=operator,
        state="failed",
        result={"rolled_back": True},
        error="health check timed out",
        finished_at=now,
    )
    add_bench(r2, ttft=180.0)
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_list", args=["lab"])).content.decode()
    assert page.index('id="r3"') < page.index('id="r2"') < page.index('id="r1"')
    r3_block = page[page.index('id="r3"') : page.index('id="r2"')]
    assert "rolled back" in r3_block and "greedy" in r3_block
    r2_block = page[page.index('id="r2"') : page.index('id="r1"')]
    assert "applied" in r2_block and "by otto" in r2_block and "TTFT 180 ms" in r2_block
    assert QWEN in page and "vLLM 0.17.0" in page


@pytest.mark.parametrize(
    ("query", "shown", "hidden"),
    [
        ({"tag": "greedy"}, ["r3"], ["r1", "r2"]),
        ({"engine": "llama.cpp"}, ["r2"], ["r1", "r3"]),
        ({"author": "ada"}, ["r3"], ["r1", "r2"]),
        ({"model": "122B"}, ["r2"], ["r1", "r3"]),
    ],
)
def test_history_filters(client, catalog, operator, admin_user, viewer, query, shown, hidden):
    host, _ = make_lab(operator)
    add_revision(
        host,
        operator,
        engine="llama.cpp",
        engine_version="",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        knobs={"ctx_size": 8192},
        served_name="",
    )
    add_revision(host, admin_user, tag="greedy")
    client.force_login(viewer)
    page = client.get(reverse("deployments:revision_list", args=["lab"]), query).content.decode()
    for label in shown:
        assert f'id="{label}"' in page
    for label in hidden:
        assert f'id="{label}"' not in page


def test_history_query_count_does_not_grow_with_revisions(
    client, catalog, operator, viewer, django_assert_max_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    host, _ = make_lab(operator)

    def grow_to(n: int) -> None:
        while host.revisions.count() < n:
            rev = add_revision(host, operator, message=f"r{host.revisions.count() + 1}")
            Operation.objects.create(kind="switch", host=host, revision=rev, state="succeeded", requested_by=operator)
            add_bench(rev)

    client.force_login(viewer)
    grow_to(5)
    client.get(reverse("deployments:revision_list", args=["lab"]))  # warm the session and role caches
    with CaptureQueriesContext(connection) as five:
        client.get(reverse("deployments:revision_list", args=["lab"]))
    assert len(five) <= 12
    grow_to(50)
    with django_assert_max_num_queries(len(five)):
        response = client.get(reverse("deployments:revision_list", args=["lab"]))
    assert response.content.decode().count('class="revision') == 50


# --- a new revision -----------------------------------------------------------------------------


def test_new_revision_page_prefills_from_a_revision(client, catalog, operator):
    host, r1 = make_lab(operator)
    add_revision(host, operator, knobs={"tensor_parallel_size": 2, "speculative_config": {"method": "mtp"}})
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_new", args=["lab"]), {"from": 2}).content.decode()
    assert "from r2" in page
    assert "speculative_config={&quot;method&quot;:&quot;mtp&quot;}" in page
    assert 'name="parent" value="2"' in page
    # the live planner listens from its own element (a trigger on the form waited for the message)
    assert "input changed delay:400ms from:#revision-form" in page
    assert reverse("deployments:revision_preview", args=["lab"]) in page


def _post_values(**overrides):
    values = {
        "model_variant": ModelVariant.objects.get(name=QWEN).pk,
        "engine": "vllm",
        "engine_version": "0.17.0",
        "knobs": "tensor_parallel_size=2\nmax_model_len=32768\ngpu_memory_utilization=0.9\n"
        'enforce_eager=true\nspeculative_config={"method":"mtp","num_speculative_tokens":2}\n'
        "reasoning_parser=qwen3",
        "env": "NCCL_P2P_DISABLE=1\n# a comment\n",
        "served_name": "qwen",
        "port": "8001",
        "tag": "mtp",
        "message": "try MTP with two draft tokens",
        "parent": "1",
    }
    values.update(overrides)
    return values


def test_create_types_the_knobs_and_redirects_to_the_revision(client, catalog, operator):
    make_lab(operator)
    client.force_login(operator)
    response = client.post(reverse("deployments:revision_new", args=["lab"]), _post_values())
    assert response.status_code == 302
    assert response.url == reverse("deployments:revision_detail", args=["lab", 2])
    r2 = DeploymentRevision.objects.get(number=2)
    assert r2.knobs == {
        "tensor_parallel_size": 2,
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.9,
        "enforce_eager": True,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
        "reasoning_parser": "qwen3",
    }
    assert r2.env == {"NCCL_P2P_DISABLE": "1"}
    assert r2.parent.number == 1 and r2.author == operator and r2.tag == "mtp"
    assert AuditEvent.objects.filter(action="revision.create", object_id=str(r2.pk)).exists()


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"message": ""}, "message", "This field is required"),
        ({"knobs": "tensor_parallel_size=two"}, "knobs", "must be a whole number"),
        ({"knobs": "no_such_knob=1"}, "knobs", "has no knob"),
        ({"knobs": "speculative_config={bad json"}, "knobs", "not valid JSON"),
        ({"knobs": "just words"}, "knobs", "NAME=VALUE"),
        ({"env": "HF_TOKEN=hf_abc"}, "env", "is a secret"),
        ({"port": "70000"}, "port", "less than or equal to 65535"),
        ({"knobs": "enable_auto_tool_choice=true"}, "knobs", "requires --tool-call-parser: set tool_call_parser"),
    ],
)
def test_bad_input_shows_a_form_error_and_writes_nothing(client, catalog, operator, overrides, field, text):
    make_lab(operator)
    client.force_login(operator)
    response = client.post(reverse("deployments:revision_new", args=["lab"]), _post_values(**overrides))
    assert response.status_code == 200
    form = response.context["form"]
    assert field in form.errors, form.errors
    assert text in " ".join(form.errors[field])
    assert DeploymentRevision.objects.count() == 1


def test_an_engine_that_cannot_load_the_model_is_a_form_error_and_writes_nothing(client, catalog, operator):
    make_lab(operator)
    client.force_login(operator)
    before = AuditEvent.objects.filter(action="revision.create").count()
    values = _post_values(engine="llama.cpp", knobs="ctx_size=8192", tag="")  # Qwen3.8 is a Hugging Face checkpoint
    response = client.post(reverse("deployments:revision_new", args=["lab"]), values)
    assert response.status_code == 200
    said = " ".join(response.context["form"].errors["engine"])
    assert "llama.cpp cannot load a Hugging Face checkpoint: the panel launches it with a GGUF file." in said
    assert f"Choose an engine that loads {QWEN} (SGLang or vLLM), or another model." in said
    assert "cannot load a Hugging Face checkpoint" in response.content.decode()
    assert DeploymentRevision.objects.count() == 1
    assert AuditEvent.objects.filter(action="revision.create").count() == before


def test_new_revision_from_this_with_a_model_its_engine_cannot_load_is_refused_beside_the_model(
    client, catalog, operator
):
    host, _ = make_lab(operator)
    gguf = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")
    add_revision(
        host, operator, engine="llama.cpp", engine_version="", model_variant=gguf, knobs={}, port=30000, message="GGUF"
    )
    client.force_login(operator)
    values = _post_values(engine="llama.cpp", engine_version="", knobs="", port="30000", parent="2", tag="")
    response = client.post(reverse("deployments:revision_new", args=["lab"]), values)  # the form's model: QWEN (HF)
    assert response.status_code == 200
    said = " ".join(response.context["form"].errors["model_variant"])
    assert "llama.cpp cannot load a Hugging Face checkpoint: the panel launches it with a GGUF file." in said
    assert f"Choose an engine that loads {QWEN} (SGLang or vLLM)" in said
    assert DeploymentRevision.objects.count() == 2


def test_the_model_choices_say_completions_for_a_base_model_not_a_missing_template(client, catalog, operator):
    make_lab(operator)
    base = ModelVariant.objects.create(name="base-270m", format="gguf", has_chat_template=False, purpose="completions")
    chat = ModelVariant.objects.create(name="chat-no-template", format="gguf", has_chat_template=False)
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_new", args=["lab"])).content.decode()
    assert f'<option value="{base.pk}">base-270m (completions)</option>' in page
    assert f'<option value="{chat.pk}">chat-no-template (no chat template)</option>' in page


def test_viewer_cannot_create(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    assert client.post(reverse("deployments:revision_new", args=["lab"]), _post_values()).status_code == 403
    assert DeploymentRevision.objects.count() == 1


def test_preview_returns_the_planner_fragment(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)  # trying settings is reading
    url = reverse("deployments:revision_preview", args=["lab"])
    response = client.post(url, _post_values(message=""), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200
    assert body.startswith("{# ") is False and 'class="planner-report"' in body
    assert "<html" not in body
    assert "KV per token" in body and "--speculative-config" in body
    refused = client.post(url, _post_values(knobs="tensor_parallel_size=3"), HTTP_HX_REQUEST="true")
    assert "parallel.too_many_gpus" in refused.content.decode()
    assert 'class="badge error">error</span>' in refused.content.decode()
    assert DeploymentRevision.objects.count() == 1


@pytest.mark.parametrize(
    "knobs", ["tensor_parallel_size=zero", "max_model_len=lots", "bogus", "gpu_memory_utilization=7"]
)
def test_preview_with_bad_knobs_is_a_message_not_a_500(client, catalog, operator, knobs):
    make_lab(operator)
    client.force_login(operator)
    response = client.post(
        reverse("deployments:revision_preview", args=["lab"]), _post_values(knobs=knobs), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert 'class="errorlist"' in response.content.decode()


def test_preview_without_a_model_asks_for_one(client, catalog, operator):
    make_lab(operator)
    client.force_login(operator)
    response = client.get(reverse("deployments:revision_preview", args=["lab"]), HTTP_HX_REQUEST="true")
    assert "Choose a model" in response.content.decode()


# --- switch -------------------------------------------------------------------------------------


def test_switch_confirmation_fragment_shows_findings_and_diff(client, catalog, operator):
    host, _ = make_lab(operator)
    add_revision(host, operator, knobs={**GOOD_KNOBS, "max_num_seqs": 8}, message="more sequences")
    client.force_login(operator)
    response = client.get(reverse("deployments:revision_switch", args=["lab", 2]), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert "<html" not in body and 'id="switch-confirm"' in body
    assert "kv.concurrency_short" in body or "No findings" in body
    assert 'class="diff-added"' in body and "max_num_seqs" in body
    assert "Switch now" in body
    full = client.get(reverse("deployments:revision_switch", args=["lab", 2]))
    assert "<html" in full.content.decode()


def test_switch_creates_the_operation_and_enqueues_on_commit(
    client, catalog, operator, django_capture_on_commit_callbacks, monkeypatch
):
    sent = record_sent_tasks(monkeypatch)
    host, _ = make_lab(operator)
    add_revision(host, operator, knobs={**GOOD_KNOBS, "max_num_seqs": 8})
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client.post(reverse("deployments:revision_switch", args=["lab", 2]), HTTP_HX_REQUEST="true")
    op = Operation.objects.get(kind="switch")
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("deployments:operation_detail", args=[op.pk])
    assert op.revision.number == 2 and op.state == "queued" and op.requested_by == operator
    assert len(callbacks) == 1
    assert sent == [
        {"name": "agent.switch", "kwargs": {"op_id": str(op.pk)}, "queue": host.queue, "task_id": str(op.pk)}
    ]
    assert AuditEvent.objects.filter(action="operation.switch").exists()


def test_planner_errors_refuse_an_operator_and_write_nothing(
    client, catalog, operator, django_capture_on_commit_callbacks
):
    host, _ = make_lab(operator)
    add_revision(host, operator, knobs=BAD_KNOBS, message="three-way")
    client.force_login(operator)
    with django_capture_on_commit_callbacks() as callbacks:
        response = client.post(
            reverse("deployments:revision_switch", args=["lab", 2]),
            {"override_reason": "I know better"},
            HTTP_HX_REQUEST="true",
        )
    body = response.content.decode()
    assert response.status_code == 200
    assert "parallel.too_many_gpus" in body and "Only an admin may override" in body
    assert not Operation.objects.exists()
    assert callbacks == []


def test_admin_overrides_the_planner_with_a_recorded_reason(
    client, catalog, operator, admin_user, django_capture_on_commit_callbacks, monkeypatch
):
    from controlpanel.celery import app

    monkeypatch.setattr(app, "send_task", lambda name, **kw: None)
    host, _ = make_lab(operator)
    add_revision(host, operator, knobs=BAD_KNOBS, message="three-way")
    client.force_login(admin_user)
    confirm = client.get(reverse("deployments:revision_switch", args=["lab", 2]), HTTP_HX_REQUEST="true")
    assert "Override the planner" in confirm.content.decode()
    refused = client.post(reverse("deployments:revision_switch", args=["lab", 2]))
    assert "The planner found errors" in refused.content.decode()
    assert not Operation.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("deployments:revision_switch", args=["lab", 2]), {"override_reason": "a third card arrives"}
        )
    op = Operation.objects.get()
    assert response.status_code == 302 and response.url == reverse("deployments:operation_detail", args=[op.pk])
    assert op.params["override_reason"] == "a third card arrives"
    assert AuditEvent.objects.get(action="operation.switch").data["params"]["override_reason"] == "a third card arrives"


def test_a_busy_host_is_an_error_message(client, catalog, operator):
    host, _ = make_lab(operator)
    add_revision(host, operator)
    Operation.objects.create(kind="install", host=host, state="running", requested_by=operator)
    client.force_login(operator)
    response = client.post(reverse("deployments:revision_switch", args=["lab", 2]), HTTP_HX_REQUEST="true")
    assert "lab is busy" in response.content.decode()
    assert Operation.objects.filter(kind="switch").count() == 0


def test_viewer_cannot_switch(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    assert client.post(reverse("deployments:revision_switch", args=["lab", 1])).status_code == 403
    assert not Operation.objects.exists()


def test_the_active_revisions_page_offers_a_restart_not_a_switch_to_itself(client, catalog, operator):
    host, r1 = make_lab(operator)
    r2 = add_revision(host, operator)
    client.force_login(operator)
    active = client.get(reverse("deployments:revision_detail", args=[host.name, r1.number])).content.decode()
    assert f"Restart r1's engine on {host.name}" in active and f"Switch {host.name} to r1" not in active
    assert f"r1 is what {host.name} serves now" in active
    other = client.get(reverse("deployments:revision_detail", args=[host.name, r2.number])).content.decode()
    assert f"Switch {host.name} to r2" in other and "Restart r2" not in other
