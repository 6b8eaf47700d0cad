"""No `<defunct>` llama-server under the agent: an engine the supervisor started is reaped the
moment it exits, whether it crashes while nobody looks at it or is stopped (a switch stops the
old engine the same way). The real supervisor and the real llama-server, in this process (which
plays the agent)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostagent.runtime.processes import PROC, read_stat
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
