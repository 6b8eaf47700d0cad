"""Benchmark pages (start, progress, results, export, compare, a host's runs) and the audit log."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from api.tokens import token_create
from core.audit import audit_record
from core.models import AuditEvent
from deployments.models import BenchmarkRun, Deployment, ModelVariant, Operation, active_revision_of
from deployments.services.benchmarks import benchmark_run_record
from hardware.models import Host
from serving.benchmarking.profiles import PROFILES
from serving.benchmarking.results import RequestRecord, RunResult, build_level
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
NS = "{http://www.w3.org/2000/svg}"


def series_of(svg: str) -> list[tuple[str, int]]:
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    return [
        (g.get("data-series"), int(g.get("data-points"))) for g in root.iter(f"{NS}g") if g.get("class") == "series"
    ]


@pytest.fixture
def served(catalog):
    """A host serving r2 (r1 is older)."""
    host = HostFactory(name="bench-host", last_heartbeat=timezone.now())
    GPUFactory(host=host, index=0)
    variant = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")
    make_revision(
        host=host, engine="llama.cpp", model_variant=variant, knobs={"ctx_size": 4096}, message="one", actor=None
    )
    r2 = make_revision(
        host=host, engine="llama.cpp", model_variant=variant, knobs={"ctx_size": 8192}, message="two", actor=None
    )
    Deployment.objects.create(host=host, active_revision=r2)
    return host


def record_run(
    revision,
    *,
    speed: float = 1.0,
    levels=(1, 4),
    energy_j: float | None = 12.0,
    retried: int = 0,
    engine_rate: float | None = None,
) -> BenchmarkRun:
    """A finished run with results built by the real aggregation code; `engine_rate`: the decode
    tokens/s llama.cpp's own timings report on each request (none without)."""
    op = Operation.objects.create(
        kind="benchmark", host=revision.host, revision=revision, state="succeeded", exclusive=False
    )
    run = BenchmarkRun.objects.create(
        revision=revision,
        operation=op,
        profile_name="quick",
        profile={
            "name": "quick",
            "concurrency": list(levels),
            "num_requests": 4,
            "input_tokens": 64,
            "output_tokens": 16,
        },
        engine=revision.engine,
        gpus=[{"index": 0, "name": "NVIDIA GeForce RTX 3090"}],
    )
    built = []
    for c in levels:
        records = [
            RequestRecord(
                start_ms=100.0 * i,
                ok=True,
                ttft_ms=20.0 * c / speed,
                e2e_ms=(20.0 * c + 15 * 5.0) / speed,
                itl_ms=[5.0 / speed] * 15,
                input_tokens=64,
                output_tokens=16,
                output_chunks=16,
                retried=i < retried,
                server_timings=None
                if engine_rate is None
                else {"predicted_n": 16, "predicted_ms": 15000.0 / engine_rate, "predicted_per_second": engine_rate},
            )
            for i in range(4)
        ]
        built.append(build_level(records, label=f"c={c}", duration_s=1.0 / speed, requested=4, concurrency=c))
    result = RunResult(profile=run.profile, status="completed", model="gemma", levels=built, duration_s=2.0)
    result.set_energy(energy_j, 100.0 if energy_j else None, "counter" if energy_j else None)
    return benchmark_run_record(run=run, result=result.to_dict())


def test_the_engines_own_decode_is_shown_beside_the_panels_on_the_page_and_in_the_api(client, operator, served):
    r2 = active_revision_of(served)
    run = record_run(r2, engine_rate=195.0)  # the panel's: 1000 / 5 ms = 200 tok/s per stream
    client.force_login(operator)
    html = client.get(reverse("deployments:benchmark_detail", args=[run.pk])).content.decode()
    assert "Engine&#x27;s decode tok/s p50" in html or "Engine's decode tok/s p50" in html
    cells = [c.split("</td>")[0] for c in html.split('<td class="engine-decode">')[1:]]
    assert cells == ["195.0", "195.0"]  # one a level
    token = token_create(user=operator, name="t", actor=operator).secret
    got = client.get(f"/api/v1/benchmarks/{run.pk}/", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    for level in got["results"]["levels"]:
        assert level["decode_tokens_per_s"]["p50"] == pytest.approx(200.0)
        assert level["engine_decode_tokens_per_s"]["p50"] == pytest.approx(195.0)
    assert got["summary"]["levels"][0]["engine_decode_tokens_per_s"]["mean"] == pytest.approx(195.0)
    assert got["summary"]["levels"][0]["decode_tokens_per_s"]["mean"] == pytest.approx(200.0)
    # A run without the engine's timings (another engine, an older run) says so, never 0.
    other = record_run(r2)
    html = client.get(reverse("deployments:benchmark_detail", args=[other.pk])).content.decode()
    assert html.count('<td class="engine-decode"><span class="sub">not reported</span>') == 2


# --- start -----------------------------------------------------------------------------------------


def test_form_page_for_viewers_has_no_start_button(client, viewer, served):
    client.force_login(viewer)
    html = client.get(reverse("deployments:benchmark_new", args=["bench-host"])).content.decode()
    assert "r2" in html and 'name="concurrency"' in html and "sweep" in html
    assert "Start the benchmark" not in html and "Only operators start benchmarks" in html


def test_operator_starts_a_named_profile(client, operator, served, django_capture_on_commit_callbacks):
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("deployments:benchmark_new", args=["bench-host"]), {"profile": "sweep"})
    op = Operation.objects.get(kind="benchmark")
    assert response.status_code == 302
    assert response.url == reverse("deployments:benchmark_progress", args=[op.pk])
    assert op.revision == active_revision_of(served) and op.requested_by == operator and op.state == "queued"
    assert op.params["profile"]["name"] == "sweep" and op.params["profile"]["concurrency"] == [1, 2, 4, 8]
    assert len(callbacks) == 1
    assert AuditEvent.objects.filter(action="operation.benchmark", actor=operator).exists()


def test_operator_starts_a_custom_profile(client, operator, served, django_capture_on_commit_callbacks):
    client.force_login(operator)
    data = {"profile": "custom", "concurrency": "1, 2,8", "input_tokens": "64", "output_tokens": "24", "requests": "3"}
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        client.post(reverse("deployments:benchmark_new", args=["bench-host"]), data)
    profile = Operation.objects.get(kind="benchmark").params["profile"]
    assert profile["name"] == "custom"
    assert profile["concurrency"] == [1, 2, 8]
    assert (profile["input_tokens"], profile["output_tokens"], profile["num_requests"]) == (64, 24, 3)
    assert len(callbacks) == 1


def test_latency_targets_turn_on_goodput(client, operator, served, django_capture_on_commit_callbacks):
    client.force_login(operator)
    data = {"profile": "quick", "ttft_slo_ms": "500", "tpot_slo_ms": "50"}
    with django_capture_on_commit_callbacks(execute=False):
        client.post(reverse("deployments:benchmark_new", args=["bench-host"]), data)
    profile = Operation.objects.get(kind="benchmark").params["profile"]
    assert profile["slos"] == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert profile["concurrency"] == list(PROFILES["quick"].concurrency)  # the named profile's numbers stay


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"profile": "custom", "concurrency": "1,x"}, "concurrency", "is not a whole number"),
        ({"profile": "custom", "concurrency": "0"}, "concurrency", "between 1 and"),
        ({"profile": "custom", "concurrency": "2,2"}, "concurrency", "appears twice"),
        ({"profile": "custom"}, "concurrency", "needs at least one number"),
        ({"profile": "quick", "input_tokens": "0"}, "input_tokens", "greater than or equal to 1"),
        ({"profile": "quick", "output_tokens": "lots"}, "output_tokens", "Enter a whole number"),
        ({"profile": "quick", "requests": "-3"}, "requests", "greater than or equal to 1"),
        ({"profile": "no-such"}, "profile", "Select a valid choice"),
        ({"profile": "quick", "tpot_slo_ms": "-1"}, "tpot_slo_ms", "greater than or equal to"),
    ],
)
def test_bad_input_shows_errors_beside_fields_and_writes_nothing(
    client, operator, served, django_capture_on_commit_callbacks, data, field, message
):
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("deployments:benchmark_new", args=["bench-host"]), data)
    assert response.status_code == 400
    form = response.context["form"]
    assert any(message in e for e in form.errors[field]), form.errors
    html = response.content.decode()
    label = html[html.index(f'<label for="id_{field}"') :]
    assert 'class="has-error"' in label[:60] and message.split()[0] in label[: label.index("</label>")]
    assert not Operation.objects.exists() and callbacks == []


def test_host_without_revision_or_not_serving_it_or_busy(client, operator, served):
    client.force_login(operator)
    bare = HostFactory(name="bare")
    response = client.post(reverse("deployments:benchmark_new", args=["bare"]), {"profile": "quick"})
    assert response.status_code == 400 and b"serves no revision yet" in response.content

    response = client.post(
        reverse("deployments:benchmark_new", args=["bench-host"]), {"profile": "quick", "revision": 1}
    )
    assert b"is not what bench-host serves" in response.content
    response = client.post(
        reverse("deployments:benchmark_new", args=["bench-host"]), {"profile": "quick", "revision": 9}
    )
    assert b"has no revision r9" in response.content
    assert not Operation.objects.exists()

    Operation.objects.create(kind="switch", host=served, state="running")
    response = client.post(reverse("deployments:benchmark_new", args=["bench-host"]), {"profile": "quick"})
    assert response.status_code == 400 and b"is busy" in response.content
    assert not Operation.objects.filter(kind="benchmark").exists()
    assert bare.operations.count() == 0


def test_viewer_cannot_start(client, viewer, served):
    client.force_login(viewer)
    assert (
        client.post(reverse("deployments:benchmark_new", args=["bench-host"]), {"profile": "quick"}).status_code == 403
    )
    assert not Operation.objects.exists()


# --- progress -------------------------------------------------------------------------------------


def test_progress_polls_then_sends_the_browser_to_the_results(client, viewer, served):
    client.force_login(viewer)
    op = Operation.objects.create(
        kind="benchmark",
        host=served,
        revision=active_revision_of(served),
        state="running",
        progress=0.3,
        stage="level c=1: 2/8",
    )
    page = client.get(reverse("deployments:benchmark_progress", args=[op.pk]))
    status_url = reverse("deployments:benchmark_progress_status", args=[op.pk])
    assert page.status_code == 200 and status_url.encode() in page.content and b"level c=1: 2/8" in page.content
    live = client.get(status_url, HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and b'value="0.3"' in live.content

    run = BenchmarkRun.objects.create(
        revision=active_revision_of(served), operation=op, profile_name="quick", engine="llama.cpp"
    )
    # the run page of a run still measuring shows the progress bar
    detail = client.get(reverse("deployments:benchmark_detail", args=[run.pk]))
    assert status_url.encode() in detail.content and b"<progress" in detail.content

    Operation.objects.filter(pk=op.pk).update(state="succeeded", progress=1.0)
    done = client.get(status_url, HTTP_HX_REQUEST="true")
    assert done.status_code == 200 and done["HX-Redirect"] == reverse("deployments:benchmark_detail", args=[run.pk])
    assert client.get(reverse("deployments:benchmark_progress", args=[op.pk])).url == reverse(
        "deployments:benchmark_detail", args=[run.pk]
    )


def test_progress_of_a_failed_benchmark_stops_polling_with_the_error(client, viewer, served):
    client.force_login(viewer)
    op = Operation.objects.create(
        kind="benchmark",
        host=served,
        revision=active_revision_of(served),
        state="failed",
        error="bench-host is not serving r2",
    )
    response = client.get(reverse("deployments:benchmark_progress_status", args=[op.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 286 and b"is not serving r2" in response.content
    other = Operation.objects.create(kind="probe", host=served, state="succeeded", exclusive=False)
    assert client.get(reverse("deployments:benchmark_progress", args=[other.pk])).status_code == 404


# --- results ----------------------------------------------------------------------------------------


def test_results_page_with_plots_energy_and_commands(client, viewer, served):
    run = record_run(active_revision_of(served))
    client.force_login(viewer)
    response = client.get(reverse("deployments:benchmark_detail", args=[run.pk]))
    assert response.status_code == 200
    charts = response.context["charts"]
    assert series_of(charts["throughput"]) == [("output tok/s", 2), ("total tok/s", 2)]
    for key in ("ttft", "tpot", "e2e"):
        assert series_of(charts[key]) == [("p50", 2), ("p90", 2), ("p99", 2)]
    assert series_of(charts["scatter"]) == [("level c=1", 4), ("level c=4", 4)]
    assert series_of(charts["timeline"]) == [("level c=1", 4), ("level c=4", 4)]
    html = response.content.decode()
    assert html.count("<svg") == 6
    assert "J</strong>" in html and "tok/Wh" in html  # energy per token is known
    assert "vllm bench serve" in html and "--max-concurrency 4" in html and "guidellm benchmark" in html
    assert reverse("deployments:benchmark_export", args=[run.pk]) in html


def test_requests_sent_again_after_a_stale_connection_are_shown_not_failed(client, viewer, served):
    client.force_login(viewer)
    plain = client.get(reverse("deployments:benchmark_detail", args=[record_run(active_revision_of(served)).pk]))
    assert b"fresh connection" not in plain.content
    run = record_run(active_revision_of(served), retried=1)
    html = client.get(reverse("deployments:benchmark_detail", args=[run.pk])).content.decode()
    assert html.count('4 / 0<br><span class="sub">1 sent again on a fresh connection</span>') == 2


def test_results_without_energy_say_unknown(client, viewer, served):
    run = record_run(active_revision_of(served), energy_j=None)
    client.force_login(viewer)
    assert b"energy unknown" in client.get(reverse("deployments:benchmark_detail", args=[run.pk])).content


def test_broken_stored_results_do_not_break_the_page(client, viewer, served):
    op = Operation.objects.create(kind="benchmark", host=served, revision=active_revision_of(served), state="failed")
    run = BenchmarkRun.objects.create(
        revision=active_revision_of(served),
        operation=op,
        profile_name="odd",
        profile={"name": "odd", "concurrency": "x"},
        engine="llama.cpp",
        status="failed",
        results={"levels": ["nonsense", {"label": "c=1", "concurrency": 1, "ttft_ms": 3}]},
        raw=["junk", {"level": "c=1", "start_ms": "soon"}],
    )
    client.force_login(viewer)
    response = client.get(reverse("deployments:benchmark_detail", args=[run.pk]))
    assert response.status_code == 200
    assert b"cannot be replayed" in response.content
    export = client.get(reverse("deployments:benchmark_export", args=[run.pk]))
    assert export.status_code == 200 and json.loads(export.content)["profile"]["name"] == "odd"
    assert client.get(reverse("deployments:benchmark_detail", args=[99999])).status_code == 404


def test_export_is_a_json_download(client, viewer, served):
    run = record_run(active_revision_of(served))
    client.force_login(viewer)
    response = client.get(reverse("deployments:benchmark_export", args=[run.pk]))
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="benchmark-bench-host-r2-{run.pk}.json"'
    data = json.loads(response.content)
    assert data["host"] == "bench-host" and data["revision"] == 2
    assert [lv["label"] for lv in data["results"]["levels"]] == ["c=1", "c=4"]
    assert len(data["raw"]) == 8
    assert len(data["equivalent_commands"]["vllm"]) == 2
    assert data["equivalent_commands"]["guidellm"][0][:2] == ["guidellm", "benchmark"]


def test_compare_two_runs(client, viewer, served):
    old = record_run(served.revisions.get(number=1), speed=1.0)
    new = record_run(active_revision_of(served), speed=2.0)
    client.force_login(viewer)
    response = client.get(reverse("deployments:benchmark_compare", args=[old.pk, new.pk]))
    assert response.status_code == 200
    rows = response.context["rows"]
    tps = next(r for r in rows if r["level"] == "c=1" and r["metric"] == "output tok/s")
    assert tps["change"] == pytest.approx(1.0)  # twice as fast
    assert series_of(response.context["chart"]) == [
        (f"A: bench-host r1 #{old.pk} output tok/s", 2),
        (f"B: bench-host r2 #{new.pk} output tok/s", 2),
    ]
    html = response.content.decode()
    assert "+100%" in html and "-50%" in html  # tok/s doubled, latency halved
    assert reverse("deployments:revision_diff", args=["bench-host", 1, 2]) in html


def test_host_runs_list_picks_two_to_compare(client, viewer, served):
    a = record_run(served.revisions.get(number=1))
    b = record_run(active_revision_of(served))
    client.force_login(viewer)
    url = reverse("deployments:benchmark_list", args=["bench-host"])
    page = client.get(url)
    assert page.status_code == 200 and f"#{a.pk}".encode() in page.content and f"#{b.pk}".encode() in page.content
    html = page.content.decode()  # the picker starts on the newest run as B and the one before it as A
    assert f'name="a" value="{a.pk}" checked' in html and f'name="b" value="{b.pk}" checked' in html
    assert html.count(" checked ") == 2
    assert client.get(url, {"a": a.pk, "b": b.pk}).url == reverse("deployments:benchmark_compare", args=[a.pk, b.pk])
    same = client.get(url, {"a": a.pk, "b": a.pk})
    assert same.status_code == 400 and b"two different runs" in same.content
    missing = client.get(url, {"a": a.pk})
    assert missing.status_code == 400 and b"Pick two runs" in missing.content


# --- audit log --------------------------------------------------------------------------------------


@pytest.fixture
def events(operator, admin_user, served):
    now = timezone.now()
    other = Host.objects.create(name="other-host")
    for i in range(120):
        audit_record(
            action="revision.create" if i % 2 else "switch.request",
            summary=f"event {i}",
            host=served if i % 3 else other,
            actor=operator if i % 4 else admin_user,
        )
    AuditEvent.objects.update(created_at=now - timedelta(days=3))
    audit_record(action="switch.request", summary="today's", host=served, actor=operator)
    return now


def test_audit_log_filters_and_paginates(client, viewer, events):
    client.force_login(viewer)
    url = reverse("deployments:audit_log")
    page = client.get(url)
    assert page.context["page"].paginator.count == AuditEvent.objects.count()
    assert len(page.context["events"]) == 50 and b"page 1 of" in page.content
    assert b'rel="next"' in page.content

    by_action = client.get(url, {"action": "switch"})
    assert all(e.action.startswith("switch") for e in by_action.context["page"].object_list)
    by_user = client.get(url, {"actor": "ada"})
    assert by_user.context["page"].paginator.count == 30
    by_host = client.get(url, {"host": "other-host"})
    assert by_host.context["page"].paginator.count == 40
    today = events.date()
    recent = client.get(url, {"since": today.isoformat()})
    assert [e.summary for e in recent.context["page"].object_list] == ["today's"]
    older = client.get(url, {"until": (today - timedelta(days=1)).isoformat(), "action": "switch", "page": "2"})
    assert older.context["page"].number == 2 and older.context["page"].paginator.count == 60
    assert b"action=switch" in older.content  # the pager keeps the filters


def test_audit_log_bad_filter_shows_errors(client, viewer, events):
    client.force_login(viewer)
    response = client.get(reverse("deployments:audit_log"), {"since": "yesterday-ish"})
    assert response.status_code == 200
    assert "since" in response.context["form"].errors
    assert response.context["page"].paginator.count == 0 and b"Fix the filter" in response.content
    reversed_range = client.get(reverse("deployments:audit_log"), {"since": "2026-02-02", "until": "2026-01-01"})
    assert "until" in reversed_range.context["form"].errors
