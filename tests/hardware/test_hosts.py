"""Hosts declared by hand, then measured by a real probe; heartbeat and offline; telemetry retention."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from core.models import AuditEvent
from hardware.models import GPU, EngineSample, GpuSample, GpuType, Host
from hardware.services import host_declare, host_heartbeat, host_probe_record, telemetry_record, telemetry_rollup
from hostagent.probes.nvml import probe_host_gpus, sample_gpus
from hostagent.probes.replay import ReplayNvml

pytestmark = pytest.mark.django_db
H200 = Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h200_x1.json"


def recorded_inventory() -> dict:
    """The inventory the probe read on a real H200 (replayed from the recording)."""
    return probe_host_gpus(ReplayNvml.from_fixture(H200)).to_dict()


def test_declared_host_is_replaced_by_the_probe_and_mismatches_are_flagged(catalog, admin_user):
    host = host_declare(
        name="gpu-box", address="10.0.0.5", gpus=[(GpuType.objects.get(short_name="RTX 4090"), 2)], actor=admin_user
    )
    assert host.declared and host.gpus.count() == 2 and host.queue == "host.gpu-box"

    host = host_probe_record(
        name="gpu-box", facts={"cpu_model": "EPYC", "cpu_logical_cores": 16}, inventory=recorded_inventory()
    )

    assert not host.declared
    assert host.nvml_available and host.cuda_version == "13.0"
    gpus = list(host.gpus.all())
    assert [g.name for g in gpus] == ["NVIDIA H200"]
    assert gpus[0].compute_capability == "9.0" and gpus[0].pcie_gen == 5 and gpus[0].power_limit_w == 700
    assert gpus[0].gpu_type.short_name == "H200"
    assert any("declared 2 GPU(s), probe found 1" in m for m in host.probe_mismatches)
    assert any("RTX 4090" in m and "H200" in m for m in host.probe_mismatches)
    assert AuditEvent.objects.filter(action="host.probe", host=host).exists()


def test_host_without_driver_is_a_cpu_only_host(catalog):
    inventory = probe_host_gpus(ReplayNvml.without_driver("LibraryNotFound")).to_dict()
    host = host_probe_record(name="laptop", facts={}, inventory=inventory)
    assert host.cpu_only and host.gpus.count() == 0 and "LibraryNotFound" in host.nvml_reason


def test_a_host_is_offline_when_its_agent_stops_heartbeating(settings):
    host = host_probe_record(name="box", facts={}, inventory={"available": False, "gpus": []})
    assert host.is_online
    Host.objects.filter(pk=host.pk).update(
        last_heartbeat=timezone.now() - timedelta(seconds=settings.HOST_OFFLINE_AFTER_S + 5)
    )
    assert not Host.objects.get(pk=host.pk).is_online
    host_heartbeat(host=host, engine_state={"running": False})
    assert Host.objects.get(pk=host.pk).is_online


def test_telemetry_is_written_in_bulk_and_rolled_up_after_the_raw_window(catalog, settings):
    host = host_probe_record(name="h200", facts={}, inventory=recorded_inventory())
    gpu = GPU.objects.get(host=host)
    old = timezone.now() - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H + 2)
    for i in range(12):  # two minutes of old samples, every 10 s
        telemetry_record(
            host=host,
            samples=[
                {
                    "index": 0,
                    "timestamp": (old + timedelta(seconds=10 * i)).timestamp(),
                    "utilization_gpu_percent": 50 + i,
                    "power_w": 100.0 + i,
                    "memory_used_bytes": 1000,
                    "energy_mj": 1000 * i,
                }
            ],
        )
    telemetry_record(host=host, samples=[{"index": 0, "utilization_gpu_percent": 99, "power_w": 690.0}])
    assert GpuSample.objects.filter(gpu=gpu).count() == 13

    result = telemetry_rollup()

    assert result["deleted_raw"] == 12
    rollups = GpuSample.objects.filter(gpu=gpu, resolution_s=60)
    assert 2 <= rollups.count() <= 3  # the old samples, one row per minute
    assert GpuSample.objects.filter(gpu=gpu, resolution_s=0).count() == 1  # recent samples stay raw
    assert max(r.energy_mj for r in rollups) == 11000


def test_host_declare_command(catalog):
    out = io.StringIO()
    call_command("host", "declare", "lab-box", "--gpu", "RTX 3090:6", stdout=out)
    assert "6 GPU(s)" in out.getvalue()
    assert Host.objects.get(name="lab-box").gpus.count() == 6
    with pytest.raises(CommandError) as exc:
        call_command("host", "declare", "other", "--gpu", "Voodoo 2:1", stdout=io.StringIO())
    assert exc.value.returncode == 2
    assert not Host.objects.filter(name="other").exists()


def test_recorded_h200_telemetry_is_stored_as_measured(catalog):
    """Samples the probe read on a real H200 under load (replayed) land in the database unchanged."""
    host = host_probe_record(name="h200-t", facts={}, inventory=recorded_inventory())
    replay = ReplayNvml.from_fixture(H200)
    series = []
    for _ in range(5):
        samples = sample_gpus(replay)
        series.append(samples[0])
        assert telemetry_record(host=host, samples=[s.to_dict() for s in samples]) == 1
    stored = list(GpuSample.objects.filter(gpu__host=host).order_by("ts"))
    assert [s.power_w for s in stored] == [s.power_w for s in series]
    assert [s.energy_mj for s in stored] == [s.energy_mj for s in series]
    assert all(s.mem_clock_mhz and s.sm_clock_mhz is not None and s.temp_c is not None for s in stored)


def test_engine_metrics_are_kept_for_the_last_hour_and_rolled_up_later(catalog, settings, client, viewer):
    host = host_probe_record(name="serving", facts={}, inventory={"available": False, "gpus": []})
    for i in range(3):
        host_heartbeat(
            host=host,
            engine_state={"running": True},
            engine_metrics={
                "requests_running": i,
                "requests_waiting": 0,
                "kv_cache_usage": 0.25,
                "generation_tokens_total": 100.0 * i,
            },
        )
    host_heartbeat(host=host, engine_state={"running": False}, engine_metrics={})  # stopped: nothing to keep
    assert EngineSample.objects.filter(host=host).count() == 3

    client.force_login(viewer)
    page = client.get(f"/hosts/{host.name}/").content.decode()
    assert "Engine requests" in page and "KV cache usage" in page and "Generated tokens/s" in page

    old = timezone.now() - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H + 1)
    EngineSample.objects.filter(host=host).update(ts=old)
    result = telemetry_rollup()
    assert result["engine_deleted_raw"] == 3 and result["engine_rolled_up"] == 1
    rollup = EngineSample.objects.get(host=host)
    assert rollup.resolution_s == 60 and rollup.requests_running == 1.0 and rollup.generation_tokens_total == 200.0


def test_a_viewer_is_not_told_to_install_an_engine_below_a_form_they_cannot_see(client, viewer):
    host = host_probe_record(name="bare", facts={}, inventory={"available": False, "gpus": []})
    client.force_login(viewer)
    page = client.get(f"/hosts/{host.name}/").content.decode()
    assert "No engine installed yet: an operator or admin installs one here." in page
    assert "install one below" not in page and "Install an engine" not in page
