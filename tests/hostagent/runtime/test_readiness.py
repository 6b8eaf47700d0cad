"""Readiness and the chat check against a real llama-server, plus the failure modes a user
meets: an engine that exits, a port that answers but is no engine, a wrong served name."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostagent.runtime.errors import EngineExitedError, EngineNotReadyError
from hostagent.runtime.logtail import tail_lines
from hostagent.runtime.readiness import api_key_from_spec, verify_answer, wait_ready
from hostagent.runtime.strays import port_is_free
from serving.engines.base import LaunchSpec
from tests.hostagent.runtime.test_supervisor import llama_spec
from tests.support.llama import free_port


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def not_launched(port: int) -> LaunchSpec:
    """A spec whose URLs point at `port`; nothing is launched from it."""
    return llama_spec(port, binary="llama-server", model="model.gguf")


def launch(argv: list[str] | tuple[str, ...], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT)


@pytest.mark.engine
def test_ready_then_one_test_completion_through_the_key(procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    spec = llama_spec(free_port(), api_key="sk-readiness-key")
    assert api_key_from_spec(spec) == "sk-readiness-key"
    proc = launch(spec.argv, tmp_path / "log")
    procs.append(proc)
    seen: list[tuple[str, float, str]] = []

    ready = wait_ready(
        spec, timeout=60, process_alive=lambda: proc.poll() is None, on_progress=lambda *a: seen.append(a)
    )

    assert ready.models == ["gemma-test"]
    assert ready.health_seconds <= ready.seconds < 60
    assert seen and seen[-1][0] == "models" and "ready" in seen[-1][2]
    assert all(0.0 <= fraction <= 1.0 for _, fraction, _ in seen)
    test = verify_answer(spec, max_tokens=4)  # the suite's base model, served for completions
    assert test.what == "test completion" and (test.completion_tokens or 0) >= 1 and test.seconds < 30


@pytest.mark.engine
def test_an_exiting_engine_fails_at_once_not_at_the_timeout(
    procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    spec = llama_spec(free_port(), model=str(tmp_path / "nope.gguf"))
    log = tmp_path / "log"
    proc = launch(spec.argv, log)
    procs.append(proc)
    t0 = time.monotonic()
    with pytest.raises(EngineExitedError) as caught:
        wait_ready(spec, timeout=300, process_alive=lambda: proc.poll() is None, log_tail=lambda: tail_lines(log, 20))
    assert time.monotonic() - t0 < 10
    assert any("nope.gguf" in line for line in caught.value.log_tail)


@pytest.mark.engine
def test_a_wrong_served_name_times_out_naming_what_is_served(
    procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    port = free_port()
    proc = launch(llama_spec(port, "actual-name").argv, tmp_path / "log")
    procs.append(proc)
    with pytest.raises(EngineNotReadyError) as caught:
        wait_ready(llama_spec(port, "expected-name"), timeout=10, process_alive=lambda: proc.poll() is None)
    assert "expected-name" in caught.value.reason and "actual-name" in caught.value.reason


def test_a_port_that_is_no_engine_times_out_with_what_it_answered(
    procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    port = free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs.append(web)
    while port_is_free(port):
        time.sleep(0.05)
    t0 = time.monotonic()
    with pytest.raises(EngineNotReadyError) as caught:
        wait_ready(not_launched(port), timeout=1.0, process_alive=lambda: True)
    assert 1.0 <= time.monotonic() - t0 < 4
    assert "not ready after 1 s" in caught.value.reason and "404" in caught.value.reason


def test_nothing_listening_times_out_as_connection_refused() -> None:
    with pytest.raises(EngineNotReadyError) as caught:
        wait_ready(not_launched(free_port()), timeout=0.5)
    assert "connection refused" in caught.value.reason


def test_a_python_engines_cause_far_above_the_end_of_its_log_is_quoted(
    procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """vLLM's CPU build, refusing a block size (its real log, tests/fixtures/engine_logs): the
    worker's ValueError sits 160 lines above the wrappers that end the log. The supervisor hands
    over FAILURE_TAIL_LINES; the failure quotes the ValueError and shows the last 40 lines."""
    from hostagent.runtime.supervisor import FAILURE_TAIL_LINES

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "engine_logs" / "vllm_cpu_block_size.log"
    log = tmp_path / "log"
    proc = launch([sys.executable, "-c", f"print(open({str(fixture)!r}).read()); raise SystemExit(1)"], log)
    procs.append(proc)
    with pytest.raises(EngineExitedError) as caught:
        wait_ready(
            not_launched(free_port()),
            timeout=60,
            process_alive=lambda: proc.poll() is None,
            log_tail=lambda: tail_lines(log, FAILURE_TAIL_LINES),
        )
    assert "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])" in str(caught.value)
    shown = caught.value.log_tail
    assert len(shown) == 40 and any("Engine core initialization failed" in line for line in shown)
    assert not any("ValueError: No common block size" in line for line in shown)  # far above: read, not shown
