"""The supervisor with the real llama-server and the real Gemma 3 270M model, on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hostagent.runtime.errors import EngineExitedError, PortBusyError
from hostagent.runtime.processes import group_members, is_alive
from hostagent.runtime.readiness import wait_ready
from hostagent.runtime.strays import port_is_free
from hostagent.runtime.supervisor import Supervisor
from serving.engines.base import LaunchSpec
from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path, llama_server_binary

API_KEY = "sk-test-SeCrEt-4242"


def llama_spec(
    port: int,
    served_name: str = "gemma-test",
    *,
    model: str | None = None,
    api_key: str | None = None,
    binary: str | None = None,
    purpose: str = GEMMA_PURPOSE,
) -> LaunchSpec:
    """A llama-server launch built by hand, independent of the engine adapters (the test model is
    served for completions, as it is: tests.support.llama.GEMMA_PURPOSE)."""
    binary = binary or llama_server_binary()
    argv = [binary, "-m", model or gemma_model_path(), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "-c", "2048", "-np", "1", "-ngl", "0", "--metrics", "-a", served_name]
    if api_key:
        argv += ["--api-key", api_key]
    base = f"http://127.0.0.1:{port}"
    return LaunchSpec(
        engine="llama.cpp",
        argv=tuple(argv),
        env={},
        cwd=None,
        host="127.0.0.1",
        port=port,
        served_name=served_name,
        health_url=f"{base}/health",
        models_url=f"{base}/v1/models",
        metrics_url=f"{base}/metrics",
        chat_url=f"{base}/v1/chat/completions",
        completions_url=f"{base}/v1/completions",
        secret_values=(api_key,) if api_key else (),
        purpose=purpose,
    )


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path / "state", stop_grace=5.0)
    yield supervisor
    supervisor.stop(grace=2.0)


@pytest.fixture
def bystanders() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts outside the supervisor; killed at the end whatever happens."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@pytest.mark.engine
def test_start_ready_chat_stop(sup: Supervisor) -> None:
    port = free_port()
    spec = llama_spec(port, api_key=API_KEY)
    progress: list[tuple[str, float, str]] = []
    paused_during_start: list[bool] = []

    def on_progress(stage: str, fraction: float, message: str) -> None:
        progress.append((stage, fraction, message))
        paused_during_start.append(sup.status().watchdog_paused)

    result = sup.start(spec, revision_label="r1", revision_id="42", on_progress=on_progress)

    assert result.chat is not None and (result.chat.completion_tokens or 0) >= 1
    assert "gemma-test" in result.ready.models
    status = sup.status(probe=True)
    assert status.running and status.phase == "ready" and status.healthy
    assert (status.pid, status.revision_label, status.revision_id) == (result.pid, "r1", "42")
    assert (status.served_name, status.port) == ("gemma-test", port)
    # progress: stages in order, fractions never go back, ends at 1.0; watchdog paused meanwhile
    stages = [p[0] for p in progress]
    assert stages[0] == "stopping" and "launching" in stages and "verify" in stages and stages[-1] == "ready"
    fractions = [p[1] for p in progress]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(paused_during_start) and not sup.status().watchdog_paused
    # the API key never reaches the state file, the status or the log
    state_text = (sup.state.engine_file).read_text()
    assert API_KEY not in state_text and "********" in state_text
    assert API_KEY not in " ".join(status.argv)
    assert API_KEY not in sup.log_path.read_text()
    assert any("llama" in line or "server" in line for line in sup.log_tail(50))

    stopped = sup.stop()
    assert stopped.was_running and stopped.graceful and stopped.revision_label == "r1"
    assert not is_alive(result.pid) and group_members(result.pgid) == []
    assert port_is_free(port)
    assert not sup.state.engine_file.exists()
    assert sup.status().phase == "stopped" and not sup.status().running


@pytest.mark.engine
def test_status_survives_a_worker_restart(sup: Supervisor, tmp_path: Path) -> None:
    spec = llama_spec(free_port())
    result = sup.start(spec, revision_label="r7", verify=False)

    # A restarted worker: a brand-new process with its own Supervisor on the same folder.
    code = (
        "import json, sys; from hostagent.runtime.supervisor import Supervisor; "
        "s = Supervisor(sys.argv[1]).status(probe=True); "
        "print(json.dumps([s.running, s.pid, s.revision_label, s.served_name, s.port, s.healthy]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "state")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    ).stdout
    assert json.loads(out) == [True, result.pid, "r7", "gemma-test", spec.port, True]

    fresh = Supervisor(tmp_path / "state")
    assert fresh.status().pid == result.pid
    assert fresh.log_tail(20)  # the engine's log, read by the new instance
    stopped = fresh.stop(grace=5.0)
    assert stopped.stopped is not None and stopped.stopped.pid == result.pid
    assert not is_alive(result.pid) and port_is_free(spec.port)
    assert sup.status().phase == "stopped"


@pytest.mark.engine
def test_bad_model_path_fails_fast_with_the_log_tail(sup: Supervisor, tmp_path: Path) -> None:
    spec = llama_spec(free_port(), model=str(tmp_path / "missing-model.gguf"))
    t0 = time.monotonic()
    with pytest.raises(EngineExitedError) as caught:
        sup.start(spec, revision_label="bad", ready_timeout=120)
    elapsed = time.monotonic() - t0
    assert elapsed < 10, f"took {elapsed:.1f} s: it waited instead of noticing the exit"
    error = caught.value
    assert error.returncode not in (None, 0)
    assert any("missing-model.gguf" in line for line in error.log_tail)
    assert "missing-model.gguf" in str(error)
    # The reason itself (what an operation, a rollout wave and the watchdog report in one line)
    # quotes llama-server's own error, not only "exited 0.1 s after the start".
    assert "failed to open GGUF file" in error.reason and "missing-model.gguf" in error.reason
    assert sup.status().phase == "stopped" and port_is_free(spec.port)


@pytest.mark.engine
def test_starting_a_second_engine_stops_the_first(sup: Supervisor) -> None:
    first = sup.start(llama_spec(free_port(), "first"), revision_label="r1", verify=False)
    second_spec = llama_spec(free_port(), "second")  # another port: still one engine per host
    second = sup.start(second_spec, revision_label="r2", verify=False)

    assert [(s.pid, s.kind, s.revision_label) for s in second.stopped] == [(first.pid, "panel", "r1")]
    assert not is_alive(first.pid) and port_is_free(first.port)
    status = sup.status()
    assert status.running and status.revision_label == "r2" and status.pid == second.pid
    assert httpx.get(second_spec.models_url).json()["data"][0]["id"] == "second"


@pytest.mark.engine
def test_a_stray_engine_on_the_port_is_left_alone_by_default(
    sup: Supervisor, bystanders: list[subprocess.Popen[bytes]]
) -> None:
    """It may be another panel's engine, mid-benchmark: the default policy never stops it."""
    port = free_port()
    stray_spec = llama_spec(port, "stray")
    stray = subprocess.Popen(stray_spec.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bystanders.append(stray)
    wait_ready(stray_spec, timeout=60, process_alive=lambda: stray.poll() is None)
    assert sup.stop_strays == "never"

    with pytest.raises(PortBusyError) as caught:
        sup.start(llama_spec(port, "ours"), revision_label="r1", verify=False)

    assert caught.value.pid == stray.pid
    assert f"pid {stray.pid}" in str(caught.value) and "CONTROLPANEL_STOP_STRAYS=never" in str(caught.value)
    assert stray.poll() is None
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "stray"


@pytest.mark.engine
def test_a_stray_engine_on_the_port_is_stopped_and_reported(
    sup: Supervisor, bystanders: list[subprocess.Popen[bytes]]
) -> None:
    """Only where the host's policy allows it (was the default: it stopped another panel's engine)."""
    port = free_port()
    stray_spec = llama_spec(port, "stray")
    stray = subprocess.Popen(stray_spec.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bystanders.append(stray)
    wait_ready(stray_spec, timeout=60, process_alive=lambda: stray.poll() is None)
    sup.stop_strays = "engines"  # CONTROLPANEL_STOP_STRAYS=engines

    result = sup.start(llama_spec(port, "ours"), revision_label="r1", verify=False)

    assert [(s.pid, s.kind) for s in result.stopped] == [(stray.pid, "stray")]
    assert "llama-server" in " ".join(result.stopped[0].cmdline)
    assert stray.wait(5) is not None
    assert httpx.get(f"http://127.0.0.1:{port}/v1/models").json()["data"][0]["id"] == "ours"
    assert "stopped a stray engine" in "\n".join(sup.log_tail(200))


@pytest.mark.engine
def test_a_non_engine_on_the_port_is_refused_and_left_running(
    sup: Supervisor, bystanders: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    port = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bystanders.append(web)
    deadline = time.monotonic() + 10
    while port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.05)

    with pytest.raises(PortBusyError) as caught:
        sup.start(llama_spec(port), revision_label="r1")

    error = caught.value
    assert error.pid == web.pid and error.port == port
    assert "http.server" in " ".join(error.cmdline)
    assert f"pid {web.pid}" in str(error) and "http.server" in str(error)
    assert web.poll() is None and httpx.get(f"http://127.0.0.1:{port}/").status_code == 200
    assert sup.status().phase == "stopped"


@pytest.mark.engine
def test_the_engine_outlives_the_process_that_started_it(tmp_path: Path) -> None:
    """A worker that dies (SIGKILL) leaves its engine serving; a new worker stops it."""
    state, port = tmp_path / "state", free_port()
    code = (
        "import sys, os, signal\n"
        "from hostagent.runtime.supervisor import Supervisor\n"
        "from tests.hostagent.runtime.test_supervisor import llama_spec\n"
        "r = Supervisor(sys.argv[1]).start(llama_spec(int(sys.argv[2])), revision_label='w1', verify=False)\n"
        "print(r.pid, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    worker = subprocess.run(
        [sys.executable, "-c", code, str(state), str(port)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        timeout=120,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    pid = int(worker.stdout.split()[0])
    sup = Supervisor(state)
    try:
        assert sup.status().running and sup.status().pid == pid
        assert httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
    finally:
        sup.stop(grace=5.0)
    assert not is_alive(pid) and os.path.exists(state / "engine.log")


def test_log_tail_is_bounded_and_masks_secrets_even_after_a_worker_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    sup = Supervisor(state)
    with open(sup.log_path, "w") as log:  # a long-running engine's big log
        for i in range(200_000):
            log.write(f"INFO slot {i}: processing\n")
        log.write("INFO non-default args: {'model': 'Qwen/Qwen3-8B', 'api_key': ['sk-live-abc123']}\n")
        log.write("INFO HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123 loaded\n")
        log.write("INFO engine started with secret-value-xyz\n")
    assert sup.log_path.stat().st_size > 5_000_000

    t0 = time.monotonic()
    tail = Supervisor(state).log_tail(4)  # a new worker: it knows no secret values
    assert time.monotonic() - t0 < 0.5
    assert tail[0] == "INFO slot 199999: processing"
    assert "sk-live-abc123" not in "\n".join(tail) and "hf_abcdef" not in "\n".join(tail)
    assert "'api_key': ['********']" in tail[1]
    # values the worker does know (from a start, or handed over) are masked wherever they appear
    assert Supervisor(state, secrets=["secret-value-xyz"]).log_tail(1) == ["INFO engine started with ********"]
