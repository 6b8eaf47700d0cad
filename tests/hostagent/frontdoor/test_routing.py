"""One front door before two real llama-servers, driven with the official `openai` client:
routing by name and alias, streams passed through as they come, the engine's key kept behind the
door, inference keys and their models, usage equal to the engine's own counts, a client hanging up,
an alias moved under load. One door for the module: each engine loads once, on demand."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import httpx
import openai
import pytest
from openai import OpenAI

from hostagent.frontdoor import InferenceKey, KeyTable, RoutingTable, hash_key

from .conftest import ENGINE_KEY, DoorThread, make_host, start_door

pytestmark = pytest.mark.engine

ASK = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorThread]:
    door = start_door(make_host(), tmp_path_factory.mktemp("engines"))
    yield door
    door.close()


def client(door: DoorThread, key: str = "none") -> OpenAI:
    return OpenAI(base_url=f"{door.url}/v1", api_key=key, max_retries=0, timeout=300)


def said(error: openai.APIStatusError) -> str:
    """The error's message as the door wrote it (the client's `message` prefixes the status)."""
    body = error.body
    assert isinstance(body, dict)
    return str(body["message"])


def engine_counter(door: DoorThread, model: str, name: str) -> float:
    text = httpx.get(f"{door.host.engine_url(model)}/metrics", headers={"Authorization": f"Bearer {ENGINE_KEY}"}).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"llamacpp:{name} "))


def test_requests_load_their_model_on_demand_and_route_by_name_or_alias(door: DoorThread) -> None:
    assert {name: row["phase"] for name, row in door.state().items()} == {"small": "unloaded", "wide": "unloaded"}
    c = client(door)

    by_name = c.chat.completions.create(model="small", messages=ASK, max_tokens=4)
    assert by_name.model == "small" and by_name.choices[0].message.content
    assert door.state()["small"]["phase"] == "loaded" and door.state()["wide"]["phase"] == "unloaded"
    by_alias = c.chat.completions.create(model="coder", messages=ASK, max_tokens=4)
    assert by_alias.model == "wide"  # the engine behind the alias answers, under its own name
    assert door.metric("frontdoor_loads_total", model="small", result="ok") == 1
    assert door.metric("frontdoor_loads_total", model="wide", result="ok") == 1

    completion = c.completions.create(model="fast", prompt="Once upon a time", max_tokens=4)
    assert completion.model == "small" and completion.choices[0].text
    embedding = c.embeddings.create(model="coder", input="hello world")
    assert len(embedding.data[0].embedding) == 640  # Gemma 3 270M's hidden size

    listed = {m.id: m.model_extra["controlpanel"] for m in c.models.list()}
    assert set(listed) == {"small", "fast", "wide", "coder"}
    assert listed["fast"] == {
        "model": "small", "revision": None, "mode": "on-demand", "loaded": True, "state": "loaded", "loading_s": None,
        "last_load_s": round(door.state()["small"]["last_load_s"], 3),
    }  # fmt: skip
    assert listed["fast"]["last_load_s"] > 0

    with pytest.raises(openai.NotFoundError) as missing:
        c.chat.completions.create(model="gpt-4o", messages=ASK, max_tokens=4)
    assert missing.value.code == "model_not_found"
    assert said(missing.value) == (
        "The model `gpt-4o` does not exist on this host; it serves `small` (alias `fast`), `wide` (alias `coder`)."
    )
    labels = {"model": "small", "alias": "fast", "key": "", "endpoint": "/v1/completions", "code": "200"}
    assert door.metric("frontdoor_requests_total", **labels) == 1


def test_streams_pass_through_token_by_token_with_usage_only_when_asked(door: DoorThread) -> None:
    c = client(door)
    started = time.perf_counter()
    arrivals, chunks = [], []
    for chunk in c.chat.completions.create(
        model="fast", messages=ASK, max_tokens=24, stream=True, extra_body={"ignore_eos": True}
    ):
        arrivals.append(time.perf_counter() - started)
        chunks.append(chunk)
    tokens = [ch for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(tokens) == 24  # one event per token, as the engine wrote them: nothing re-cut or held back
    first_token = arrivals[chunks.index(tokens[0])]
    assert first_token < arrivals[-1] * 0.75  # the first token came while the rest was being generated
    # The door asked the engine for usage (to meter it); the client did not, so it sees none.
    assert all(ch.usage is None and ch.choices for ch in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"

    asked = list(
        c.chat.completions.create(
            model="fast",
            messages=ASK,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    assert asked[-1].choices == [] and asked[-1].usage is not None
    assert asked[-1].usage.completion_tokens == 8


def test_usage_per_key_model_and_day_equals_the_engines_own_counts(door: DoorThread) -> None:
    c = client(door)
    c.chat.completions.create(model="small", messages=ASK, max_tokens=1)  # loaded, whatever ran before
    before = {row["model"]: row for row in httpx.get(f"{door.url}/frontdoor/usage").json()["usage"]}
    predicted = engine_counter(door, "small", "tokens_predicted_total")
    prompted = engine_counter(door, "small", "prompt_tokens_total")
    plain = {"ignore_eos": True, "cache_prompt": False}

    answer = c.chat.completions.create(model="small", messages=ASK, max_tokens=5, extra_body=plain)
    assert answer.usage is not None
    stream = c.chat.completions.create(
        model="fast", messages=[{"role": "user", "content": "Count to ten."}], max_tokens=7, stream=True,
        extra_body=plain,
    )  # fmt: skip
    assert sum(1 for ch in stream if ch.choices and ch.choices[0].delta.content) == 7
    c.completions.create(model="fast", prompt="The sea is", max_tokens=3, extra_body=plain)

    after = {row["model"]: row for row in httpx.get(f"{door.url}/frontdoor/usage").json()["usage"]}
    row, old = (
        after["small"],
        before.get("small", {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "errors": 0}),
    )
    assert row["key"] == "" and row["day"] == time.strftime("%Y-%m-%d", time.gmtime())
    assert row["requests"] - old["requests"] == 3 and row["errors"] - old["errors"] == 0
    assert row["completion_tokens"] - old["completion_tokens"] == 5 + 7 + 3
    assert (
        row["completion_tokens"] - old["completion_tokens"]
        == engine_counter(door, "small", "tokens_predicted_total") - predicted
    )
    assert (
        row["prompt_tokens"] - old["prompt_tokens"] == engine_counter(door, "small", "prompt_tokens_total") - prompted
    )
    assert row["prompt_tokens"] - old["prompt_tokens"] >= answer.usage.prompt_tokens + 2
    tokens = door.metric("frontdoor_tokens_total", model="small", alias="fast", key="", kind="completion")
    assert tokens >= 7 + 3


def test_inference_keys_limit_models_and_the_engine_key_stays_behind_the_door(door: DoorThread) -> None:
    alice = InferenceKey("alice-aider", hash_key("sk-alice-1234567890"), frozenset({"fast"}))
    door.call(_set_keys(door, KeyTable((alice, InferenceKey("ci", hash_key("sk-ci-0987654321"), None)))))
    try:
        with pytest.raises(openai.AuthenticationError) as none:
            client(door, "sk-wrong").chat.completions.create(model="fast", messages=ASK, max_tokens=2)
        assert none.value.status_code == 401 and none.value.code == "invalid_api_key"
        assert httpx.get(f"{door.url}/v1/models").status_code == 401

        as_alice = client(door, "sk-alice-1234567890")
        assert as_alice.chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "small"
        for other in ("wide", "coder", "small"):
            with pytest.raises(openai.PermissionDeniedError) as refused:
                as_alice.chat.completions.create(model=other, messages=ASK, max_tokens=2)
            assert refused.value.code == "model_not_allowed" and "alice-aider" in refused.value.message
        assert [m.id for m in as_alice.models.list()] == ["fast"]
        ci = client(door, "sk-ci-0987654321")
        assert ci.chat.completions.create(model="coder", messages=ASK, max_tokens=2).model == "wide"

        usage = {(r["key"], r["model"]): r for r in httpx.get(f"{door.url}/frontdoor/usage").json()["usage"]}
        assert usage["alice-aider", "small"]["requests"] == 2 and usage["alice-aider", "small"]["errors"] == 1
        assert usage["alice-aider", "wide"]["errors"] == 2
        assert usage["ci", "wide"]["requests"] == 1 and usage["ci", "wide"]["completion_tokens"] >= 1
    finally:
        door.call(_set_keys(door, KeyTable()))
    # The engines want their key; clients never had it, and nothing the door shows carries it.
    engine = httpx.post(f"{door.host.engine_url('small')}/v1/chat/completions", json={"messages": ASK})
    assert engine.status_code == 401
    for path in ("/v1/models", "/metrics", "/frontdoor/state", "/frontdoor/usage"):
        assert ENGINE_KEY not in httpx.get(f"{door.url}{path}").text


async def _set_keys(door: DoorThread, keys: KeyTable) -> None:
    door.door.update_keys(keys)


def test_a_client_that_hangs_up_stops_the_engine(door: DoorThread) -> None:
    predicted = engine_counter(door, "wide", "tokens_predicted_total")
    body = {"model": "coder", "messages": ASK, "max_tokens": 900, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{door.url}/v1/chat/completions", json=body, timeout=300) as resp:
        for line in resp.iter_lines():
            if '"content":"' in line:
                break  # one token arrived: hang up
    slots_url = f"{door.host.engine_url('wide')}/slots"
    deadline = time.monotonic() + 30
    while any(
        s["is_processing"] for s in httpx.get(slots_url, headers={"Authorization": f"Bearer {ENGINE_KEY}"}).json()
    ):
        assert time.monotonic() < deadline, "the engine kept generating for a client that was gone"
        time.sleep(0.1)
    assert engine_counter(door, "wide", "tokens_predicted_total") - predicted < 900
    door.wait_for(lambda state: state["wide"]["in_flight"] == 0, timeout=10)
    assert (
        door.metric(
            "frontdoor_requests_total", model="wide", alias="coder", key="", endpoint="/v1/chat/completions", code="499"
        )
        == 1
    )


def test_an_alias_moved_under_load_lets_requests_in_flight_finish_on_the_old_engine(door: DoorThread) -> None:
    c = client(door)
    table = door.table
    stream = c.chat.completions.create(
        model="coder", messages=ASK, max_tokens=64, stream=True, extra_body={"ignore_eos": True}
    )
    first = next(iter(stream))
    assert first.model == "wide"
    aliases = {"small": ("fast", "coder"), "wide": ()}
    moved = RoutingTable(tuple(replace(m, aliases=aliases[m.name]) for m in table.models))
    door.update_table(moved)
    try:
        answers: list[str] = []
        worker = threading.Thread(
            target=lambda: answers.append(c.chat.completions.create(model="coder", messages=ASK, max_tokens=2).model)
        )
        worker.start()
        rest = list(stream)
        worker.join(timeout=300)
        assert answers == ["small"]  # new requests for the alias go to the model it points at now
        assert {ch.model for ch in rest} == {"wide"}  # the one in flight finished where it began
        assert sum(1 for ch in [first, *rest] if ch.choices and ch.choices[0].delta.content) == 64
        assert rest[-1].choices[0].finish_reason == "length"
    finally:
        door.update_table(table)


def test_a_name_no_longer_served_answers_what_serves_in_its_place(door: DoorThread) -> None:
    """A switch: `wide` (r7) leaves, its alias `coder` moves to `small` (r8). A client still calling
    `wide` by name learns what serves now and how to call it so the next switch does not break it;
    a key that may use only `fast` is told only of that."""
    table = door.table
    rows = {"small": {"aliases": ("fast", "coder"), "revision": "r8"}}
    door.update_table(RoutingTable(tuple(replace(m, **rows[m.name]) for m in table.models if m.name in rows)))
    alice = InferenceKey("alice-aider", hash_key("sk-alice-1234567890"), frozenset({"fast"}))
    try:
        with pytest.raises(openai.NotFoundError) as gone:
            client(door).chat.completions.create(model="wide", messages=ASK, max_tokens=2)
        assert gone.value.code == "model_not_found"
        assert said(gone.value) == (
            "The model `wide` is no longer served on this host: `small` (r8; aliases `fast`, `coder`) serves in "
            "its place; call it by one of its aliases `fast` or `coder`, which follow switches."
        )
        door.call(_set_keys(door, KeyTable((alice,))))
        with pytest.raises(openai.NotFoundError) as gone:
            client(door, "sk-alice-1234567890").chat.completions.create(model="wide", messages=ASK, max_tokens=2)
        assert said(gone.value) == (
            "The model `wide` is no longer served on this host: a model (r8; alias `fast`) serves in its place; "
            "call it by its alias `fast`, which follows switches."
        )
    finally:
        door.call(_set_keys(door, KeyTable()))
        door.update_table(table)
    assert client(door).chat.completions.create(model="wide", messages=ASK, max_tokens=2).model == "wide"


def test_a_client_that_waits_past_the_bound_is_told_how_far_the_load_is(open_door: Callable[..., DoorThread]) -> None:
    """The queue's wait bound passes while the model loads: the 503 says its phase, the seconds the
    load has taken so far and what the last load took, and Retry-After is the time likely left;
    /v1/models shows each model's state meanwhile."""
    door = open_door(queue_wait_s=0.2)
    chat, body = f"{door.url}/v1/chat/completions", {"model": "fast", "messages": ASK, "max_tokens": 2}

    first = httpx.post(chat, json=body, timeout=30)
    assert first.status_code == 503 and first.headers["Retry-After"] == "5"  # no load here before: 5 s
    error = first.json()["error"]
    assert error["code"] == "queue_timeout"
    assert re.fullmatch(
        r"`fast` is not loaded yet after 0.2 s of waiting \(it is loading, \d+\.\d s into its load; "
        r"it has not loaded here before\); try again in 5 s\.",
        error["message"],
    ), error["message"]
    progress = error["progress"]
    assert progress["model"] == "small" and progress["phase"] == "loading" and progress["last_load_s"] is None
    assert progress["loading_s"] >= 0.2
    listed = {m["id"]: m["controlpanel"] for m in httpx.get(f"{door.url}/v1/models").json()["data"]}
    assert listed["fast"]["state"] in ("loading", "loaded") and listed["coder"]["state"] == "unloaded"
    door.wait_for(lambda state: state["small"]["phase"] == "loaded")
    last = door.state()["small"]["last_load_s"]

    assert door.call(door.door.scheduler.give_up("small", "test"))  # unloaded: the next request loads it again
    again = httpx.post(chat, json=body, timeout=30)
    assert again.status_code == 503
    progress = again.json()["error"]["progress"]
    assert progress["phase"] == "loading" and progress["last_load_s"] == round(last, 3)
    assert f"its last load took {last:.1f} s" in again.json()["error"]["message"]
    assert again.headers["Retry-After"] == str(max(1, math.ceil(progress["last_load_s"] - progress["loading_s"])))
    door.wait_for(lambda state: state["small"]["phase"] == "loaded")
    assert httpx.post(chat, json=body, timeout=30).status_code == 200
    listed = {m["id"]: m["controlpanel"] for m in httpx.get(f"{door.url}/v1/models").json()["data"]}
    assert listed["fast"]["state"] == "loaded" and listed["fast"]["loading_s"] is None
