"""An install interrupted by an agent restart ends honestly: the step the dead agent left running
(a compile in its own session, which outlives the agent) is stopped by the next agent as it
starts, and the panel marks the operation lost, saying what became of its work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deployments.choices import OperationState
from deployments.models import Operation
from deployments.services.host_reports import LOST_IN_A_RESTART, host_register
from hardware.models import Host
from hostagent.runtime.installs import stop_leftover_steps
from hostagent.runtime.processes import is_alive, read_stat

ROOT = Path(__file__).resolve().parents[3]
AGENT = """
import sys
from hostagent.runtime.installs import run_install
from serving.engines.base import InstallStep
step = InstallStep(("sh", "-c", "echo compiling; sleep 300"), "build llama-server")
run_install([step], log_path=sys.argv[1], running_dir=sys.argv[2])
"""


def wait_for(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_build_left_running_by_a_killed_agent_is_stopped_by_the_next_one(tmp_path: Path) -> None:
    log, running = tmp_path / "install.log", tmp_path / "running"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(log), str(running)], cwd=ROOT)
    try:
        wait_for(lambda: log.exists() and "compiling" in log.read_text() and any(running.glob("*.json")))
        note = next(running.glob("*.json"))
        pid = json.loads(note.read_text())["pid"]
        os.kill(agent.pid, signal.SIGKILL)  # the agent dies in the middle of the install
        agent.wait(10)
        stat = read_stat(pid)
        assert stat is not None and is_alive(pid) and stat.pgid == pid  # its build goes on without it
        members = [
            p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if (s := read_stat(p)) and s.pgid == pid
        ]
        assert len(members) == 2  # sh and its sleep: the whole group is the build

        assert stop_leftover_steps(running, grace=2.0) == [f"pid {pid} (build llama-server)"]
        assert not any(is_alive(p) for p in members) and not list(running.glob("*.json"))
        assert stop_leftover_steps(running) == []  # nothing twice
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_a_note_of_a_step_that_already_ended_stops_nothing(tmp_path: Path) -> None:
    running = tmp_path / "running"
    running.mkdir()
    me = read_stat(os.getpid())
    assert me is not None
    # This very process under another start time: a pid the kernel gave to someone else since.
    (running / "1.json").write_text(json.dumps({"pid": os.getpid(), "start_ticks": me.start_ticks + 1, "step": "x"}))
    (running / "2.json").write_text("{torn")
    assert stop_leftover_steps(running) == [] and not list(running.glob("*.json"))


@pytest.mark.django_db
def test_the_panel_marks_an_interrupted_install_and_download_lost_with_what_became_of_them() -> None:
    host = Host.objects.create(name="box")
    install = Operation.objects.create(kind="install", host=host, state="running", params={"engine": "llama.cpp"})
    download = Operation.objects.create(kind="download", host=host, state="running", exclusive=False)
    probe = Operation.objects.create(kind="probe", host=host, state="running", exclusive=False)
    answer = host_register(host=host, facts={}, inventory={}, engine_state={"running": False})
    assert sorted(answer.lost) == sorted(str(op.pk) for op in (install, download, probe))
    install.refresh_from_db()
    download.refresh_from_db()
    probe.refresh_from_db()
    assert install.state == download.state == probe.state == OperationState.LOST
    assert install.error == LOST_IN_A_RESTART["install"] and "stopped the build" in install.error
    assert download.error == LOST_IN_A_RESTART["download"] and "resumes" in download.error
    assert probe.error == "the host's worker stopped in the middle of this operation (it restarted since)"
    assert install.finished_at is not None
