"""The agent's operations end in one place: whatever its handler does (returns, refuses, stops for a
cancel, raises), the runner sends the panel exactly one `finish`, with the messages the panel's
pages show. The panel is replayed at the HTTP edge (httpx.MockTransport) with the orders a panel
answers `begin` with; the agent's own parts (HttpPanel, runner, supervisor) are real."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from hostagent.context import AgentContext
from hostagent.operations.runner import run_operation
from hostagent.panel import HttpPanel
from hostagent.runtime.supervisor import Supervisor
from serving.engines.base import ModelRef
from serving.launch import RevisionSpec
from serving.wire import HostBrief, Order, RevisionLaunch

OP = "5b0c2c7e-0000-4000-8000-000000000001"


class RecordedPanel:
    """The panel's agent API as it answered: `begin` with `order`, progress with `cancelled`;
    every request the agent sends is kept."""

    def __init__(self, order: dict[str, Any], *, cancelled: bool = False) -> None:
        self.order, self.cancelled = order, cancelled
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/agent/v1/")
        body = json.loads(request.content) if request.content else {}
        self.sent.append((path, body))
        if path.endswith("/begin"):
            return httpx.Response(200, json={"begun": True, "order": self.order})
        if path.endswith("/progress"):
            return httpx.Response(200, json={"cancelled": self.cancelled})
        if path.endswith("/finish"):
            return httpx.Response(200, json={"recorded": True})
        return httpx.Response(200, json={"ok": True})

    def finishes(self) -> list[dict[str, Any]]:
        return [body for path, body in self.sent if path == f"operations/{OP}/finish"]


def _run(tmp_path: Path, panel: RecordedPanel) -> dict[str, Any]:
    """Run operation OP on a fresh agent against `panel`; its one finish body."""
    port = HttpPanel(
        "http://panel.test", "cph_test", outbox_dir=tmp_path / "outbox", transport=httpx.MockTransport(panel)
    )
    ctx = AgentContext(host="alpha", panel=port, supervisor=Supervisor(tmp_path / "host"))
    run_operation(ctx, OP)
    finishes = panel.finishes()
    assert len(finishes) == 1, finishes
    return finishes[0]


def _launch(number: int, **changes: Any) -> RevisionLaunch:
    spec = RevisionSpec(
        engine="llama.cpp",
        version="",
        model=ModelRef(name="gemma", gguf_file="/srv/models/gemma.gguf", format="gguf"),
        knobs={"ctx_size": 1024},
        served_name=f"gemma-r{number}",
        port=18080 + number,
        api_key_secret="engine-key",
    )
    return dataclasses.replace(RevisionLaunch(id=100 + number, number=number, spec=spec), **changes)


def _order(kind: str, **changes: Any) -> dict[str, Any]:
    return dataclasses.replace(
        Order(id=OP, kind=kind, host=HostBrief(name="alpha", cpu_only=True)), **changes
    ).to_dict()


def test_an_order_from_a_panel_before_the_serving_spec_ends_failed_naming_the_field(tmp_path: Path) -> None:
    old = _order("switch")
    old["revision"] = {"id": 101, "number": 1, "label": "r1", "engine": "llama.cpp", "config": {"port": 8001}}
    panel = RecordedPanel(old)
    end = _run(tmp_path, panel)
    assert end["state"] == "failed"
    assert "order.revision.spec" in end["error"] and "serving spec" in end["error"]
    assert [path for path, _ in panel.sent] == [f"operations/{OP}/begin", f"operations/{OP}/finish"]


def test_a_kind_this_agent_does_not_know_ends_failed_saying_so(tmp_path: Path) -> None:
    end = _run(tmp_path, RecordedPanel(_order("defragment")))
    assert end == {"state": "failed", "result": {}, "error": "This agent does not know 'defragment' operations."}


def test_a_switch_to_a_launch_the_panel_could_not_complete_is_refused_with_the_engine_untouched(
    tmp_path: Path,
) -> None:
    broken = _launch(2, error="the secret engine-key is not set on this host")
    end = _run(tmp_path, RecordedPanel(_order("switch", revision=broken, previous=_launch(1))))
    assert end["state"] == "failed"
    assert end["error"] == (
        "r2 was refused on the host (the secret engine-key is not set on this host); the engine was not touched."
    )
    assert end["result"] == {
        "revision": 2,
        "reason": "the secret engine-key is not set on this host",
        "refused": True,
        "rolled_back": False,
    }


def test_a_switch_cancelled_before_it_starts_ends_cancelled_once(tmp_path: Path) -> None:
    panel = RecordedPanel(_order("switch", revision=_launch(2)), cancelled=True)
    end = _run(tmp_path, panel)
    assert end == {"state": "cancelled", "result": {}, "error": "Cancelled before the engine was touched."}


def test_a_benchmark_of_a_revision_the_host_does_not_serve_is_refused(tmp_path: Path) -> None:
    order = _order("benchmark", revision=_launch(3), params={"profile": {"name": "quick"}})
    end = _run(tmp_path, RecordedPanel(order))
    assert end["state"] == "failed" and end["error"] == "alpha is not serving r3 (engine: stopped)."


def test_a_delete_of_a_relative_path_is_refused(tmp_path: Path) -> None:
    end = _run(tmp_path, RecordedPanel(_order("model_delete", params={"path": "models/gemma.gguf"})))
    assert end["state"] == "failed" and end["error"] == "The order names no absolute path to delete."


def test_a_handler_that_raises_ends_failed_with_its_traceback(tmp_path: Path) -> None:
    """An install of an engine no adapter knows raises in the handler."""
    end = _run(tmp_path, RecordedPanel(_order("install", params={"engine": "no-such-engine", "version": "1"})))
    assert end["state"] == "failed" and end["error"].startswith("EngineConfigError: ")
    assert "Traceback" in end["result"]["traceback"]


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"repo_id": "../etc", "revision": "0" * 40, "files": [{"name": "a", "size": 1}]}, "not owner/name"),
        ({"repo_id": "google/gemma", "revision": "0" * 40, "files": []}, "the order names no files to download"),
    ],
)
def test_a_download_the_host_refuses_ends_failed_before_a_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, params: dict[str, Any], said: str
) -> None:
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(tmp_path / "models"))
    end = _run(tmp_path, RecordedPanel(_order("download", params=params)))
    assert end["state"] == "failed" and end["error"].startswith("This host refuses the download: ")
    assert said in end["error"]


@pytest.mark.engine
def test_a_switch_to_a_base_model_recorded_for_chat_fails_its_gate_and_rolls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The package's Gemma 3 270M is a base model. Recorded as a chat model (r2), its test chat is the
    question written back: the switch fails with that reason and the previous revision, the same GGUF
    served for completions as it is (r1), comes back and passes its test completion."""
    from serving.purpose import CHAT
    from tests.support.llama import free_port, gemma_launch, gemma_model_path, llama_server_binary

    monkeypatch.setenv("PATH", f"{Path(llama_server_binary()).parent}:{os.environ['PATH']}")
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", str(Path(gemma_model_path()).parent))
    port = free_port()
    base = RevisionLaunch.from_dict(gemma_launch(1, ctx=1024, port=port))
    chat = RevisionLaunch.from_dict(gemma_launch(2, ctx=1024, port=port, purpose=CHAT))
    try:
        end = _run(tmp_path, RecordedPanel(_order("switch", revision=chat, previous=base)))
        status = Supervisor(tmp_path / "host").status(probe=True)
    finally:
        Supervisor(tmp_path / "host").stop(grace=2.0)

    assert end["state"] == "failed" and end["result"]["rolled_back"] is True, end
    reason = end["result"]["reason"]
    assert reason.startswith("the test chat was answered with the question itself ('Say hello in one word.")
    assert "as a base model (not instruction-tuned) does" in reason
    assert end["error"] == f"r2 failed ({reason}); rolled back to r1, which is serving again."
    assert status.running and status.revision_label == "r1"
