"""An install that is building when its host's agent is killed: the real agent runs a llama.cpp
source build (real CMake, a source folder whose configure takes minutes), is SIGKILLed in the
middle, and starts again. The build does not go on with nobody to read it: the new agent stops
it before it registers, and the operation ends `lost`, saying what became of the install."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from deployments.choices import OperationState
from deployments.services.host_reports import LOST_IN_A_RESTART
from deployments.services.installs import install_request
from hostagent.runtime.processes import PROC, read_cmdline

SLOW_CONFIGURE = """cmake_minimum_required(VERSION 3.19)
project(slow NONE)
message(STATUS "configuring the slow project")
execute_process(COMMAND sleep 300)
"""


def building(source: Path) -> list[int]:
    """The processes of a build of `source` (CMake and the sleep it runs)."""
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            argv = read_cmdline(int(entry.name))
            if argv[:1] == ["cmake"] and str(source) in argv:
                found.append(int(entry.name))
    return found


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_build_interrupted_by_an_agent_restart_is_stopped_and_its_operation_lost(
    lab: dict[str, Any], admin_user: Any
) -> None:
    source = Path(lab["tmp"]) / "wheelhouse" / "llama.cpp"  # inside the folder the agent allows
    source.mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(SLOW_CONFIGURE)
    op = install_request(host=lab["host"], engine="llama.cpp", version="", source_dir=str(source), actor=admin_user)
    running = Path(lab["tmp"]) / "state" / "installs" / "running"
    deadline = time.monotonic() + 60
    # Until CMake is in its sleep: its first line has reached the operation's log (killed before
    # that line, the agent's end of the pipe is gone and CMake dies of SIGPIPE when it prints it).
    while not (building(source) and list(running.glob("*.json")) and "configuring the slow project" in op.log):
        assert time.monotonic() < deadline, lab["agent"].log_tail()
        time.sleep(0.2)
        op.refresh_from_db()
    assert op.state == OperationState.RUNNING

    lab["agent"].kill()  # SIGKILL: no chance to clean up
    time.sleep(0.5)
    assert building(source), "the build outlives the agent (its own session)"
    lab["agent"].start()
    deadline = time.monotonic() + 90
    while op.state == OperationState.RUNNING:  # until the new agent registers
        assert time.monotonic() < deadline, lab["agent"].log_tail()
        time.sleep(0.2)
        op.refresh_from_db()
    assert op.state == OperationState.LOST and op.error == LOST_IN_A_RESTART["install"]
    assert not building(source) and not list(running.glob("*.json"))
    # The panel marks the operation lost while answering the new agent's register; the agent prints
    # its banner (what it stopped) just after that answer: wait for the line, not for the state.
    deadline = time.monotonic() + 30
    while "stopped what their install left running: pid" not in lab["agent"].log_tail():
        assert time.monotonic() < deadline, lab["agent"].log_tail()
        time.sleep(0.2)
