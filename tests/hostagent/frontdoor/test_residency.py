"""What is loaded, and what waits, with real llama-servers started and stopped by each load and
unload: swaps under load with room for one, the queue's bounds, the drain timeout, a failed load,
memory held by a process the panel did not start, pinned models and the idle time-to-live."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest
from openai import OpenAI

from hostagent.frontdoor import Mode
from hostagent.frontdoor.launcher import ProcessLoader

from .conftest import PLANNED, DoorThread, Host

pytestmark = pytest.mark.engine

ASK = [{"role": "user", "content": "Say hello."}]


def client(door: DoorThread) -> OpenAI:
    return OpenAI(base_url=f"{door.url}/v1", api_key="none", max_retries=0, timeout=300)


def chat(door: DoorThread, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": ASK, "max_tokens": 2, **extra}
    return httpx.post(f"{door.url}/v1/chat/completions", json=body, timeout=300)


def in_threads(*calls: Callable[[], Any]) -> list[Any]:
    """Run each call in its own thread; their results (or exceptions), in order."""
    results: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        try:
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - handed back to the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return results


def test_clients_alternating_two_models_with_room_for_one_all_get_answers(
    host: Host, open_door: Callable[..., DoorThread]
) -> None:
    host.budget = PLANNED  # room for one engine at a time
    door = open_door()
    c = client(door)

    def alternate(first: int) -> list[str]:
        names = ["fast", "coder"] if first == 0 else ["coder", "fast"]
        answers = []
        for name in names * 2:
            stream = c.chat.completions.create(model=name, messages=ASK, max_tokens=3, stream=True)
            chunks = list(stream)
            assert chunks[-1].choices[0].finish_reason is not None
            answers.append(chunks[-1].model)
        return answers

    results = in_threads(*(lambda i=i: alternate(i % 2) for i in range(4)))
    assert [r for r in results if isinstance(r, Exception)] == []
    assert all(sorted(r) == ["small", "small", "wide", "wide"] for r in results)
    swaps = door.metric("frontdoor_unloads_total", model="small", reason="room") + door.metric(
        "frontdoor_unloads_total", model="wide", reason="room"
    )
    assert swaps >= 1
    assert len(door.loader.running()) == 1  # never both at once
    assert door.metric("frontdoor_queue_wait_seconds_count", model="small", alias="fast") == 8


class GatedLoader:
    """The real loader, held at the door until the test opens the gate: a load as slow as the
    test needs, on any machine."""

    def __init__(self, inner: ProcessLoader) -> None:
        self.inner = inner
        self.gate: asyncio.Event | None = None

    async def load(self, name: str) -> None:
        self.gate = self.gate or asyncio.Event()
        await self.gate.wait()
        await self.inner.load(name)

    async def unload(self, name: str) -> None:
        await self.inner.unload(name)


def test_the_queue_is_bounded_in_length_and_wait(host: Host, open_door: Callable[..., DoorThread]) -> None:
    gated: dict[str, GatedLoader] = {}

    def wrap(inner: ProcessLoader) -> GatedLoader:
        gated["loader"] = GatedLoader(inner)
        return gated["loader"]

    door = open_door(wrap=wrap, queue_max=1, queue_wait_s=1.5)

    def once_small_waits() -> httpx.Response:
        door.wait_for(lambda state: state["small"]["waiting"] == 1)
        return chat(door, "wide")

    full, timed_out = in_threads(once_small_waits, lambda: chat(door, "small"))
    assert full.status_code == 429 and full.json()["error"]["code"] == "queue_full"
    assert int(full.headers["Retry-After"]) >= 1
    assert timed_out.status_code == 503 and timed_out.json()["error"]["code"] == "queue_timeout"
    assert "after 1.5 s" in timed_out.json()["error"]["message"] and int(timed_out.headers["Retry-After"]) >= 1
    assert door.metric("frontdoor_queue_rejected_total", model="wide", reason="full") == 1
    assert door.metric("frontdoor_queue_rejected_total", model="small", reason="timeout") == 1

    async def open_gate() -> None:
        gate = gated["loader"].gate
        assert gate is not None
        gate.set()

    door.call(open_gate())
    door.wait_for(lambda s: s["small"]["phase"] == "loaded")  # the load went on for whoever asks next
    assert chat(door, "small").status_code == 200


def test_an_unload_that_outlasts_the_drain_timeout_cuts_no_stream(
    host: Host, open_door: Callable[..., DoorThread]
) -> None:
    host.budget = PLANNED
    door = open_door(drain_timeout_s=0.2)
    c = client(door)
    stream = c.chat.completions.create(
        model="small", messages=ASK, max_tokens=128, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = [next(iter(stream))]  # in flight on small
    busy = chat(door, "wide")
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "model_busy"
    assert "small" in busy.json()["error"]["message"] and int(busy.headers["Retry-After"]) >= 1
    chunks += list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 128  # whole, not cut
    state = door.state()
    assert (state["small"]["phase"], state["wide"]["phase"]) == ("loaded", "unloaded")
    assert door.metric("frontdoor_loads_total", model="wide", result="busy") == 1
    assert chat(door, "small").status_code == 200


def test_a_failed_load_answers_its_waiters_and_leaves_the_loaded_set_as_it_was(
    host: Host, open_door: Callable[..., DoorThread]
) -> None:
    host.budget = PLANNED
    host.add("broken", context=1024, model="/nonexistent/model.gguf")
    door = open_door()
    assert chat(door, "small").status_code == 200

    failed = in_threads(lambda: chat(door, "broken"), lambda: chat(door, "broken"))
    for answer in failed:
        error = answer.json()["error"]
        assert answer.status_code == 503 and error["code"] == "model_load_failed"
        assert "`broken` could not be loaded: broken exited with code" in error["message"]
    door.wait_for(lambda s: s["small"]["phase"] == "loaded" and s["broken"]["phase"] == "unloaded")
    assert door.loader.running() == {"small"}
    assert door.metric("frontdoor_loads_total", model="broken", result="failed") == 1
    assert door.metric("frontdoor_unloads_total", model="small", reason="room") == 1  # made room, then came back
    assert chat(door, "fast").status_code == 200


def test_memory_held_by_an_outside_process_counts(host: Host, open_door: Callable[..., DoorThread]) -> None:
    host.budget = 2 * PLANNED
    host.outside = PLANNED // 2  # a process the panel did not start: now only one engine fits
    door = open_door()
    assert chat(door, "small").status_code == 200
    assert chat(door, "wide").status_code == 200
    assert door.loader.running() == {"wide"}
    assert door.metric("frontdoor_unloads_total", model="small", reason="room") == 1

    host.outside = 0  # it went away: both fit
    assert chat(door, "small").status_code == 200
    assert door.loader.running() == {"small", "wide"}
    assert door.metric("frontdoor_unloads_total", model="wide", reason="room") == 0


def test_pinned_models_stay_and_idle_ones_go(host: Host, open_door: Callable[..., DoorThread]) -> None:
    host.models["wide"] = replace(host.models["wide"], mode=Mode.PINNED)
    host.models["small"] = replace(host.models["small"], idle_ttl_s=1.0)
    door = open_door()
    door.wait_for(lambda s: s["wide"]["phase"] == "loaded")  # pinned: loaded at start, nobody asked
    assert chat(door, "fast").status_code == 200
    door.wait_for(lambda s: s["small"]["phase"] == "unloaded", timeout=30)
    assert door.metric("frontdoor_unloads_total", model="small", reason="idle") == 1

    host.outside = PLANNED // 2  # half an engine's room is left beside the pinned one, which stays
    answer = chat(door, "fast")
    error = answer.json()["error"]
    assert answer.status_code == 503 and error["code"] == "no_room" and int(answer.headers["Retry-After"]) >= 1
    assert "not enough memory to load `small` (ram: needs 400.0 MiB, 200.0 MiB free)" in error["message"]
    assert door.loader.running() == {"wide"} and door.state()["wide"]["phase"] == "loaded"
    assert door.metric("frontdoor_unloads_total", model="wide", reason="room") == 0
    assert door.metric("frontdoor_loads_total", model="small", result="no_room") == 1


def test_unknown_routes_and_bad_bodies_get_openai_errors(host: Host, open_door: Callable[..., DoorThread]) -> None:
    door = open_door()
    bad = httpx.post(f"{door.url}/v1/chat/completions", json={"messages": ASK})
    assert bad.status_code == 400 and "`model` string" in bad.json()["error"]["message"]
    not_json = httpx.post(f"{door.url}/v1/chat/completions", content=b"{not json")
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_body"
    missing = httpx.post(f"{door.url}/v1/images/generations", json={"model": "small"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert door.loader.running() == set()


def test_an_alias_moved_under_streaming_load_fails_no_request(host: Host, open_door: Callable[..., DoorThread]) -> None:
    """Eight official clients stream `fast` without pause while `fast` moves small -> wide -> small
    on a host with room for one: each move loads the new engine while the old one finishes its
    streams (drained, then unloaded); no request fails and every stream ends whole."""
    host.budget = PLANNED  # room for one engine at a time
    door = open_door()
    c = client(door)
    assert chat(door, "fast").status_code == 200  # small is loaded
    stop = threading.Event()
    served: list[str] = []
    moved = {"small": host.table(small={"aliases": ()}, wide={"aliases": ("coder", "fast")}), "wide": host.table()}

    def stream_on() -> int:
        answered = 0
        while not stop.is_set():
            chunks = list(c.chat.completions.create(model="fast", messages=ASK, max_tokens=4, stream=True))
            assert chunks[-1].choices[0].finish_reason is not None  # whole, not cut
            served.append(chunks[-1].model)
            answered += 1
        return answered

    def mover() -> None:
        try:
            for old in ("small", "wide"):
                count = len(served)
                while len(served) < count + 2:  # streams flow on the old engine
                    threading.Event().wait(0.05)
                door.update_table(moved[old])
                new = "wide" if old == "small" else "small"
                door.wait_for(lambda s, new=new: s[new]["phase"] == "loaded", timeout=180)
                count = len(served)
                while served[count:].count(new) < 2:
                    threading.Event().wait(0.05)
        finally:
            stop.set()

    results = in_threads(mover, *(stream_on for _ in range(8)))
    assert [r for r in results if isinstance(r, Exception)] == []
    assert "wide" in served and served[-1] == "small" and sum(results[1:]) == len(served)
    assert door.metric("frontdoor_unloads_total", model="small", reason="room") == 1
    assert door.metric("frontdoor_unloads_total", model="wide", reason="room") == 1
    assert len(door.loader.running()) == 1
