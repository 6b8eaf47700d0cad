"""Every API an engine serves, through one front door by an alias: Anthropic's Messages (plain,
streamed, count_tokens) and OpenAI's Responses (plain, streamed, input-token count) against a real
llama-server, each booked from its own usage block; an engine that lacks a path answered in that
API's own error shape; a bad key on /v1/messages refused as Anthropic refuses one.

The `anthropic` SDK is not installed in the suite's environment, so Messages are sent as its
client sends them (httpx, `x-api-key`, `anthropic-version`) and read as it reads them; Responses go
through the official `openai` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import NotFoundError, OpenAI

from hostagent.frontdoor import InferenceKey, KeyTable, hash_key
from hostagent.frontdoor.apis import Form
from hostagent.frontdoor.usage import ends_stream
from serving.engines.registry import ADAPTERS

from .conftest import DoorThread, make_host, start_door

pytestmark = pytest.mark.engine

KEY = "sk-claude-code-1234567890"
ANTHROPIC_HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
SAY = [{"role": "user", "content": "Count to ten."}]
PLAIN = {"ignore_eos": True}  # llama.cpp's: exactly max_tokens tokens, whatever the model says


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


def test_anthropic_messages_by_an_alias_plain_and_streamed_are_booked_from_their_usage(door: DoorThread) -> None:
    before = usage(door)
    body = {"model": "fast", "max_tokens": 5, "messages": SAY, **PLAIN}
    plain = httpx.post(f"{door.url}/v1/messages", json=body, headers=ANTHROPIC_HEADERS, timeout=300)
    assert plain.status_code == 200, plain.text
    message = plain.json()
    assert message["type"] == "message" and message["content"][0]["type"] == "text"
    assert message["model"] == "small"  # the alias was rewritten to the engine's name
    spent = message["usage"]
    prompt = spent["input_tokens"] + spent.get("cache_read_input_tokens", 0)
    assert spent["output_tokens"] == 5 and booked(door, before) == (1, prompt, 5)

    # Streamed, with `stream` as a lax boolean ("yes": the door reads it as vLLM does and sends `true`).
    before = usage(door)
    streamed = {**body, "max_tokens": 7, "stream": "yes"}
    with httpx.stream("POST", f"{door.url}/v1/messages", json=streamed, headers=ANTHROPIC_HEADERS, timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        seen = events(r)
    kinds = [name for name, _ in seen]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert sum(1 for name, data in seen if name == "content_block_delta" and data["delta"].get("text")) == 7
    start = seen[0][1]["message"]["usage"]
    output = next(data["usage"]["output_tokens"] for name, data in seen if name == "message_delta")
    assert output == 7
    assert booked(door, before) == (1, start["input_tokens"] + start.get("cache_read_input_tokens", 0), 7)


def test_count_tokens_answers_without_booking_any(door: DoorThread) -> None:
    before = usage(door)
    body = {"model": "fast", "messages": SAY}
    counted = httpx.post(f"{door.url}/v1/messages/count_tokens", json=body, headers=ANTHROPIC_HEADERS, timeout=300)
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 3
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
    body = {"model": "fast", "max_tokens": 2, "messages": SAY}
    wrong = {**ANTHROPIC_HEADERS, "x-api-key": "sk-not-a-key-0000000000"}
    refused = httpx.post(f"{door.url}/v1/messages", json=body, headers=wrong, timeout=30)
    assert refused.status_code == 401
    error = refused.json()
    assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
    assert "x-api-key" in error["error"]["message"]
    # The engine's own refusal of a bad body (OpenAI-shaped from llama-server) reaches an Anthropic
    # client in Anthropic's shape too.
    bad = httpx.post(
        f"{door.url}/v1/messages", json={**body, "max_tokens": "many"}, headers=ANTHROPIC_HEADERS, timeout=300
    )
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert bad.json()["type"] == "error"


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
