"""The panel's Prometheus /metrics (docs/metrics.md): loopback only without a token, the bearer
token with one, and the figures a Grafana board reads (operations, hosts, usage, GPUs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from deployments.metrics import panel_metrics
from deployments.models import Operation, UsageDay
from hardware.models import GpuSample
from tests.hardware.factories import GPUFactory, HostFactory

pytestmark = pytest.mark.django_db


def _samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
    }


def test_metrics_are_for_loopback_or_the_token(settings: Any) -> None:
    client = Client()
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    settings.CONTROLPANEL_METRICS_TOKEN = "scrape-me-0123456789"
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403  # a token set: loopback is not enough
    wrong = client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403 and b"scrape-me" not in wrong.content
    ok = client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer scrape-me-0123456789")
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain")


def test_metrics_count_operations_hosts_and_usage() -> None:
    online, offline = HostFactory(name="on", last_heartbeat=timezone.now()), HostFactory(name="off")
    Operation.objects.create(kind="switch", host=online, state="failed", exclusive=False)
    Operation.objects.create(kind="switch", host=online, state="failed", exclusive=False)
    Operation.objects.create(kind="probe", host=offline, state="succeeded", exclusive=False)
    UsageDay.objects.create(
        host=online, day=datetime.now(UTC).date(), key="ci", model="m-r1", requests=9, prompt_tokens=90,
        completion_tokens=45, errors=1,
    )  # fmt: skip
    found = _samples(Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content)
    assert found[("controlpanel_operations", (("kind", "switch"), ("state", "failed")))] == 2
    assert found[("controlpanel_operations", (("kind", "probe"), ("state", "succeeded")))] == 1
    assert found[("controlpanel_hosts", (("state", "online"),))] == 1
    assert found[("controlpanel_hosts", (("state", "offline"),))] == 1
    labels = (("host", "on"), ("key", "ci"), ("model", "m-r1"))
    assert found[("controlpanel_usage_requests_today", labels)] == 9
    assert found[("controlpanel_usage_completion_tokens_today", labels)] == 45
    assert ("controlpanel_telemetry_samples_recent", (("kind", "gpu"),)) in found


def test_each_gpu_shows_its_latest_recent_telemetry() -> None:
    now = timezone.now()
    box = HostFactory(name="box")
    busy = GPUFactory(host=box, index=0, name="NVIDIA H100 80GB HBM3", memory_bytes=80 * 1024**3)
    quiet = GPUFactory(host=box, index=1, name="NVIDIA H100 80GB HBM3", memory_bytes=80 * 1024**3)
    gone = GPUFactory(host=HostFactory(name="gone"), index=0, memory_bytes=24 * 1024**3)
    sample = {"resolution_s": 0, "mem_used_bytes": 10 * 1024**3, "temp_c": 50.0}
    for gpu, ago, util, power, energy in (
        (busy, 20, 10, 100, 5_000_000),
        (busy, 5, 97, 640.5, 9_000_000),  # the latest of `busy`
        (quiet, 5, 0, None, None),
        (gone, 7200, 55, 300, None),
    ):
        GpuSample.objects.create(
            gpu=gpu, ts=now - timedelta(seconds=ago), util_pct=util, power_w=power, energy_mj=energy, **sample
        )
    GpuSample.objects.create(gpu=quiet, ts=now, resolution_s=60, util_pct=42)  # a rollup is not a sample
    found = _samples(Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content)
    first = (("gpu", "0"), ("gpu_name", "NVIDIA H100 80GB HBM3"), ("host", "box"))
    second = (("gpu", "1"), ("gpu_name", "NVIDIA H100 80GB HBM3"), ("host", "box"))
    old = (("gpu", "0"), ("gpu_name", "NVIDIA GeForce RTX 3090"), ("host", "gone"))
    assert found[("controlpanel_gpu_utilization_percent", first)] == 97
    assert found[("controlpanel_gpu_power_watts", first)] == 640.5
    assert found[("controlpanel_gpu_energy_joules_total", first)] == 9000
    assert found[("controlpanel_gpu_memory_used_bytes", first)] == 10 * 1024**3
    assert found[("controlpanel_gpu_memory_total_bytes", first)] == 80 * 1024**3
    assert found[("controlpanel_gpu_utilization_percent", second)] == 0
    assert ("controlpanel_gpu_power_watts", second) not in found  # not measured: no series, not 0
    assert ("controlpanel_gpu_energy_joules_total", second) not in found
    # A host silent for two hours: its GPU is listed with its size, but no figures from then.
    assert found[("controlpanel_gpu_memory_total_bytes", old)] == 24 * 1024**3
    assert ("controlpanel_gpu_utilization_percent", old) not in found
    assert 0 <= found[("controlpanel_gpu_sample_age_seconds", first)] < 60


def test_gpu_series_cost_the_same_queries_for_any_number_of_gpus(django_assert_num_queries: Any) -> None:
    def gpus_with_samples(count: int) -> None:
        host = HostFactory()
        for index in range(count):
            gpu = GPUFactory(host=host, index=index)
            GpuSample.objects.create(gpu=gpu, ts=timezone.now(), resolution_s=0, util_pct=50.0)

    gpus_with_samples(1)
    with CaptureQueriesContext(connection) as one:
        panel_metrics()
    gpus_with_samples(16)
    with django_assert_num_queries(len(one.captured_queries)):
        panel_metrics()
