"""The panel's Prometheus /metrics (docs/metrics.md): loopback only without a token, the bearer
token with one, and the figures a Grafana board reads (operations, hosts, usage)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from deployments.models import Operation, UsageDay
from tests.hardware.factories import HostFactory

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
