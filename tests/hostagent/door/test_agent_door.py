"""The front door as the agent runs it, with real llama-servers (Gemma 3 270M): its table fed
directly as the panel's serving answer, a real HttpPanel towards a panel that is away (reports go
to the outbox), the host's own supervisor running the pinned revision, and the agent's loader
starting on-demand revisions through the switch's path (launch, preflight, health gate) on ports
of their own. One door and one pinned engine for the module; each test adds what it needs."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from hostagent.context import AgentContext
from hostagent.door.memory import host_free_memory
from hostagent.door.service import FrontDoorService, door_settings
from hostagent.frontdoor import FrontDoorSettings
from hostagent.frontdoor.settings import SettingsError
from hostagent.launch import launch_spec
from hostagent.local import engine_state
from hostagent.loops import engine_metrics
from hostagent.panel import HttpPanel, PanelAway
from hostagent.runtime.errors import HostRuntimeError
from hostagent.runtime.supervisor import Supervisor
from hostagent.runtime.watchdog import Watchdog, WatchdogEvent
from serving.agent_reports import Heartbeat
from tests.support.llama import free_port, gemma_launch, gemma_model_path, serving_entry

pytestmark = pytest.mark.engine

ENGINE_KEY = "engine-key-door-Qx71-never-shown"
MIB = 1 << 20
PLANNED = 300 * MIB
ASK = [{"role": "user", "content": "Say hello."}]


def launch(number: int, *, ctx: int, port: int, model: str | None = None) -> dict[str, Any]:
    order = gemma_launch(number, ctx=ctx, port=port, model=model, api_key=ENGINE_KEY)
    if number == 1:  # llama-server's /metrics, which the door re-exports (r2 runs without)
        order["spec"]["knobs"]["metrics"] = True
    return order


def model(name: str, spec: dict[str, Any], mode: str, *aliases: str, memory: int = PLANNED) -> dict[str, Any]:
    return serving_entry(name, spec, mode, *aliases, memory=memory)


class World:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.r1 = launch(1, ctx=1024, port=free_port())
        self.r2 = launch(2, ctx=2048, port=free_port())
        self.host_sup = Supervisor(state / "host")
        away = free_port()  # nothing listens there: the panel is away
        self.panel = HttpPanel(f"http://127.0.0.1:{away}", "cph_test", outbox_dir=state / "outbox", timeout=2)
        self.ctx = AgentContext(host="door-host", panel=self.panel, supervisor=self.host_sup)
        self.service = self.open()

    def open(self, relaunching: str | None = None) -> FrontDoorService:
        settings = FrontDoorSettings(host="127.0.0.1", port=0, queue_wait_s=120, drain_timeout_s=60, memory_settle_s=2)
        service = FrontDoorService(
            self.ctx, settings, gpus=False, state=self.state, interval=0.3, ready_timeout=120, relaunching=relaunching
        )
        service.start()
        return service

    @property
    def url(self) -> str:
        return f"http://{self.service.bind}"

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0, timeout=120)

    def answer(self, *models: dict[str, Any], version: str) -> dict[str, Any]:
        door = {"max_waiting": 32, "max_wait_s": 120, "drain_timeout_s": 60}
        return {"version": version, "door": door, "models": list(models), "keys": {"keys": []}}

    def pinned(self) -> dict[str, Any]:
        return model("gemma-r1", self.r1, "pinned", "coder")

    def both(self, version: str) -> dict[str, Any]:
        """r1 pinned (`coder`), r2 on demand (`fast`)."""
        return self.answer(self.pinned(), model("gemma-r2", self.r2, "on-demand", "fast"), version=version)

    def state_of(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in httpx.get(f"{self.url}/frontdoor/state", timeout=10).json()["models"]}

    def ondemand(self, number: int) -> Supervisor:
        return Supervisor(self.state / "ondemand" / f"r{100 + number}")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    state = tmp_path_factory.mktemp("door-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CONTROLPANEL_MODEL_DIRS", f"{Path(gemma_model_path()).parent}:{state}")
        w = World(state)
        try:
            w.host_sup.start(launch_spec(w.r1), revision_label="r1", revision_id="101", verify=False)
            w.service.apply(w.answer(model("gemma-r1", w.r1, "pinned", "coder"), version="v1"))
            yield w
        finally:
            w.service.close()
            w.host_sup.stop(grace=5)


def test_the_pinned_revision_answers_through_the_door_from_the_hosts_own_engine(world: World) -> None:
    answer = world.client().chat.completions.create(model="coder", messages=ASK, max_tokens=3)
    assert answer.model == "gemma-r1" and answer.choices[0].message.content
    assert world.service.loader.running() == set()  # no second copy of r1
    assert not (world.state / "ondemand" / "r101").exists()
    listed = {m.id for m in world.client().models.list().data}
    assert listed == {"gemma-r1", "coder"}
    # The engine's own series on the door's /metrics, under the agent's host name.
    scraped = httpx.get(f"{world.url}/metrics", timeout=10).text
    predicted = re.search(
        r'^llamacpp:tokens_predicted_total\{host="door-host",model="gemma-r1",alias="coder"\} (\S+)$', scraped, re.M
    )
    assert predicted is not None and float(predicted.group(1)) >= 3, scraped


def test_the_heartbeat_carries_the_metrics_of_an_engine_behind_its_key(world: World) -> None:
    """r1's llama-server runs with --api-key, which guards its /metrics: the heartbeat asks with the
    engine's key, so the panel (away here: the metrics wait in the outbox) gets its counters."""
    status = world.host_sup.status()
    metrics_url = f"http://127.0.0.1:{status.port}/metrics"
    assert httpx.get(metrics_url, timeout=10).status_code == 401  # the engine's key is needed
    world.client().chat.completions.create(model="coder", messages=ASK, max_tokens=3)
    before = set(world.panel.outbox.entries())
    state = engine_state(world.host_sup)
    with pytest.raises(PanelAway):
        world.panel.heartbeat(Heartbeat(engine_state=state, engine_metrics=engine_metrics(world.ctx, state)))
    kept = [json.loads(p.read_text()) for p in set(world.panel.outbox.entries()) - before]
    # The agent's own telemetry may keep an entry beside this heartbeat's meanwhile (a loaded machine):
    # what matters is that the heartbeat's carries the engine's counters.
    samples = [s for entry in kept for s in entry["body"].get("engine_samples") or []]
    assert samples, f"the heartbeat carried none of the engine's metrics: {kept}"
    assert any(s["generation_tokens_total"] >= 3 and s["prompt_tokens_total"] > 0 for s in samples), samples
    assert all(s["requests_running"] == 0 for s in samples)
    assert ENGINE_KEY not in json.dumps(kept)


def test_a_rolled_back_switch_leaves_the_pinned_revision_reported_loaded(world: World) -> None:
    """A switch to r9 drains r1 in the door and stops it; r9 does not come up and the switch starts
    r1 again (hostagent.operations.switch's rollback). With no request coming, the door's state
    (what the agent reports, what the lab router routes by) says r1 serves again, as it does."""
    assert world.state_of()["gemma-r1"]["phase"] == "loaded"
    broken = launch(9, ctx=1024, port=world.r2["spec"]["port"], model=str(world.state / "not-there.gguf"))
    with world.ctx.switching("109"):
        assert world.state_of()["gemma-r1"]["phase"] == "unloaded"  # drained before the switch stops it
        with pytest.raises(HostRuntimeError):
            world.host_sup.start(launch_spec(broken), revision_label="r9", revision_id="109", verify=False)
        world.host_sup.start(launch_spec(world.r1), revision_label="r1", revision_id="101", verify=False)
    deadline = time.monotonic() + 15
    while world.state_of()["gemma-r1"]["phase"] != "loaded":
        assert time.monotonic() < deadline, world.state_of()
        time.sleep(0.1)
    world.service.report()
    [sent] = [json.loads(p.read_text()) for p in world.panel.outbox.entries() if p.name.endswith("-serving.json")]
    assert {row["name"]: row["phase"] for row in sent["body"]["state"]} == {"gemma-r1": "loaded"}
    assert world.client().chat.completions.create(model="coder", messages=ASK, max_tokens=2).model == "gemma-r1"


def test_an_on_demand_revision_loads_through_the_switch_path_on_a_port_of_its_own(world: World) -> None:
    world.service.apply(world.both("v2"))
    assert world.state_of()["gemma-r2"]["phase"] == "unloaded"
    t0 = time.monotonic()
    stream = world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=4, stream=True)
    chunks = list(stream)
    first_token_s = time.monotonic() - t0
    assert chunks[-1].choices[0].finish_reason is not None and chunks[0].model == "gemma-r2"
    status = world.ondemand(2).status()
    assert status.running and status.revision_label == "r2" and status.port == world.r2["spec"]["port"]
    log = Path(status.log_path or "").read_text()
    assert "panel: starting llama.cpp revision r2" in log and ENGINE_KEY not in log
    assert world.service.loader.running() == {"gemma-r2"}
    state = world.state_of()["gemma-r2"]
    assert state["phase"] == "loaded" and state["last_load_s"] > 0
    scraped = httpx.get(f"{world.url}/metrics", timeout=10).text  # r2's llama-server has no --metrics
    assert 'frontdoor_engine_scrape_failures_total{model="gemma-r2",reason="off"}' in scraped
    assert 'frontdoor_engine_scrape_up{model="gemma-r2"} 0.0' in scraped and 'model="gemma-r2",alias' not in scraped
    print(f"on-demand load through the agent: {state['last_load_s']:.2f} s, first token {first_token_s:.2f} s")


def test_an_alias_moves_and_a_removed_model_drains_while_another_streams(world: World) -> None:
    assert world.ondemand(2).status().running
    tokens: list[str] = []
    failures: list[BaseException] = []

    def long_stream() -> None:
        try:
            stream = world.client().chat.completions.create(
                model="gemma-r2", messages=[{"role": "user", "content": "Count to fifty."}], max_tokens=60, stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    tokens.append(chunk.choices[0].delta.content)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failures.append(exc)

    streaming = threading.Thread(target=long_stream)
    streaming.start()
    deadline = time.monotonic() + 60
    while not tokens and time.monotonic() < deadline:
        time.sleep(0.02)
    # `fast` moves to r1 and r2 leaves the table while r2 is still streaming.
    world.service.apply(world.answer(model("gemma-r1", world.r1, "pinned", "coder", "fast"), version="v3"))
    assert world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-r1"
    streaming.join(120)
    assert failures == [] and len(tokens) > 10  # the stream was not cut
    deadline = time.monotonic() + 30
    while world.ondemand(2).status().running and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not world.ondemand(2).status().running  # unloaded once its last request was answered
    assert world.service.loader.running() == set()


def test_a_failed_load_answers_clearly_and_leaves_the_loaded_set(world: World) -> None:
    missing = launch(3, ctx=1024, port=free_port(), model=str(world.state / "gone.gguf"))
    world.service.apply(
        world.answer(
            model("gemma-r1", world.r1, "pinned", "coder"), model("broken", missing, "on-demand"), version="v4"
        )
    )
    before = {name for name, row in world.state_of().items() if row["phase"] == "loaded"}
    body = {"model": "broken", "messages": ASK, "max_tokens": 2}
    answer = httpx.post(f"{world.url}/v1/chat/completions", json=body, timeout=60)
    error = answer.json()["error"]
    assert answer.status_code == 503 and error["code"] == "model_load_failed"
    assert "r3 was refused before it started" in error["message"] and "gone.gguf is not there" in error["message"]
    assert str(world.state) not in answer.text  # which file, not where this host keeps it
    assert ENGINE_KEY not in answer.text
    assert {name for name, row in world.state_of().items() if row["phase"] == "loaded"} == before
    assert not world.ondemand(3).status().running


def test_room_is_the_hosts_real_free_memory_in_bytes(world: World) -> None:
    free = host_free_memory(gpus=False)["ram"]
    big = launch(4, ctx=1024, port=free_port())
    too_big = model("huge", big, "on-demand", memory=free + (64 << 30))
    world.service.apply(world.answer(world.pinned(), too_big, version="v5"))
    body = {"model": "huge", "messages": ASK, "max_tokens": 2}
    answer = httpx.post(f"{world.url}/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "no_room"
    assert "ram: needs" in answer.json()["error"]["message"]
    assert not world.ondemand(4).status().running  # nothing was started, nothing unloaded
    assert world.state_of()["gemma-r1"]["phase"] == "loaded"


def test_a_load_past_the_doors_deadline_stops_the_engine_its_start_brings_up(world: World) -> None:
    """The agent's start runs in a thread the door cannot cancel: once it returns, the engine it
    brought up is stopped, so a load past its deadline holds no memory; the next load works."""
    late = launch(7, ctx=1024, port=free_port())
    world.service.apply(world.answer(world.pinned(), model("late", late, "on-demand"), version="v5-late"))
    door = world.service.door
    assert door is not None
    door.update_limits(load_timeout_s=0.2)  # Gemma takes seconds to start here
    try:
        body = {"model": "late", "messages": ASK, "max_tokens": 2}
        answer = httpx.post(f"{world.url}/v1/chat/completions", json=body, timeout=60)
        error = answer.json()["error"]
        assert answer.status_code == 503 and error["code"] == "model_load_timeout"
        assert error["message"].startswith("`late` did not load within 0.2 s, the front door's load deadline")
        sup = world.ondemand(7)
        deadline = time.monotonic() + 60
        while not sup.status().running:  # the start goes on (it began before the deadline passed)
            assert time.monotonic() < deadline, "the abandoned load's engine never started"
            time.sleep(0.05)
        while sup.status().running:
            assert time.monotonic() < deadline, "the engine of the abandoned load still runs"
            time.sleep(0.1)
        time.sleep(1.0)
        assert not sup.status().running and world.service.loader.running() == set()
        assert world.state_of()["late"]["phase"] == "unloaded"
    finally:
        door.update_limits(load_timeout_s=120)
    assert world.client().chat.completions.create(model="late", messages=ASK, max_tokens=2).model == "gemma-r7"
    assert world.service.loader.running() == {"late"}


def test_an_on_demand_engine_that_dies_loads_again_on_the_next_request(world: World) -> None:
    world.service.apply(world.both("v6"))
    assert world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-r2"
    pid = world.ondemand(2).status().pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # an OOM kill, say
    # At once, before the agent's poll notices: the request meets a refused connection, the door
    # marks r2 unloaded and loads it again for it; it does not fail or hang on the dead port.
    answer = world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=2)
    assert answer.model == "gemma-r2" and answer.choices[0].message.content
    assert world.ondemand(2).status().pid != pid and world.state_of()["gemma-r2"]["phase"] == "loaded"


def test_reports_wait_in_the_outbox_and_a_restarted_agent_serves_its_kept_table(world: World) -> None:
    world.service.apply(world.both("v6"))
    assert world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-r2"
    world.service.report()
    kept = [json.loads(p.read_text()) for p in world.panel.outbox.entries() if p.name.endswith("-serving.json")]
    assert len(kept) == 1  # running totals: only the newest report waits
    report = kept[0]
    assert report["path"] == "serving/report" and report["body"]["version"] == "v6"
    assert report["body"]["bind"] == world.service.bind
    served = {row["model"]: row["requests"] for row in report["body"]["usage"]}
    assert served["gemma-r1"] >= 2 and served["gemma-r2"] >= 3
    rows = {row["name"]: row for row in report["body"]["state"]}
    assert set(rows) == {"gemma-r1", "gemma-r2"}
    assert rows["gemma-r1"]["measured"]["ram"] > 50 * MIB  # what its engine's processes hold
    private = world.state / "private" / "serving.json"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert world.ondemand(2).status().running

    world.service.close()  # the agent stops: on-demand engines stop with it, the pinned one keeps serving
    assert not world.ondemand(2).status().running and world.host_sup.status().running
    world.service = world.open()  # ...and starts again while the panel is away
    assert world.service.version == "v6"
    answer = world.client().chat.completions.create(model="coder", messages=ASK, max_tokens=2)
    assert answer.model == "gemma-r1"
    door = world.service.door
    assert door is not None
    usage = {row.model: row.requests for row in world.service.call(door.usage)}
    assert usage["gemma-r1"] == served["gemma-r1"] + 1  # totals go on from where they were


def streaming(world: World, *aliases: str) -> tuple[threading.Event, list[tuple[str, str]], list[threading.Thread]]:
    """One official client per alias streaming without pause until the event is set; what
    answered each whole stream goes to the list, a failure ends the test."""
    stop, served, failures = threading.Event(), [], []

    def stream_on(alias: str) -> None:
        client = world.client()
        try:
            while not stop.is_set():
                chunks = list(client.chat.completions.create(model=alias, messages=ASK, max_tokens=4, stream=True))
                assert chunks[-1].choices[0].finish_reason is not None  # whole, not cut
                served.append((alias, chunks[-1].model))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            served.append((alias, f"failed: {exc!r}"))
            failures.append(exc)

    threads = [threading.Thread(target=stream_on, args=(alias,)) for alias in aliases]
    for thread in threads:
        thread.start()
    return stop, served, threads


def until_served(served: list[tuple[str, str]], count: int, model: str, timeout: float = 120.0) -> None:
    start, deadline = len(served), time.monotonic() + timeout
    while sum(1 for _, m in served[start:] if m == model) < count:
        assert not any(m.startswith("failed") for _, m in served), served
        assert time.monotonic() < deadline, served[start:]
        time.sleep(0.05)


def test_a_switch_of_the_pinned_revision_under_streaming_load_fails_no_request(world: World) -> None:
    """Four clients stream `coder` (pinned r1) and `fast` (r2, which the door loaded on demand)
    while the host switches to r2: the door drains and stops its own r2 (the switch's port), drains
    r1 before the switch stops it, requests wait meanwhile and follow their alias to r2."""
    world.service.apply(world.both("v7"))
    assert world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-r2"
    assert world.ondemand(2).status().running  # the door's own engine of r2, on r2's port
    stop, served, threads = streaming(world, "coder", "coder", "fast", "fast")
    try:
        until_served(served, 4, "gemma-r1")
        with world.ctx.switching("102"):  # what hostagent.operations.switch does around a switch to r2
            assert not world.ondemand(2).status().running  # drained and stopped: the port is free
            world.host_sup.start(launch_spec(world.r2), revision_label="r2", revision_id="102", verify=False)
        # The panel's next answer: r2 is the active revision, pinned, and the switch moved r1's alias.
        world.service.apply(world.answer(model("gemma-r2", world.r2, "pinned", "fast", "coder"), version="v8"))
        until_served(served, 8, "gemma-r2")
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    assert not any(m.startswith("failed") for _, m in served), served
    assert {m for alias, m in served[-4:]} == {"gemma-r2"} and ("coder", "gemma-r2") in served
    assert world.service.loader.running() == set() and world.host_sup.status().revision_label == "r2"


def test_the_replaced_revisions_name_answers_what_serves_in_its_place(world: World) -> None:
    """After the switch to r2, a client still calling r1 by its name learns what serves now."""
    with pytest.raises(openai.NotFoundError) as gone:
        world.client().chat.completions.create(model="gemma-r1", messages=ASK, max_tokens=2)
    body = gone.value.body
    assert isinstance(body, dict) and body["code"] == "model_not_found"
    assert body["message"] == (
        "The model `gemma-r1` is no longer served on this host: `gemma-r2` (r2; aliases `fast`, `coder`) serves "
        "in its place; call it by one of its aliases `fast` or `coder`, which follow switches."
    )


def test_a_pinned_engine_that_dies_is_restarted_by_the_watchdog_while_requests_wait(world: World) -> None:
    events: list[WatchdogEvent] = []
    dog = Watchdog(
        world.host_sup, lambda _revision_id: launch_spec(world.r2), interval=0.3, timeout=2.0, failure_threshold=2,
        ready_timeout=120.0, on_event=events.append,
    )  # fmt: skip
    dog.start()
    try:
        pid = world.host_sup.status().pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        answer = world.client().chat.completions.create(model="fast", messages=ASK, max_tokens=2)
    finally:
        dog.stop(timeout=60)
    assert answer.model == "gemma-r2" and answer.choices[0].message.content
    assert [e.kind for e in events].count("restarted") == 1 and world.host_sup.status().pid != pid
    assert world.state_of()["gemma-r2"]["phase"] == "loaded"


def test_a_stopped_pinned_engine_is_said_so_to_clients(world: World) -> None:
    assert world.host_sup.status().revision_label == "r2"  # the previous test switched the host to r2
    world.host_sup.stop(grace=5)  # what the operator's Stop does
    deadline = time.monotonic() + 30
    while world.state_of()["gemma-r2"]["phase"] == "loaded":
        assert time.monotonic() < deadline, world.state_of()
        time.sleep(0.1)
    answer = httpx.post(f"{world.url}/v1/chat/completions", json={"model": "fast", "messages": ASK}, timeout=60)
    error = answer.json()["error"]
    assert answer.status_code == 503 and error["code"] == "model_load_failed"
    assert "pinned revision r2" in error["message"] and "runs nothing now" in error["message"]


def test_a_request_during_the_agents_relaunch_of_its_pinned_revision_waits_for_it(world: World) -> None:
    """The agent starts while its engine is down (r2 stopped by the test before; a host reboot alike)
    and the panel queues a start of r2 (its register answer's `restore`). A request that arrives
    before that start waits for it, as for an on-demand load, and is answered by r2; it used to get
    503 "runs nothing now: start or switch to r2" while the start was on its way. A client whose
    wait bound passes meanwhile is told how far the load is."""
    assert not world.host_sup.status().running
    world.service.close()
    world.service = world.open(relaunching="102")
    answers: list[httpx.Response] = []
    body = {"model": "fast", "messages": ASK, "max_tokens": 2}
    waiting = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{world.url}/v1/chat/completions", json=body, timeout=120))
    )
    waiting.start()
    deadline = time.monotonic() + 15
    while world.state_of()["gemma-r2"]["waiting"] != 1:
        assert time.monotonic() < deadline and not answers, (answers, world.state_of())
        time.sleep(0.05)
    door = world.service.door
    assert door is not None
    door.update_limits(queue_wait_s=0.5)
    try:
        late = httpx.post(f"{world.url}/v1/chat/completions", json=body, timeout=30)
    finally:
        door.update_limits(queue_wait_s=120)
    assert late.status_code == 503 and int(late.headers["Retry-After"]) >= 1
    progress = late.json()["error"]["progress"]
    assert progress["phase"] == "loading" and progress["loading_s"] >= 0.5 and progress["model"] == "gemma-r2"
    listed = {m["id"]: m["controlpanel"] for m in httpx.get(f"{world.url}/v1/models", timeout=10).json()["data"]}
    assert listed["fast"]["state"] == "loading" and listed["fast"]["revision"] == "r2"
    assert answers == []  # still waiting, not refused
    with world.ctx.switching("102"):  # the panel's start of r2, as hostagent.operations.switch runs it
        world.host_sup.start(launch_spec(world.r2), revision_label="r2", revision_id="102", verify=False)
    waiting.join(60)
    [answer] = answers
    assert answer.status_code == 200 and answer.json()["model"] == "gemma-r2"
    assert world.state_of()["gemma-r2"]["phase"] == "loaded"


def test_the_bind_setting_turns_the_door_off_or_stops_a_bad_value() -> None:
    assert door_settings({"CONTROLPANEL_FRONT_DOOR_BIND": "off"}) is None
    on = door_settings({})
    assert on is not None and on.bind == "127.0.0.1:4000"
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_BIND"):
        door_settings({"CONTROLPANEL_FRONT_DOOR_BIND": "4000"})
