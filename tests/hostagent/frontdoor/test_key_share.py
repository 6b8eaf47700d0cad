"""One key cannot stall the others, and one slow load cannot stall the other loads (issue 37).

The attacks, over real HTTP, against a front door whose engines are real processes: the stand-in
engine of tests/support/slot_engine.py, which schedules as llama-server does (N parallel slots, the
rest waiting in its own queue; a start that answers 503 until it is ready), at a speed the test
chooses. The door's loader is its real ProcessLoader, which starts and stops those processes.

- A key that opens many slow streams gets its first `key_inflight_max` and 429s for the rest, so
  another key's short request still finds an engine slot: within 2x its time alone (without the
  cap, it waits behind the streams).
- A key that sends many requests for a model that is loading takes at most its share of the wait
  queue: another key's request for the model still queues, and is answered.
- A model that takes long to load does not hold up the load of another that fits beside it.
- A load past its deadline fails with the reason, and its engine is stopped.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostagent.frontdoor import FrontDoorSettings, KeyTable, Mode, ServedModel, hash_key
from hostagent.frontdoor.keys import InferenceKey
from hostagent.frontdoor.launcher import Command
from hostagent.frontdoor.settings import SettingsError
from tests.support.llama import free_port
from tests.support.slot_engine import command

from .conftest import PLANNED, DoorThread, Host, start_door

ALPHA, BRAVO = "cpk_alpha-8sKq2-never-logged", "cpk_bravo-Lm40x-never-logged"
KEYS = KeyTable(tuple(InferenceKey(name=n, sha256=hash_key(s)) for n, s in (("alpha", ALPHA), ("bravo", BRAVO))))
CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Say hello."}]


def engines(**specs: dict[str, Any]) -> Host:
    """A host whose models are stand-in engines: name -> slot_engine options, plus `mode`."""
    host = Host()
    for name, spec in specs.items():
        options = dict(spec)
        mode = options.pop("mode", Mode.ON_DEMAND)
        port = free_port()
        host.commands[name] = Command(command(port, **options), f"http://127.0.0.1:{port}/health")
        upstream = f"http://127.0.0.1:{port}"
        host.models[name] = ServedModel(name=name, upstream=upstream, mode=mode, memory={"ram": PLANNED})
    return host


@pytest.fixture
def doors(tmp_path: Path) -> Iterator[Callable[..., DoorThread]]:
    """doors(host, keys=None, **settings) -> a running front door over `host`'s engines."""
    opened: list[DoorThread] = []

    def open_(host: Host, keys: KeyTable | None = None, **settings: Any) -> DoorThread:
        door = start_door(host, tmp_path, keys, **settings)
        opened.append(door)
        return door

    yield open_
    for door in opened:
        door.close()


def body(model: str, tokens: int, *, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "messages": ASK, "max_tokens": tokens, "stream": stream}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def timed_ask(door: DoorThread, secret: str, model: str, tokens: int) -> float:
    t0 = time.monotonic()
    answer = httpx.post(door.url + CHAT, json=body(model, tokens), headers=bearer(secret), timeout=30)
    assert answer.status_code == 200, answer.text
    return time.monotonic() - t0


def set_limits(door: DoorThread, **limits: float) -> None:
    async def update() -> None:
        door.door.update_limits(**limits)

    door.call(update())


async def streams_then_ask(door: DoorThread, streams: int, stream_tokens: int) -> tuple[list[httpx.Response], float]:
    """Key alpha opens `streams` streams at once and reads each admitted one's first token; then
    key bravo asks for 8 tokens. The answers alpha got (streams closed) and bravo's time."""
    async with httpx.AsyncClient(timeout=30) as client:
        stream = body("chat", stream_tokens, stream=True)
        opening = [
            client.build_request("POST", door.url + CHAT, json=stream, headers=bearer(ALPHA)) for _ in range(streams)
        ]
        answers = await asyncio.gather(*(client.send(request, stream=True) for request in opening))
        reading = []  # kept: a reader dropped closes its stream, and the door hands its slot back
        try:
            for answer in answers:
                if answer.status_code == 200:
                    reading.append(answer.aiter_raw())
                    await anext(reading[-1])  # generating
                else:
                    await answer.aread()
            t0 = time.monotonic()
            asked = await client.post(door.url + CHAT, json=body("chat", 8), headers=bearer(BRAVO))
            took = time.monotonic() - t0
            assert asked.status_code == 200, asked.text
        finally:
            for answer in answers:
                await answer.aclose()
    return answers, took


def test_a_key_with_many_slow_streams_leaves_another_keys_short_request_its_speed(
    doors: Callable[..., DoorThread],
) -> None:
    # An engine with 4 slots (llama-server -np 4), 20 tokens a second per request.
    host = engines(chat={"mode": Mode.PINNED, "slots": 4, "token_s": 0.05})
    door = doors(host, KEYS, key_inflight_max=3)
    door.wait_for(lambda state: state["chat"]["phase"] == "loaded")
    timed_ask(door, BRAVO, "chat", 8)  # warm the connections
    alone = statistics.median(timed_ask(door, BRAVO, "chat", 8) for _ in range(3))

    # The finding as it was (no cap): bravo's 8 tokens wait behind alpha's streams in the engine.
    set_limits(door, key_inflight_max=0)
    answers, uncapped = asyncio.run(streams_then_ask(door, streams=8, stream_tokens=30))
    assert all(answer.status_code == 200 for answer in answers)
    assert uncapped > 2 * alone, (uncapped, alone)

    # With the cap: alpha gets 3 streams, 429 for the rest; bravo keeps its speed.
    set_limits(door, key_inflight_max=3)
    answers, capped = asyncio.run(streams_then_ask(door, streams=10, stream_tokens=400))
    assert sorted(answer.status_code for answer in answers) == [200] * 3 + [429] * 7
    assert capped <= 2 * alone, (capped, alone)
    for refused in (answer for answer in answers if answer.status_code == 429):
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("key_in_flight_limit", "rate_limit_error")
        assert error["message"].startswith("The key `alpha` already has 3 requests being answered or waiting")
        assert "in-flight cap" in error["message"] and ALPHA not in refused.text
        assert int(refused.headers["Retry-After"]) >= 1
    assert door.metric("frontdoor_queue_rejected_total", model="chat", reason="key_in_flight") == 7
    # Its streams ended, alpha may open streams again.
    door.wait_for(lambda state: state["chat"]["in_flight"] == 0, timeout=10)
    assert timed_ask(door, ALPHA, "chat", 2) < 5


def test_on_an_open_door_each_client_address_counts_as_one_key(doors: Callable[..., DoorThread]) -> None:
    host = engines(chat={"mode": Mode.PINNED, "slots": 4, "token_s": 0.05})
    door = doors(host, key_inflight_max=1)  # no keys: open
    door.wait_for(lambda state: state["chat"]["phase"] == "loaded")
    here, neighbour = (httpx.Client(transport=httpx.HTTPTransport(local_address=a)) for a in ("127.0.0.1", "127.0.0.2"))
    with here, neighbour, here.stream("POST", door.url + CHAT, json=body("chat", 200, stream=True)) as held:
        assert held.status_code == 200
        refused = here.post(door.url + CHAT, json=body("chat", 2))
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "key_in_flight_limit"
        message = refused.json()["error"]["message"]
        assert message.startswith("The client 127.0.0.1 already has 1 request being answered")
        assert neighbour.post(door.url + CHAT, json=body("chat", 2)).status_code == 200


def test_a_key_cannot_fill_the_wait_queue_another_keys_model_needs(doors: Callable[..., DoorThread]) -> None:
    host = engines(lazy={"ready_after": 2.0, "slots": 8, "token_s": 0.01})
    door = doors(host, KEYS, queue_max=4, key_queue_share=0.5, key_inflight_max=0)

    async def attack() -> tuple[list[httpx.Response], httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            flood = [
                asyncio.ensure_future(client.post(door.url + CHAT, json=body("lazy", 2), headers=bearer(ALPHA)))
                for _ in range(5)
            ]
            while sum(task.done() for task in flood) < 3:  # alpha's share is 2 of the 4 places
                await asyncio.sleep(0.02)
            assert door.state()["lazy"]["waiting"] == 2
            bravo = await client.post(door.url + CHAT, json=body("lazy", 2), headers=bearer(BRAVO))
            refused = await asyncio.gather(*flood)
            return refused, bravo

    alphas, bravo = asyncio.run(attack())
    assert bravo.status_code == 200, bravo.text
    assert int(bravo.headers["X-Queue-Wait-Ms"]) > 0  # it queued for the load, and was answered
    assert sorted(answer.status_code for answer in alphas) == [200, 200, 429, 429, 429]
    for refused in (answer for answer in alphas if answer.status_code == 429):
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("key_queue_share", "rate_limit_error")
        assert "The key `alpha` already has 2 requests waiting" in error["message"]
        assert "(2 of 4 places)" in error["message"]
        assert int(refused.headers["Retry-After"]) >= 1
    assert door.metric("frontdoor_queue_rejected_total", model="lazy", reason="key_share") == 3


def test_a_slow_load_does_not_hold_up_the_load_of_a_model_that_fits_beside_it(
    doors: Callable[..., DoorThread],
) -> None:
    host = engines(slow={"ready_after": 6.0}, quick={})  # room for both (the default budget)
    door = doors(host)
    slow_took: list[float] = []

    async def both() -> tuple[httpx.Response, httpx.Response, float]:
        async with httpx.AsyncClient(timeout=30) as client:
            t0 = time.monotonic()
            slow = asyncio.ensure_future(client.post(door.url + CHAT, json=body("slow", 2)))
            slow.add_done_callback(lambda _: slow_took.append(time.monotonic() - t0))
            while door.state()["slow"]["phase"] != "loading":
                await asyncio.sleep(0.02)
            t1 = time.monotonic()
            quick = await client.post(door.url + CHAT, json=body("quick", 2))
            quick_took = time.monotonic() - t1
            assert door.state()["slow"]["phase"] == "loading"  # still: quick did not wait for it
            return await slow, quick, quick_took

    slow, quick, quick_took = asyncio.run(both())
    assert quick.status_code == 200 and slow.status_code == 200, (quick.text, slow.text)
    assert quick_took < 4.0 < slow_took[0], (quick_took, slow_took)
    assert door.loader.running() == {"slow", "quick"}


def test_a_load_that_needs_room_waits_for_the_running_load_then_unloads_the_least_recently_used(
    doors: Callable[..., DoorThread],
) -> None:
    """Side by side only where it fits: with room for two, a third model asked for while the second
    loads unloads nothing until that load is done, then makes room as before (the least recently
    used on-demand model drained and unloaded)."""
    host = engines(first={}, second={"ready_after": 3.0}, third={})
    door = doors(host)
    assert httpx.post(door.url + CHAT, json=body("first", 2), timeout=30).status_code == 200

    async def second_then_third() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            second = asyncio.ensure_future(client.post(door.url + CHAT, json=body("second", 2)))
            while door.state()["second"]["phase"] != "loading":
                await asyncio.sleep(0.02)
            third = asyncio.ensure_future(client.post(door.url + CHAT, json=body("third", 2)))
            await asyncio.sleep(0.5)
            state = door.state()
            assert (state["first"]["phase"], state["second"]["phase"]) == ("loaded", "loading")
            assert (state["third"]["phase"], state["third"]["waiting"]) == ("unloaded", 1)
            return await second, await third

    second, third = asyncio.run(second_then_third())
    assert second.status_code == 200 and third.status_code == 200, (second.text, third.text)
    assert door.loader.running() == {"second", "third"}
    assert door.metric("frontdoor_unloads_total", model="first", reason="room") == 1


def test_a_load_that_outlives_its_deadline_fails_with_the_reason_and_leaves_no_engine(
    doors: Callable[..., DoorThread],
) -> None:
    host = engines(stuck={"ready_after": 120.0}, quick={})
    door = doors(host, load_timeout_s=4.0)  # room for `quick`, a Python process, to start on a loaded box
    t0 = time.monotonic()
    answer = httpx.post(door.url + CHAT, json=body("stuck", 2), timeout=30)
    assert time.monotonic() - t0 < 15
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "model_load_timeout"
    reason = "`stuck` did not load within 4 s, the front door's load deadline; its start was stopped."
    assert error["message"] == reason
    assert int(answer.headers["Retry-After"]) >= 1
    assert door.loader.running() == set()  # its process is gone: it holds no memory
    assert door.state()["stuck"]["phase"] == "unloaded"
    assert door.metric("frontdoor_loads_total", model="stuck", result="timeout") == 1
    assert httpx.post(door.url + CHAT, json=body("quick", 2), timeout=30).status_code == 200  # the door serves on


def test_the_per_key_settings_come_from_the_environment_and_bad_values_are_named() -> None:
    settings = FrontDoorSettings.from_env(
        {
            "CONTROLPANEL_FRONT_DOOR_KEY_INFLIGHT_MAX": "4",
            "CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE": "0.25",
            "CONTROLPANEL_FRONT_DOOR_LOAD_TIMEOUT": "60",
        }
    )
    assert (settings.key_inflight_max, settings.key_queue_share, settings.load_timeout_s) == (4, 0.25, 60.0)
    defaults = FrontDoorSettings.from_env({})
    assert (defaults.key_inflight_max, defaults.key_queue_share, defaults.load_timeout_s) == (32, 0.5, 900.0)
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE must be above 0 and at most 1"):
        FrontDoorSettings.from_env({"CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE": "1.5"})
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE must be above 0"):
        FrontDoorSettings.from_env({"CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE": "0"})
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_KEY_INFLIGHT_MAX must be at least 0"):
        FrontDoorSettings.from_env({"CONTROLPANEL_FRONT_DOOR_KEY_INFLIGHT_MAX": "-1"})
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_LOAD_TIMEOUT must be at least 1"):
        FrontDoorSettings.from_env({"CONTROLPANEL_FRONT_DOOR_LOAD_TIMEOUT": "0"})


@given(
    name=st.sampled_from(
        [
            "CONTROLPANEL_FRONT_DOOR_KEY_INFLIGHT_MAX",
            "CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE",
            "CONTROLPANEL_FRONT_DOOR_LOAD_TIMEOUT",
        ]
    ),
    raw=st.text(max_size=12) | st.floats().map(str) | st.integers(-5, 10**6).map(str),
)
@settings(max_examples=300, deadline=None)
def test_any_value_of_the_per_key_settings_is_taken_within_bounds_or_refused_by_name(name: str, raw: str) -> None:
    try:
        taken = FrontDoorSettings.from_env({name: raw})
    except SettingsError as refused:
        assert name in str(refused)
        return
    assert taken.key_inflight_max >= 0 and 0 < taken.key_queue_share <= 1 and taken.load_timeout_s >= 1
