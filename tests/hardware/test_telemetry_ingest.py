"""GPU telemetry through the agent API: a report lands in one INSERT, on the token's own GPUs,
as the probe measured it; bad values change nothing. bench/bench_ingest.py measures the speed;
these pin what is deterministic (queries per report) and what a user sees (the stored values).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from hardware.credentials import host_for_token, host_token_issue
from hardware.models import GPU, GpuSample, HostCredential
from hardware.services import telemetry_record

pytestmark = pytest.mark.django_db
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h200" / "nvml_live.json"


def recorded_rounds() -> list[dict[str, Any]]:
    """What the probe read on the H200 next to a serving engine, one GpuSample.to_dict() a round."""
    return [r["gpus"][0] for r in json.loads(FIXTURE.read_text())["sessions"]["benchmark"]["result"]]


@pytest.fixture
def h200_host(admin_user: Any) -> dict[str, Any]:
    host, token = host_token_issue(name="h200-x8", actor=admin_user)
    for index in range(8):
        GPU.objects.create(host=host, index=index, name="NVIDIA H200", memory_bytes=150754820096)
    return {"host": host, "token": token}


def post(token: str, body: dict[str, Any]) -> Any:
    return Client().post(
        "/agent/v1/telemetry", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def test_a_report_is_stored_as_measured_in_one_insert(h200_host: dict[str, Any]) -> None:
    host, rounds = h200_host["host"], recorded_rounds()
    samples = [{**rounds[5 + g], "index": g} for g in range(8)]
    samples.append({**rounds[0], "index": 8})  # no GPU 8 on this host: left out
    with CaptureQueriesContext(connection) as queries:
        stored = telemetry_record(host=host, samples=samples)
    assert stored == 8
    assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]
    rows = {s.gpu.index: s for s in GpuSample.objects.filter(gpu__host=host).select_related("gpu")}
    assert sorted(rows) == list(range(8))
    for g in range(8):
        want, got = rounds[5 + g], rows[g]
        assert got.power_w == want["power_w"] and got.energy_mj == want["energy_mj"]
        assert got.util_pct == want["utilization_gpu_percent"] and got.temp_c == want["temperature_c"]
        assert got.mem_used_bytes == want["memory_used_bytes"] and got.sm_clock_mhz == want["sm_clock_mhz"]
        assert got.mem_clock_mhz == want["memory_clock_mhz"] and got.resolution_s == 0
        assert abs(got.ts.timestamp() - want["timestamp"]) < 1e-5


def test_the_agent_api_takes_a_report_with_a_fixed_number_of_queries(h200_host: dict[str, Any]) -> None:
    """Token, then the insert: the same two queries for 8 samples or 320."""
    now = time.time()
    for rounds in (1, 40):
        body = {
            "gpu_samples": [
                {**s, "index": g, "timestamp": now - r}
                for r, s in enumerate(recorded_rounds()[:rounds])
                for g in range(8)
            ]
        }
        post(h200_host["token"], {"gpu_samples": []})  # the token's last use is written at most once a minute
        with CaptureQueriesContext(connection) as queries:
            response = post(h200_host["token"], body)
        assert response.status_code == 200 and response.json() == {
            "gpu_samples": 8 * rounds,
            "engine_samples": 0,
            "host_samples": 0,
        }
        assert len(queries.captured_queries) == 2, [q["sql"] for q in queries.captured_queries]
    assert GpuSample.objects.filter(gpu__host=h200_host["host"]).count() == 328


def test_a_report_with_a_value_that_is_not_a_number_is_refused_whole(h200_host: dict[str, Any]) -> None:
    good = {**recorded_rounds()[0], "index": 0}
    response = post(h200_host["token"], {"gpu_samples": [good, {**good, "index": 1, "power_w": "lots"}]})
    assert response.status_code == 400 and "lots" in response.json()["error"]
    response = post(h200_host["token"], {"gpu_samples": [{**good, "energy_mj": 2**70}]})
    assert response.status_code == 400 and "out of range" in response.json()["error"]
    assert not GpuSample.objects.exists()


def test_a_reading_the_driver_could_not_make_is_stored_as_missing(h200_host: dict[str, Any]) -> None:
    sample = {**recorded_rounds()[0], "index": 3, "power_w": float("nan"), "temperature_c": None}
    assert telemetry_record(host=h200_host["host"], samples=[sample]) == 1
    stored = GpuSample.objects.get()
    assert stored.power_w is None and stored.temp_c is None and stored.util_pct == sample["utilization_gpu_percent"]


def test_the_token_names_its_host_with_every_field_as_the_orm_reads_it(h200_host: dict[str, Any]) -> None:
    host, token = h200_host["host"], h200_host["token"]
    host.engine_state = {"running": True, "revision_label": "r3"}
    host.model_dirs = ["/models"]
    host.last_heartbeat = timezone.now()
    host.save()
    found = host_for_token(token)
    assert found is not None and found.pk == host.pk and found.name == "h200-x8"
    assert found.engine_state == {"running": True, "revision_label": "r3"} and found.model_dirs == ["/models"]
    assert found.last_heartbeat == host.last_heartbeat and timezone.is_aware(found.last_heartbeat)
    assert HostCredential.objects.get(host=host).last_used_at is not None
    HostCredential.objects.filter(host=host).update(revoked_at=timezone.now())
    assert host_for_token(token) is None
    assert post(token, {"gpu_samples": [{**recorded_rounds()[0], "index": 0}]}).status_code == 401
