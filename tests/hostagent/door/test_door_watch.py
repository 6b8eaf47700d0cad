"""The agent's front door watched as a client sees it: when its own /health stops answering (its
event loop held up here, as a blocking call in it would), the agent reports the door down with
what a client got, and back up at its first answer after that. A real door on a real port; the
panel's side records what the agent sends."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from hostagent.context import AgentContext
from hostagent.door import service as door_service
from hostagent.door.service import FrontDoorService
from hostagent.frontdoor import FrontDoorSettings
from hostagent.runtime.supervisor import Supervisor
from serving.host_events import HostEventReport


class Panel:
    """What the agent sends (host events, door reports); it has no serving set to give."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def serving(self, version: str | None) -> None:
        return None

    def serving_report(self, body: dict[str, Any]) -> None:
        pass

    def host_event(self, report: HostEventReport) -> None:
        self.events.append(report.to_dict())


def _wait(check: Any, timeout: float, what: str) -> Any:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError(f"no {what} in {timeout} s")


def _started(panel: Panel, state: Path) -> FrontDoorService:
    """A real door on a free port, following `panel` every 0.1 s, its state in `state`."""
    ctx = AgentContext(host="alpha", panel=panel, supervisor=Supervisor(state / "host"))  # type: ignore[arg-type]
    settings = FrontDoorSettings(host="127.0.0.1", port=0, queue_wait_s=5, drain_timeout_s=5)
    service = FrontDoorService(ctx, settings, gpus=False, state=state, interval=0.1, ready_timeout=5)
    service.start()
    return service


def test_a_door_that_stops_answering_is_reported_down_and_then_up(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(door_service, "HEALTH_TIMEOUT_S", 0.5)
    panel = Panel()
    service = _started(panel, tmp_path)
    try:
        time.sleep(0.5)
        assert panel.events == []  # it answers: nothing to say
        service.loop.call_soon_threadsafe(time.sleep, 3.0)  # the door's loop held up: no answer for 3 s
        [down] = _wait(lambda: list(panel.events), 5, "door-down report")
        assert down["kind"] == "door.down"
        assert f"The front door on {service.bind} does not answer its /health: ReadTimeout" in down["reason"]
        events = _wait(lambda: panel.events[1:] and list(panel.events), 10, "door-up report")
        assert [e["kind"] for e in events] == ["door.down", "door.up"]
        assert events[1]["reason"].startswith(f"It answers on {service.bind} again. It was down:")
        time.sleep(0.5)
        assert len(panel.events) == 2  # one report per change, not one per look
    finally:
        service.close(timeout=10)
    assert [e["kind"] for e in panel.events] == ["door.down", "door.up"]  # closing is not the door going down


def test_a_door_reported_down_by_the_previous_run_is_reported_up_when_it_answers(tmp_path: Path) -> None:
    """The usual fix of a door that could not listen is a free port and an agent restart: the
    new run's door answers, and that is the door coming back up (door.up, naming what was wrong),
    though the run that reported it down is gone."""
    door_service.note_door_down(tmp_path, "The front door did not start: it cannot listen on 127.0.0.1:4000")
    panel = Panel()
    service = _started(panel, tmp_path)
    try:
        [up] = _wait(lambda: list(panel.events), 5, "door-up report")
        assert up["kind"] == "door.up" and "cannot listen on 127.0.0.1:4000" in up["reason"]
        time.sleep(0.5)
        assert len(panel.events) == 1  # said once
    finally:
        service.close(timeout=10)
    assert not (tmp_path / door_service.DOWN_FILE).exists()


def test_a_proxy_in_the_agents_environment_does_not_make_its_door_look_down(tmp_path: Path, monkeypatch: Any) -> None:
    """An agent started with HTTP_PROXY set (for the model hub) and no NO_PROXY: its look at its own
    door's /health goes to the door, not to the proxy (here a closed port, as an unreachable
    proxy is), so a door that answers is never reported down."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"  # nothing listens there once it closes
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.setattr(door_service, "HEALTH_TIMEOUT_S", 0.5)
    panel = Panel()
    service = _started(panel, tmp_path)
    try:
        time.sleep(1.0)  # about ten looks
        assert panel.events == []
        assert service.down is None
    finally:
        service.close(timeout=10)
    assert not (tmp_path / door_service.DOWN_FILE).exists()
