"""The dashboard, a host's page and their live widgets: content, fixed query counts, actions."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from deployments.models import Deployment, ModelVariant, Operation
from deployments.selectors import hosts as host_selectors
from hardware import selectors
from hardware.models import GpuSample, Host
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
SVG = "{http://www.w3.org/2000/svg}"


def make_host(name: str, gpus: int, *, online: bool = True, samples: int = 3, **extra: object) -> Host:
    now = timezone.now()
    host = HostFactory(
        name=name,
        last_heartbeat=now if online else now - timedelta(hours=2),
        nvml_available=gpus > 0,
        **extra,
    )
    rows = []
    for i in range(gpus):
        gpu = GPUFactory(
            host=host,
            index=i,
            pcie_gen=4,
            pcie_width=16,
            power_limit_w=350,
            peers={str(j): {"read": "ok", "write": "ok", "topology": "hostbridge"} for j in range(gpus) if j != i},
        )
        for k in range(samples):
            rows.append(
                GpuSample(
                    gpu=gpu,
                    ts=now - timedelta(seconds=10 * (samples - k)),
                    util_pct=40 + k,
                    mem_used_bytes=(10 + i) * 1024**3,
                    power_w=200 + k,
                    temp_c=60,
                )
            )
    GpuSample.objects.bulk_create(rows)
    return host


def parse_svg(text: str) -> ET.Element:
    return ET.fromstring(text)  # noqa: S314 - our own SVG, not untrusted input


def queries_for(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


# --- dashboard ---------------------------------------------------------------------------------


@pytest.mark.parametrize("url_name", ["dashboard:index", "dashboard:cards"])
def test_dashboard_query_count_does_not_grow_with_hosts(client, viewer, catalog, django_assert_num_queries, url_name):
    client.force_login(viewer)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    for n in range(2):
        make_host(f"small-{n}", 1)
    url = reverse(url_name)
    cache.clear()  # every card built: no rendering from another test's hosts of the same content
    baseline = queries_for(client, url)

    for n in range(18):
        host = make_host(f"big-{n}", 8, online=n % 3 != 0)
        rev = make_revision(host=host, engine="vllm", model_variant=variant, knobs={}, message="m", actor=None)
        Deployment.objects.create(host=host, active_revision=rev)
        Host.objects.filter(pk=host.pk).update(
            engine_state={"running": True, "health": "healthy"},
            engine_metrics={"requests_running": 2, "requests_waiting": 1, "kv_cache_usage": 0.5},
        )
        Operation.objects.create(kind="switch", host=host, revision=rev, state="running", progress=0.5)
    assert Host.objects.count() == 20
    cache.clear()
    with django_assert_num_queries(baseline):
        response = client.get(url)
    assert response.content.count(b'class="gpu"') == 2 + 18 * 8
    assert response.content.count(b"data-op=") == 18


def test_dashboard_shows_engine_metrics_gpu_bars_and_operation(client, viewer, catalog):
    host = make_host("gpu-a", 2)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    rev = make_revision(host=host, engine="vllm", model_variant=variant, knobs={}, message="m", actor=None)
    Deployment.objects.create(host=host, active_revision=rev)
    Host.objects.filter(pk=host.pk).update(
        engine_state={"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1", "port": 8000},
        engine_metrics={"requests_running": 3, "requests_waiting": 7, "kv_cache_usage": 0.42},
    )
    op = Operation.objects.create(kind="benchmark", host=host, revision=rev, state="running", progress=0.25)
    client.force_login(viewer)
    html = client.get(reverse("dashboard:index")).content.decode()
    assert 'hx-get="/hosts/cards/"' in html and 'hx-trigger="every 5s"' in html
    card = html[html.index('data-host="gpu-a"') :]
    assert ">online<" in card
    assert "Qwen3.5-27B" in card and "r1" in card
    assert "running <strong>3</strong>" in card and "waiting <strong>7</strong>" in card
    assert "KV cache <strong>42%</strong>" in card
    assert card.count('class="bar"') == 2 and card.count('class="bar util"') == 2
    assert "mem 42%" in card and "mem 46%" in card  # 10 and 11 GiB used of 24 GiB
    assert "202 W / 350 W" in card
    assert f'data-op="{op.pk}"' in card
    assert reverse("hardware:operation_widget", args=[op.pk]) in card
    assert "No worker listens" not in card


def test_offline_host_with_a_queued_operation_says_no_worker_listens(client, viewer):
    offline = make_host("gone", 1, online=False)
    online = make_host("here", 1, online=True)
    Operation.objects.create(kind="switch", host=offline, state="queued")
    Operation.objects.create(kind="switch", host=online, state="queued")
    client.force_login(viewer)
    html = client.get(reverse("dashboard:cards"), HTTP_HX_REQUEST="true").content.decode()
    gone = html[html.index('data-host="gone"') : html.index('data-host="here"')]
    here = html[html.index('data-host="here"') :]
    assert ">offline<" in gone
    assert "No worker listens on <code>host.gone</code>" in gone
    assert "No worker listens" not in here


def test_single_host_card_partial(client, viewer):
    make_host("one", 1)
    make_host("two", 1)
    client.force_login(viewer)
    html = client.get(reverse("hardware:host_card", args=["one"]), HTTP_HX_REQUEST="true").content.decode()
    assert 'data-host="one"' in html and 'data-host="two"' not in html
    assert client.get(reverse("hardware:host_card", args=["nope"])).status_code == 404
    page = client.get(reverse("hardware:host_detail", args=["one"])).content.decode()
    assert f'hx-get="{reverse("hardware:host_card", args=["one"])}"' in page  # the page's "Now" refreshes it


def test_operation_widget_polls_while_active_and_stops_with_286(client, viewer):
    host = make_host("w", 1)
    op = Operation.objects.create(kind="switch", host=host, state="running", stage="starting", progress=0.4)
    client.force_login(viewer)
    url = reverse("hardware:operation_widget", args=[op.pk])
    live = client.get(url, HTTP_HX_REQUEST="true")
    assert live.status_code == 200
    assert b'hx-trigger="every 2s"' in live.content and b"<progress" in live.content and b"starting" in live.content
    Operation.objects.filter(pk=op.pk).update(state="succeeded", progress=1.0)
    done = client.get(url, HTTP_HX_REQUEST="true")
    assert done.status_code == 286
    assert b"hx-trigger" not in done.content and b"Succeeded" in done.content


# --- host page -----------------------------------------------------------------------------------


@pytest.fixture
def gpu_host(catalog):
    host = make_host("rig", 2, samples=30)
    variant = ModelVariant.objects.get(name="Qwen3.6-35B-A3B-AWQ-4bit")
    revs = [
        make_revision(host=host, engine="vllm", model_variant=variant, knobs={}, message=f"rev {i}", actor=None)
        for i in range(3)
    ]
    Deployment.objects.create(host=host, active_revision=revs[-1])
    host.engine_state = {"running": True, "health": "healthy"}
    host.save()
    return host


def test_host_page_shows_gpus_telemetry_what_fits_history_and_actions(client, operator, gpu_host):
    client.force_login(operator)
    response = client.get(reverse("hardware:host_detail", args=["rig"]))
    assert response.status_code == 200
    html = response.content.decode()
    # GPU facts
    assert "8.6" in html and "gen 4 x16" in html and "GPU1: P2P read ok / write ok" in html and "hostbridge" in html
    # four telemetry charts with one series per GPU
    charts = [parse_svg(svg) for svg in response.context["telemetry"].values()]
    assert len(charts) == 4
    for chart in charts:
        series = chart.findall(f".//{SVG}g[@class='series']")
        assert [s.get("data-series") for s in series] == ["GPU0", "GPU1"]
        assert all(s.get("data-points") == "30" for s in series)
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="chart line"') == 4
    # what fits: every catalog model, coloured cells
    table = host_selectors.host_what_fits(gpus=list(gpu_host.gpus.all()))
    assert {row.model for row in table.rows} >= {"Qwen3.6-35B-A3B-AWQ-4bit", "Qwen3.5-122B-A10B-Q6_K_XL"}
    assert all(len(row.cells) == len(table.contexts) for row in table.rows)
    verdicts = {c.verdict for row in table.rows for c in row.cells}
    assert {"fits", "no"} <= verdicts
    assert 'class="fit no"' in html and 'class="fit fits"' in html
    assert "layer split over 2 GPUs" in html and "TP=2 x PP=1" in html
    # history with the link to the full page, active revision, actions
    assert "r3" in html and reverse("deployments:revision_list", args=["rig"]) in html
    assert reverse("hardware:host_probe", args=["rig"]) in html
    assert reverse("hardware:host_stop", args=["rig"]) in html
    assert reverse("deployments:benchmark_new", args=["rig"]) in html


def test_host_page_hides_actions_from_viewers(client, viewer, gpu_host):
    client.force_login(viewer)
    html = client.get(reverse("hardware:host_detail", args=["rig"])).content.decode()
    assert reverse("hardware:host_probe", args=["rig"]) not in html
    assert reverse("deployments:benchmark_new", args=["rig"]) not in html


def test_what_fits_renders_fast_on_eight_gpus(catalog):
    host = make_host("eight", 8, samples=0)
    started = time.perf_counter()
    table = host_selectors.host_what_fits(gpus=list(host.gpus.all()))
    elapsed = time.perf_counter() - started
    assert len(table.rows) > 20
    assert elapsed < 1.5, f"what fits took {elapsed:.3f}s"


def test_telemetry_falls_back_to_rollups_where_raw_samples_are_gone(client, viewer):
    host = make_host("old", 1, samples=0)
    gpu = host.gpus.get()
    now = timezone.now()
    rollups = [
        GpuSample(gpu=gpu, ts=now - timedelta(minutes=m), resolution_s=60, util_pct=10) for m in range(59, 20, -1)
    ]
    raw = [GpuSample(gpu=gpu, ts=now - timedelta(seconds=s), util_pct=90) for s in range(20 * 60, 0, -10)]
    # a rollup overlapping the raw window is not drawn twice
    overlap = [GpuSample(gpu=gpu, ts=now - timedelta(minutes=5), resolution_s=60, util_pct=50)]
    GpuSample.objects.bulk_create(rollups + raw + overlap)
    series = selectors.gpu_series(host=host, hours=1)[0]
    assert len(series) == 39 + 120
    assert [r["resolution_s"] for r in series[:39]] == [60] * 39
    assert all(r["resolution_s"] == 0 for r in series[39:])
    assert [r["ts"] for r in series] == sorted(r["ts"] for r in series)

    only_rollups = make_host("older", 1, samples=0)
    g2 = only_rollups.gpus.get()
    GpuSample.objects.bulk_create(
        [GpuSample(gpu=g2, ts=now - timedelta(minutes=m), resolution_s=60, util_pct=5) for m in range(30)]
    )
    assert len(selectors.gpu_series(host=only_rollups, hours=1)[0]) == 30

    client.force_login(viewer)
    response = client.get(reverse("hardware:host_telemetry", args=["old"]), HTTP_HX_REQUEST="true")
    chart = parse_svg(response.context["telemetry"]["util_pct"])
    assert chart.find(f".//{SVG}g[@class='series']").get("data-points") == "159"
    assert b'hx-trigger="every 30s"' in response.content


def test_cpu_only_host_page(client, viewer, catalog):
    make_host("laptop", 0)
    client.force_login(viewer)
    html = client.get(reverse("hardware:host_detail", args=["laptop"])).content.decode()
    assert "No GPUs on this host" in html
    assert "No GPU telemetry in the last 1 hour" in html and "<svg" not in html
    assert client.get(reverse("hardware:host_detail", args=["nope"])).status_code == 404


# --- actions -------------------------------------------------------------------------------------


def test_operator_probes_a_host(client, operator, django_capture_on_commit_callbacks):
    host = make_host("p", 1)
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("hardware:host_probe", args=["p"]))
    op = Operation.objects.get(host=host)
    assert op.kind == "probe" and op.state == "queued" and op.requested_by == operator
    assert response.status_code == 302 and response.url == reverse("deployments:operation_detail", args=[op.pk])
    assert len(callbacks) == 1
    assert AuditEvent.objects.filter(action="operation.probe", host=host, actor=operator).exists()


def test_operator_stops_the_engine_and_a_busy_host_says_so(client, operator, django_capture_on_commit_callbacks):
    host = make_host("s", 1)
    client.force_login(operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        first = client.post(reverse("hardware:host_stop", args=["s"]))
    op = Operation.objects.get(host=host)
    assert op.kind == "stop" and first.url == reverse("deployments:operation_detail", args=[op.pk])
    assert len(callbacks) == 1
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        second = client.post(reverse("hardware:host_stop", args=["s"]), follow=True)
    assert Operation.objects.filter(host=host).count() == 1
    assert callbacks == []
    assert b"Could not stop the engine" in second.content and b"is busy" in second.content


def test_viewer_cannot_probe_or_stop(client, viewer):
    make_host("v", 1)
    client.force_login(viewer)
    assert client.post(reverse("hardware:host_probe", args=["v"])).status_code == 403
    assert client.post(reverse("hardware:host_stop", args=["v"])).status_code == 403
    assert not Operation.objects.exists()
