"""No `<defunct>` llama-server under the agent: an engine the supervisor started is reaped the
moment it exits, whether it crashes while nobody looks at it or is stopped (a switch stops the
old engine the same way). The real supervisor and the real llama-server, in this process (which
plays the agent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostagent.runtime.processes import PROC, exit_status, read_stat, reap, register_child
from hostagent.runtime.supervisor import Supervisor
from tests.hostagent.runtime.test_supervisor import llama_spec
from tests.support.llama import free_port


def defunct_children() -> list[str]:
    """This process's children that exited and were not reaped, as ps shows them."""
    found = []
    for entry in PROC.iterdir():
        stat = read_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None and stat.ppid == os.getpid() and stat.state == "Z":
            found.append(f"{stat.pid} {stat.comm} <defunct>")
    return found


def gone(pid: int, timeout: float = 5.0) -> bool:
    """The pid has left /proc altogether: exited and reaped (a zombie keeps its entry)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (PROC / str(pid)).exists():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path / "state", stop_grace=5.0)
    yield supervisor
    supervisor.stop(grace=2.0)


@pytest.mark.engine
def test_engines_that_crash_or_are_stopped_leave_no_zombie(sup: Supervisor) -> None:
    port = free_port()
    crashed = sup.start(llama_spec(port), revision_label="r1", verify=False).pid
    os.kill(crashed, signal.SIGKILL)  # a crash; the agent does not look at its engine meanwhile
    assert gone(crashed), defunct_children()
    assert not [z for z in defunct_children() if "llama-server" in z]

    stopped = sup.start(llama_spec(port), revision_label="r2", verify=False).pid
    sup.stop(grace=5.0)
    assert gone(stopped)
    assert not [z for z in defunct_children() if "llama-server" in z]


def test_how_an_engine_ended_is_known_after_it_was_reaped() -> None:
    """What the watchdog tells the panel about a gone engine: its exit code, or the signal that
    killed it (an OOM kill is a SIGKILL), still known once the process was reaped."""
    crashed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    for proc in (crashed, killed):
        register_child(proc)
    assert exit_status(killed.pid) is None  # still running
    os.kill(killed.pid, signal.SIGKILL)
    assert gone(crashed.pid) and gone(killed.pid)
    for proc, said in ((crashed, "exit code 3"), (killed, "killed by SIGKILL")):
        assert exit_status(proc.pid) == said
        reap(proc.pid)
        assert exit_status(proc.pid) == said
    assert exit_status(os.getppid()) is None  # not our child: unknown, not guessed
