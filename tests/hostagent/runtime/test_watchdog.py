"""The watchdog against the real llama-server: killed engines come back at the next check, up
to a budget; a live engine that does not answer gets the failure threshold first; nothing
happens while a pause is in force. Small intervals, real time."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hostagent.context import AgentContext
from hostagent.launch import launch_spec
from hostagent.loops import agent_watchdog
from hostagent.runtime.processes import is_alive
from hostagent.runtime.strays import port_is_free
from hostagent.runtime.supervisor import Supervisor
from hostagent.runtime.watchdog import Watchdog, WatchdogEvent
from serving.agent_reports import WatchdogEvent as AgentWatchdogEvent
from serving.wire import RevisionLaunch
from tests.hostagent.runtime.test_supervisor import llama_spec
from tests.support.llama import free_port, gemma_launch, gemma_model_path

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path / "state", stop_grace=5.0)
    yield supervisor
    supervisor.stop(grace=2.0)


class Events:
    def __init__(self) -> None:
        self.items: list[WatchdogEvent] = []
        self.lock = threading.Lock()

    def __call__(self, event: WatchdogEvent) -> None:
        with self.lock:
            self.items.append(event)

    def kinds(self) -> list[str]:
        with self.lock:
            return [e.kind for e in self.items]

    def wait_for(self, predicate: Callable[[list[WatchdogEvent]], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(list(self.items)):
                    return
            time.sleep(0.05)
        raise AssertionError(f"timed out; events: {self.kinds()}")


def kill(pid: int) -> None:
    """SIGKILL and wait until the kernel has really torn the process down."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not is_alive(pid)


def freeze(pid: int) -> None:
    """SIGSTOP `pid` and return once every thread of it has stopped: the kernel stops each
    thread as it is next scheduled, which on a loaded machine is not at once."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while any(state != "T" for state in thread_states(pid)):
        assert time.monotonic() < deadline, f"pid {pid} never stopped: {thread_states(pid)}"
        time.sleep(0.01)


def thread_states(pid: int) -> list[str]:
    """Each thread's state letter from /proc/<pid>/task/<tid>/stat (gone threads left out)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append(task.joinpath("stat").read_text().rpartition(")")[2].split()[0])
        except OSError:
            continue
    return states


def count(kind: str) -> Callable[[list[WatchdogEvent]], int]:
    return lambda events: sum(e.kind == kind for e in events)


@pytest.mark.engine
def test_watchdog_restarts_a_killed_engine_then_gives_up(sup: Supervisor) -> None:
    spec = llama_spec(free_port())
    first = sup.start(spec, revision_label="r3", verify=False)
    events = Events()
    dog = Watchdog(
        sup,
        lambda _revision_id: spec,
        interval=0.2,
        timeout=1.0,
        failure_threshold=10,
        max_restarts=2,
        window=60.0,
        ready_timeout=60.0,
        on_event=events,
    )
    dog.start()
    try:
        events.wait_for(lambda e: count("ok")(e) >= 1)
        pids = [first.pid]
        for n in (1, 2):
            kill(pids[-1])
            events.wait_for(lambda e, n=n: count("restarted")(e) >= n)
            status = sup.status()
            assert status.running and status.pid not in pids and status.revision_label == "r3"
            assert httpx.get(spec.health_url).status_code == 200
            pids.append(status.pid)

        kill(pids[-1])
        events.wait_for(lambda e: count("gave_up")(e) == 1 and count("halted")(e) >= 2)
    finally:
        dog.stop(timeout=30)

    gave_up = next(e for e in events.items if e.kind == "gave_up")
    assert "2 restarts in the last 60 s" in gave_up.message and "r3" in gave_up.message
    assert gave_up.needs_attention
    assert count("restarted")(events.items) == 2  # no third restart
    assert not sup.status().running and not any(is_alive(p) for p in pids)
    # a gone process is restarted at the check that finds it gone, not after 10 failures
    assert "failure" not in events.kinds()
    restarted = [e for e in events.items if e.kind == "restarted"]
    assert all("at once" in e.message and "killed by SIGKILL" in e.message for e in restarted)
    assert f"(pid {pids[0]}) is gone" in restarted[0].message
    assert dog.gave_up  # persisted in the state folder, for a restarted worker to see
    assert Watchdog(sup, lambda _revision_id: spec).tick().kind == "halted"


@pytest.mark.engine
def test_watchdog_does_nothing_while_paused_from_another_process(sup: Supervisor, tmp_path: Path) -> None:
    spec = llama_spec(free_port())
    first = sup.start(spec, revision_label="r5", verify=False)
    dog = Watchdog(
        sup, lambda _revision_id: spec, interval=0.2, timeout=1.0, failure_threshold=10, max_restarts=2, window=60
    )

    # Another process (e.g. the worker running a model load) pauses the watchdog.
    pause = (
        "import sys; from hostagent.runtime.supervisor import Supervisor; "
        "Supervisor(sys.argv[1]).pause_watchdog('loading a model')"
    )
    subprocess.run([sys.executable, "-c", pause, str(tmp_path / "state")], check=True, cwd=REPO)
    kill(first.pid)
    for _ in range(5):
        event = dog.tick()
        assert event.kind == "paused" and "loading a model" in event.message
        time.sleep(0.1)
    assert not sup.status().running and sup.status().phase == "dead"

    sup.resume_watchdog()
    restarted = dog.tick()  # the first check after the pause: the engine is gone, so at once
    assert restarted.kind == "restarted", restarted.message
    assert sup.status().running and sup.status().pid != first.pid


def test_a_pause_held_by_a_crashed_switch_does_not_pause_forever(tmp_path: Path) -> None:
    state = tmp_path / "state"
    code = (
        "import os, signal, sys\n"
        "from hostagent.runtime.supervisor import Supervisor\n"
        "with Supervisor(sys.argv[1]).watchdog_paused('switching to r9'):\n"
        "    print('paused', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    crashed = subprocess.run([sys.executable, "-c", code, str(state)], capture_output=True, text=True, cwd=REPO)
    assert crashed.stdout.strip() == "paused" and crashed.returncode == -signal.SIGKILL
    sup = Supervisor(state)
    assert list((state / "pauses").glob("*.json"))  # the crashed switch left its pause file
    assert sup.watchdog_pauses() == []  # but its holder is dead, so it no longer counts
    assert Watchdog(sup, lambda _revision_id: None).tick().kind == "idle"
    sup.pause_watchdog("maintenance")  # an operator's pause has no holder: it stays
    assert [p["reason"] for p in sup.watchdog_pauses()] == ["maintenance"]
    sup.resume_watchdog()
    assert sup.watchdog_pauses() == []


def test_a_deliberate_stop_is_not_undone(tmp_path: Path) -> None:
    sup = Supervisor(tmp_path / "state")
    dog = Watchdog(sup, lambda _revision_id: None, interval=0.05, failure_threshold=1)
    assert [dog.tick().kind for _ in range(3)] == ["idle", "idle", "idle"]


@pytest.mark.engine
def test_failed_restarts_count_against_the_budget_and_name_the_reason(sup: Supervisor, tmp_path: Path) -> None:
    port = free_port()
    first = sup.start(llama_spec(port), revision_label="r8", verify=False)
    # The model file disappeared since: every restart attempt exits at once.
    broken = llama_spec(port, model=str(tmp_path / "deleted-model.gguf"))
    dog = Watchdog(
        sup, lambda _revision_id: broken, interval=0.1, timeout=1.0, failure_threshold=1, max_restarts=2, window=60
    )
    kill(first.pid)

    kinds = [dog.tick() for _ in range(4)]

    assert [e.kind for e in kinds] == ["restart_failed", "restart_failed", "gave_up", "halted"]
    assert "exited" in kinds[0].message and "model loading error" in kinds[0].message
    assert any("deleted-model.gguf" in line for line in kinds[0].log_tail)
    assert "2 restarts" in kinds[2].message and "restart failed" in kinds[2].message
    assert sup.status().phase == "stopped" and port_is_free(port)
    sup.stop()  # a user's stop, then a new start: the watchdog gets a fresh budget
    sup.start(llama_spec(port), revision_label="r9", verify=False)
    assert dog.tick().kind == "ok"


@pytest.mark.engine
def test_a_frozen_engine_still_gets_the_failure_threshold(tmp_path: Path) -> None:
    """Alive but not answering (SIGSTOPped: a hung engine) is not gone: it is restarted only
    after `failure_threshold` failed checks in a row, and that restart counts as one."""
    sup = Supervisor(tmp_path / "state", stop_grace=0.5)  # a stopped process ignores SIGTERM
    spec = llama_spec(free_port())
    first = sup.start(spec, revision_label="r4", verify=False)
    events = Events()
    dog = Watchdog(
        sup, lambda _revision_id: spec, timeout=0.3, failure_threshold=3, max_restarts=2, window=60, on_event=events
    )
    try:
        assert dog.tick().kind == "ok"
        freeze(first.pid)
        frozen = [dog.tick() for _ in range(2)]
        assert [e.kind for e in frozen] == ["failure", "failure"], [e.message for e in frozen]
        assert sup.status().pid == first.pid and is_alive(first.pid)  # left alone meanwhile
        restarted = dog.tick()
        assert restarted.kind == "restarted", restarted.message
        assert "after: no answer within 0.3 s" in restarted.message and "gone" not in restarted.message
        assert restarted.restarts_in_window == 1
        assert not is_alive(first.pid) and sup.status().running and sup.status().pid != first.pid
        assert httpx.get(spec.health_url).status_code == 200
        failures = [e.message for e in events.items if e.kind == "failure"]
        assert [m.rsplit(" ", 1)[-1] for m in failures] == ["(1/3)", "(2/3)"]
    finally:
        sup.stop(grace=2.0)


@pytest.mark.engine
def test_a_persons_start_gets_a_fresh_restart_budget(sup: Supervisor) -> None:
    """Crashes of an earlier engine spent the budget; a person then switches: the engine they
    started is watched with the whole budget (its first crash is restarted, not given up on),
    and a start after a give-up is watched again too."""
    from hostagent.operations.switch import _start as switch_start  # what the agent's switch calls
    from serving.engines.base import ModelRef
    from serving.launch import RevisionSpec
    from serving.wire import RevisionLaunch

    spec = llama_spec(free_port())

    def switch(number: int) -> int:
        launch = RevisionLaunch(id=number, number=number, spec=RevisionSpec("llama.cpp", "", ModelRef("gemma")))
        return int(switch_start(sup, launch, lambda *_: None, spec)["pid"])

    first = switch(3)
    dog = Watchdog(sup, lambda _revision_id: spec, timeout=1.0, failure_threshold=10, max_restarts=1, window=3600)
    kill(first)
    spent = dog.tick()
    assert spent.kind == "restarted" and spent.restarts_in_window == 1  # the budget (1) is spent

    second = switch(4)  # a person's switch
    kill(second)
    again = dog.tick()
    assert again.kind == "restarted", again.message  # not "gave up": a fresh budget
    assert again.revision_label == "r4" and sup.status().running and sup.status().pid != second
    assert httpx.get(spec.health_url).status_code == 200

    kill(sup.status().pid)  # its own budget spent now: the watchdog gives up on it
    assert dog.tick().kind == "gave_up" and dog.gave_up and not sup.status().running

    third = switch(5)  # a person starts again after the give-up
    assert not dog.gave_up and dog.tick().kind == "ok"
    kill(third)
    back = dog.tick()
    assert back.kind == "restarted" and back.revision_label == "r5", back.message


class AgentPanel:
    """The panel as the agent's watchdog meets it: the launches of this host's revisions by id
    (what GET /agent/v1/launches/<id> answers) and the watchdog events the agent reports."""

    def __init__(self, *launches: RevisionLaunch) -> None:
        self.launches = {str(launch.id): launch for launch in launches}
        self.asked: list[str] = []
        self.events: list[AgentWatchdogEvent] = []

    def launch(self, revision_id: str) -> RevisionLaunch | None:
        self.asked.append(revision_id)
        return self.launches.get(revision_id)

    def event(self, event: AgentWatchdogEvent) -> None:
        self.events.append(event)


@pytest.mark.engine
def test_the_agents_watchdog_starts_the_revision_again_once_a_failed_restarts_cause_is_gone(
    sup: Supervisor, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """A killed engine's restart fails (its port is held by another process): the supervisor
    forgets the failed start, so only the watchdog's retry still knows the revision. Once the
    port is free, the next check starts that revision again, under its id, and it serves; it used
    to answer "no launch spec" (no record, no revision id) until the watchdog gave up."""
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(Path(gemma_model_path()).parent))
    settings.WATCHDOG_FAILURES = 1  # the agent's setting: act at the first bad check
    key = "engine-key-watchdog-Rt52"
    r3 = RevisionLaunch.from_dict(gemma_launch(3, ctx=1024, port=free_port(), api_key=key))
    panel = AgentPanel(r3)
    ctx = AgentContext(host="alpha", panel=panel, supervisor=sup)  # type: ignore[arg-type]
    spec = launch_spec(r3)
    first = sup.start(spec, revision_label="r3", revision_id="103", verify=False)
    dog = agent_watchdog(ctx)  # what the agent runs, its spec provider included
    assert dog.tick().kind == "ok"

    kill(first.pid)
    with socket.socket() as squatter:  # another process takes the port meanwhile
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 10  # the kernel lets go of the killed engine's socket
        while True:
            try:
                squatter.bind(("127.0.0.1", spec.port))
                break
            except OSError:
                assert time.monotonic() < deadline, f"port {spec.port} still held after the engine was killed"
                time.sleep(0.05)
        squatter.listen()
        failed = dog.tick()
        assert failed.kind == "restart_failed", failed.message
        assert f"port {spec.port} is held by pid {os.getpid()}" in failed.message
        assert sup.status().phase == "stopped"  # the failed start left no engine record
    retry = json.loads(sup.state.watchdog_file.read_text())["retry"]
    assert retry["revision_label"] == "r3" and retry["revision_id"] == "103"

    back = dog.tick()  # the port is free again
    assert back.kind == "restarted", back.message
    assert back.revision_label == "r3" and back.restarts_in_window == 2
    status = sup.status()
    assert status.running and status.revision_id == "103" and status.revision_label == "r3"
    models = httpx.get(spec.models_url, headers={"Authorization": f"Bearer {key}"}, timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["gemma-r3"]
    assert dog.tick().kind == "ok"  # probed with r3's key, found by its id
    assert json.loads(sup.state.watchdog_file.read_text())["retry"] is None
    assert [e.kind for e in panel.events] == ["restart_failed", "restarted"]


def test_a_retry_written_before_the_revision_id_was_kept_is_still_read(tmp_path: Path) -> None:
    """watchdog.json from an agent before this one: its retry names the label only. The watchdog
    reads it, asks for the spec of an unknown revision (None) and says it cannot restart."""
    sup = Supervisor(tmp_path / "state")
    old = {"restarts": [], "gave_up": None, "retry": {"reason": "restart failed: port busy", "revision_label": "r3"}}
    sup.state.watchdog_file.write_text(json.dumps(old))
    asked: list[str | None] = []

    def provider(revision_id: str | None) -> None:
        asked.append(revision_id)

    event = Watchdog(sup, provider, failure_threshold=1).tick()
    assert event.kind == "restart_failed" and event.message == "cannot restart revision r3: no launch spec"
    assert asked == [None]
    retry = json.loads(sup.state.watchdog_file.read_text())["retry"]
    assert retry == {"reason": "no launch spec to restart with", "revision_label": "r3", "revision_id": None}
