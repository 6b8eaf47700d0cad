"""A host's CPU and memory through the agent API: the agent's telemetry loop reads this machine's
/proc and reports it through its real port to the live panel; a report is stored as measured,
in one INSERT; a bad reading refuses the report whole; the retention policy rolls samples up
like the GPUs'."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from hardware.credentials import host_token_issue
from hardware.models import HostSample
from hardware.services import telemetry_rollup
from hostagent.context import AgentContext
from hostagent.local import supervisor_for
from hostagent.loops import telemetry_loop
from hostagent.panel import HttpPanel
from hostagent.probes.host_usage import host_usage, parse_cpu_times

H200 = Path(__file__).resolve().parent.parent / "fixtures" / "proc" / "h200-x1"


def recorded() -> dict[str, Any]:
    """The H200 host's recorded /proc as the probe reports it (HostUsage.to_dict())."""
    usage = host_usage(
        before=parse_cpu_times((H200 / "stat_before").read_text()),
        after=parse_cpu_times((H200 / "stat_after").read_text()),
        meminfo=(H200 / "meminfo").read_text(),
        loadavg=(H200 / "loadavg").read_text(),
        timestamp=time.time(),
    )
    assert usage is not None
    return usage.to_dict()


def post(token: str, body: dict[str, Any]) -> Any:
    return Client().post(
        "/agent/v1/telemetry", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


@pytest.mark.django_db(transaction=True)
def test_the_agents_loop_reports_this_machines_cpu_and_memory_to_the_panel(
    live_server: Any, tmp_path: Path, settings: Any
) -> None:
    """A CPU-only host's agent: no NVML, the loop still reports, through the outbox port, what
    /proc says; the panel stores it on the token's host."""
    host, token = host_token_issue(name="cpu-box", actor=None)
    settings.TELEMETRY_INTERVAL_S = 0.2
    settings.HOST_STATE_DIR = tmp_path / "state"
    panel = HttpPanel(live_server.url, token, outbox_dir=tmp_path / "outbox")
    ctx = AgentContext(host="cpu-box", panel=panel, supervisor=supervisor_for("cpu-box"))
    stop = threading.Event()
    loop = threading.Thread(target=telemetry_loop, args=(ctx, stop), kwargs={"gpus": False})
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while HostSample.objects.filter(host=host).count() < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        loop.join(timeout=10)
    samples = list(HostSample.objects.filter(host=host).order_by("ts"))
    assert len(samples) >= 3 and not list((tmp_path / "outbox").glob("*.json"))  # delivered, none waiting
    meminfo = Path("/proc/meminfo").read_text()
    total = int(meminfo.split("MemTotal:")[1].split()[0]) * 1024
    for sample in samples:
        assert sample.cpu_pct is not None and 0 <= sample.cpu_pct <= 100
        assert sample.mem_total_bytes == total
        assert sample.mem_available_bytes is not None and 0 < sample.mem_available_bytes <= total
        assert sample.mem_used_bytes == total - sample.mem_available_bytes
        assert sample.load_1 is not None and sample.swap_used_bytes is not None
        assert abs((timezone.now() - sample.ts).total_seconds()) < 60


def test_a_panel_that_does_not_answer_delays_the_reports_never_the_readings(tmp_path: Path, settings: Any) -> None:
    """A stopped web server accepts connections and answers nothing: each send waits out the port's
    timeout. The readings go on every interval all the same and wait in the outbox, none missing
    (bench/chaos.py's engine-away fault found a gap of a timeout's length)."""
    from tests.support.receivers import SilentReceiver

    settings.TELEMETRY_INTERVAL_S = 0.2
    settings.HOST_STATE_DIR = tmp_path / "state"
    with SilentReceiver() as silent:
        panel = HttpPanel(f"http://127.0.0.1:{silent.port}", "hct_x", outbox_dir=tmp_path / "outbox", timeout=2.0)
        ctx = AgentContext(host="cpu-box", panel=panel, supervisor=supervisor_for("cpu-box"))
        stop = threading.Event()
        loop = threading.Thread(target=telemetry_loop, args=(ctx, stop), kwargs={"gpus": False})
        loop.start()
        time.sleep(4.0)
        stop.set()
        loop.join(timeout=15)
    assert not loop.is_alive()
    kept = [json.loads(p.read_text())["body"] for p in sorted((tmp_path / "outbox").glob("*-telemetry.json"))]
    stamps = sorted(s["timestamp"] for body in kept for s in body["host_samples"])
    assert len(stamps) >= 10  # about 20 readings in 4 s; the first send alone blocked 2 s
    assert max(b - a for a, b in zip(stamps, stamps[1:], strict=False)) < 1.0  # no gap of a timeout's length


@pytest.mark.django_db
def test_a_report_is_stored_as_measured_in_one_insert() -> None:
    host, token = host_token_issue(name="h200-x1", actor=None)
    sent = [{**recorded(), "timestamp": time.time() - 10 * n} for n in range(40)]
    post(token, {"gpu_samples": []})  # the token's last use is written at most once a minute
    with CaptureQueriesContext(connection) as queries:
        response = post(token, {"gpu_samples": [], "host_samples": sent})
    assert response.status_code == 200
    assert response.json() == {"gpu_samples": 0, "engine_samples": 0, "host_samples": 40}
    assert len(queries.captured_queries) == 2, [q["sql"] for q in queries.captured_queries]  # the token, the INSERT
    stored = HostSample.objects.filter(host=host).order_by("-ts").first()
    assert stored is not None and stored.resolution_s == 0
    assert stored.cpu_pct == pytest.approx(100 * 803 / 3207)
    assert stored.mem_total_bytes == 135_129_063_424 and stored.mem_available_bytes == 131475832 * 1024
    assert stored.mem_used_bytes == (131961976 - 131475832) * 1024
    assert (stored.swap_total_bytes, stored.swap_used_bytes, stored.load_15) == (0, 0, 0.0)
    assert abs(stored.ts.timestamp() - sent[0]["timestamp"]) < 1e-5


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"cpu_percent": 250.0}, "out of range"),
        ({"memory_total_bytes": -1}, "out of range"),
        ({"load_1": "high"}, "must be a number"),
        ({"swap_used_bytes": 2**70}, "out of range"),
        ({"timestamp": 12.0}, "out of range"),
    ],
)
def test_a_bad_reading_refuses_the_report_whole(change: dict[str, Any], says: str) -> None:
    _host, token = host_token_issue(name="h200-x1", actor=None)
    good = recorded()
    response = post(token, {"host_samples": [good, {**good, **change}]})
    assert response.status_code == 400 and says in response.json()["error"]
    assert not HostSample.objects.exists()
    assert post(token, {"host_samples": {"not": "a list"}}).status_code == 400


@pytest.mark.django_db
def test_a_reading_the_host_could_not_make_is_stored_as_missing() -> None:
    host, token = host_token_issue(name="mac", actor=None)  # no /proc/loadavg, say
    unknown_load = {"load_1": None, "load_5": None, "load_15": None}
    assert post(token, {"host_samples": [{**recorded(), **unknown_load}]}).status_code == 200
    stored = HostSample.objects.get(host=host)
    assert stored.load_1 is None and stored.mem_total_bytes == 135_129_063_424


@pytest.mark.django_db
def test_samples_are_rolled_up_after_the_raw_window_like_the_gpus(settings: Any) -> None:
    host, token = host_token_issue(name="h200-x1", actor=None)
    old = timezone.now() - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H + 2)
    old = old.replace(second=0, microsecond=0)
    gib = 1024**3
    rows = [
        {
            **recorded(),
            "timestamp": (old + timedelta(seconds=10 * i)).timestamp(),
            "cpu_percent": 10.0 * i,
            "memory_available_bytes": (100 - i) * gib,
        }
        for i in range(6)  # one old minute, every 10 s
    ]
    expired = timezone.now() - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_D + 1)
    assert post(token, {"host_samples": [*rows, {**recorded(), "timestamp": expired.timestamp()}]}).status_code == 200
    assert post(token, {"host_samples": [recorded()]}).status_code == 200  # now: stays raw

    result = telemetry_rollup()

    assert result["usage_deleted_raw"] == 7 and result["usage_rolled_up"] == 2
    assert result["usage_expired"] == 1  # the month-old minute, rolled up and then expired
    minute = HostSample.objects.get(host=host, resolution_s=60)
    assert minute.ts == old and minute.cpu_pct == pytest.approx(25.0)  # mean of 0..50
    assert minute.mem_available_bytes == round(97.5 * gib) and minute.mem_total_bytes == 135_129_063_424
    assert HostSample.objects.filter(host=host, resolution_s=0).count() == 1
