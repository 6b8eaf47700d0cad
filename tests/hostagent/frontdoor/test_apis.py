"""Every API an engine serves, through one front door by an alias: Anthropic's Messages (plain,
streamed, count_tokens) through the official `anthropic` client and OpenAI's Responses (plain,
streamed, input-token count) through the official `openai` client, against a real llama-server,
each booked from its own usage block; a switch (the alias moved) under both clients' streams loses
nothing; an engine that lacks a path answered in that API's own error shape; a bad key on
/v1/messages refused as Anthropic refuses one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anthropic
import httpx
import pytest
from openai import NotFoundError, OpenAI

from hostagent.frontdoor import InferenceKey, KeyTable, RoutingTable, hash_key
from hostagent.frontdoor.apis import Form
from hostagent.frontdoor.usage import ends_stream
from serving.engines.registry import ADAPTERS

from .conftest import DoorThread, make_host, start_door

pytestmark = pytest.mark.engine

KEY = "sk-claude-code-1234567890"
ANTHROPIC_HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
SAY = [{"role": "user", "content": "Count to ten."}]
PLAIN = {"ignore_eos": True}  # llama.cpp's: exactly max_tokens tokens, whatever the model says
LONG = 200  # tokens a stream runs for while the switch comes (seconds on a CPU)


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorThread]:
    host = make_host()
    # A revision whose engine (Ollama: Messages and Responses, neither token count) lacks paths.
    host.add("ollama-like", context=1024, aliases=("local",), engine="Ollama", paths=ADAPTERS["ollama"].api_paths)
    keys = KeyTable((InferenceKey("claude-code", hash_key(KEY), None),))
    door = start_door(host, tmp_path_factory.mktemp("engines"), keys=keys)
    yield door
    door.close()


def usage(door: DoorThread, model: str = "small") -> dict[str, int]:
    rows = httpx.get(f"{door.url}/frontdoor/usage", timeout=10).json()["usage"]
    found = [row for row in rows if row["model"] == model and row["key"] == "claude-code"]
    return found[0] if found else {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "errors": 0}


def booked(door: DoorThread, before: dict[str, int]) -> tuple[int, int, int]:
    """(requests, prompt tokens, completion tokens) booked to `small` since `before`."""
    after = usage(door)
    return tuple(after[k] - before[k] for k in ("requests", "prompt_tokens", "completion_tokens"))  # type: ignore[return-value]


def events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """A server-sent stream's (event, data) pairs, as the SDKs read them."""
    out, name = [], ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            out.append((name, json.loads(line[5:])))
    return out


def claude(door: DoorThread, key: str = KEY) -> anthropic.Anthropic:
    """The official `anthropic` client at the door (it sends the key as `x-api-key`)."""
    return anthropic.Anthropic(base_url=door.url, api_key=key, max_retries=0, timeout=300)


def test_anthropic_messages_by_an_alias_plain_and_streamed_are_booked_from_their_usage(door: DoorThread) -> None:
    client = claude(door)
    before = usage(door)
    message = client.messages.create(model="fast", max_tokens=5, messages=SAY, extra_body=PLAIN)
    assert message.type == "message" and message.content[0].type == "text" and message.content[0].text
    assert message.model == "small"  # the alias was rewritten to the engine's name
    prompt = message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    assert message.usage.output_tokens == 5 and booked(door, before) == (1, prompt, 5)

    before = usage(door)
    with client.messages.stream(model="fast", max_tokens=7, messages=SAY, extra_body=PLAIN) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == 7 and "".join(pieces) == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 7
    prompt = final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0)
    assert booked(door, before) == (1, prompt, 7)

    # `stream` as a lax boolean ("yes"): the door reads it as vLLM does and sends the engine `true`.
    lax = {"model": "fast", "max_tokens": 2, "messages": SAY, "stream": "yes", **PLAIN}
    with httpx.stream("POST", f"{door.url}/v1/messages", json=lax, headers=ANTHROPIC_HEADERS, timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        kinds = [name for name, _ in events(r)]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


def test_count_tokens_answers_without_booking_any(door: DoorThread) -> None:
    before = usage(door)
    counted = claude(door).messages.count_tokens(model="fast", messages=SAY)
    assert counted.input_tokens > 3
    assert booked(door, before) == (1, 0, 0)


def test_openai_responses_by_an_alias_plain_and_streamed_are_booked_from_their_usage(door: DoorThread) -> None:
    client = OpenAI(base_url=f"{door.url}/v1", api_key=KEY, max_retries=0, timeout=300)
    before = usage(door)
    answer = client.responses.create(model="fast", input="Count to ten.", max_output_tokens=4, extra_body=PLAIN)
    assert answer.output_text and answer.model == "small" and answer.usage is not None
    assert answer.usage.output_tokens == 4
    assert booked(door, before) == (1, answer.usage.input_tokens, 4)

    before = usage(door)
    stream = client.responses.create(
        model="fast", input="Count to ten.", max_output_tokens=6, stream=True, extra_body=PLAIN
    )
    seen = list(stream)
    assert sum(1 for event in seen if event.type == "response.output_text.delta") == 6
    completed = seen[-1]
    assert completed.type == "response.completed" and completed.response.usage is not None
    assert booked(door, before) == (1, completed.response.usage.input_tokens, 6)

    counted = httpx.post(
        f"{door.url}/v1/responses/input_tokens", json={"model": "fast", "input": "Count to ten."},
        headers={"Authorization": f"Bearer {KEY}"}, timeout=300,
    )  # fmt: skip
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 3


def test_an_engine_without_the_path_answers_in_that_apis_own_error_shape(door: DoorThread) -> None:
    # `local` is served by Ollama, which has Messages but no token count: Anthropic's shape...
    body = {"model": "local", "messages": SAY}
    refused = httpx.post(f"{door.url}/v1/messages/count_tokens", json=body, headers=ANTHROPIC_HEADERS, timeout=30)
    assert refused.status_code == 404
    assert refused.json() == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "`local` is served by Ollama, which does not serve /v1/messages/count_tokens.",
        },
    }
    # ... and on an OpenAI path, OpenAI's, which its client reads.
    client = OpenAI(base_url=f"{door.url}/v1", api_key=KEY, max_retries=0, timeout=30)
    with pytest.raises(NotFoundError) as missing:
        client.post("/rerank", body={"model": "local", "query": "a", "documents": ["b"]}, cast_to=object)
    assert missing.value.code == "api_not_served" and "does not serve /v1/rerank" in missing.value.message
    assert "ollama-like" not in door.loader.running()  # nothing was loaded for it


def test_a_bad_key_on_messages_gets_anthropics_authentication_error(door: DoorThread) -> None:
    with pytest.raises(anthropic.AuthenticationError) as refused:
        claude(door, "sk-not-a-key-0000000000").messages.create(model="fast", max_tokens=2, messages=SAY)
    assert refused.value.status_code == 401
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "authentication_error" and "x-api-key" in error["error"]["message"]
    # The engine's own refusal of a bad body (OpenAI-shaped from llama-server) reaches an Anthropic
    # client in Anthropic's shape too.
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude(door).messages.create(model="fast", max_tokens="many", messages=SAY)  # type: ignore[arg-type]
    assert isinstance(bad.value.body, dict) and bad.value.body["type"] == "error"
    assert bad.value.body["error"]["type"] == "invalid_request_error"


def test_a_switch_under_both_clients_streams_loses_nothing(door: DoorThread) -> None:
    """`fast` moves from `small` to `wide` while an Anthropic and a Responses stream run on `small`:
    both finish there, whole; the next requests by `fast` reach `wide`; every token is booked."""
    messages, responses = claude(door), OpenAI(base_url=f"{door.url}/v1", api_key=KEY, max_retries=0, timeout=300)
    messages.messages.create(model="fast", max_tokens=1, messages=SAY)  # `small` loaded, whatever ran before
    table = door.table
    before = {name: usage(door, name) for name in ("small", "wide")}
    done: dict[str, tuple[str, int, int]] = {}
    failures: list[BaseException] = []

    def anthropic_stream() -> None:
        try:
            with messages.messages.stream(model="fast", max_tokens=LONG, messages=SAY, extra_body=PLAIN) as stream:
                pieces = sum(1 for _ in stream.text_stream)
                final = stream.get_final_message()
            done["messages"] = (final.model, final.usage.output_tokens, pieces)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failures.append(exc)

    def responses_stream() -> None:
        try:
            seen = list(
                responses.responses.create(
                    model="fast", input="Count to ten.", max_output_tokens=LONG, stream=True, extra_body=PLAIN
                )
            )
            last = seen[-1]
            assert last.type == "response.completed" and last.response.usage is not None
            deltas = sum(1 for event in seen if event.type == "response.output_text.delta")
            done["responses"] = (last.response.model, last.response.usage.output_tokens, deltas)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failures.append(exc)

    threads = [threading.Thread(target=anthropic_stream), threading.Thread(target=responses_stream)]
    for thread in threads:
        thread.start()
    door.wait_for(lambda state: state["small"]["in_flight"] == 2)
    aliases = {"small": (), "wide": ("coder", "fast")}
    door.update_table(RoutingTable(tuple(replace(m, aliases=aliases.get(m.name, m.aliases)) for m in table.models)))
    try:
        assert all(thread.is_alive() for thread in threads)  # the switch came while both streamed
        door.wait_for(lambda state: state["wide"]["phase"] == "loaded", timeout=180)  # the door starts it
        after_switch = messages.messages.create(model="fast", max_tokens=3, messages=SAY, extra_body=PLAIN)
        answer = responses.responses.create(model="fast", input="Hi.", max_output_tokens=3, extra_body=PLAIN)
        for thread in threads:
            thread.join(300)
    finally:
        door.update_table(table)
    assert failures == []
    assert done == {"messages": ("small", LONG, LONG), "responses": ("small", LONG, LONG)}  # where they began
    assert after_switch.model == "wide" and answer.model == "wide"
    small, wide = (usage(door, name) for name in ("small", "wide"))
    assert small["completion_tokens"] - before["small"]["completion_tokens"] == 2 * LONG
    assert wide["completion_tokens"] - before["wide"]["completion_tokens"] == 6
    assert small["errors"] == before["small"]["errors"] and wide["errors"] == before["wide"]["errors"]


def test_a_transcription_form_is_routed_by_its_model_field(door: DoorThread) -> None:
    """Multipart, the model a form field: the door routes it to `small`'s engine, which answers for
    itself (this model has no audio: llama.cpp's 501, passed on)."""
    files = {"file": ("hello.wav", b"RIFF\x00\x00\x00\x00WAVE", "audio/wav")}
    answer = httpx.post(
        f"{door.url}/v1/audio/transcriptions", data={"model": "fast"}, files=files,
        headers={"Authorization": f"Bearer {KEY}"}, timeout=300,
    )  # fmt: skip
    assert answer.status_code == 501 and "audio" in answer.json()["error"]["message"]
    unknown = httpx.post(
        f"{door.url}/v1/audio/transcriptions", data={"model": "nobody"}, files=files,
        headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
    )  # fmt: skip
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_a_forms_model_is_rewritten_and_every_other_byte_kept() -> None:
    request = httpx.Request(
        "POST", "http://door/v1/audio/transcriptions", data={"model": "fast", "language": "en"},
        files={"file": ("a.wav", b"\r\n--not-the-boundary\r\n\x00\xff", "audio/wav")},
    )  # fmt: skip
    body = request.read()
    form = Form(body, request.headers["Content-Type"])
    assert form.get("model") == "fast"
    twin = form.copy()
    twin["model"] = "gemma-3-270m"
    rewritten = twin.encode()
    assert rewritten == body.replace(b"\r\n\r\nfast\r\n", b"\r\n\r\ngemma-3-270m\r\n")
    assert form.encode() == body  # the copy changed, not the original


def test_a_messages_or_responses_streams_end_is_known_and_text_that_names_it_is_not() -> None:
    """The door and the router count a client that hangs up once the end went out as answered."""
    assert ends_stream(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert ends_stream(b'\n\nevent: response.completed\r\ndata: {"type":"response.completed"}')
    said = b'event: content_block_delta\ndata: {"delta":{"text":"\\nevent: message_stop\\n"}}\n\n'
    assert not ends_stream(said) and not ends_stream(b"event: response.completed_soon\n")
