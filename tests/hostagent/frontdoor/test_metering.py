"""Usage that cannot be booked as zero (issue 37): a real front door on loopback in front of a stub
engine that reads a body as vLLM's request model does and streams as vLLM and llama.cpp do.

The stub is an edge we cannot run here (vLLM needs a GPU); it replays what the real engines do:
pydantic's lax bool for `stream` and `stream_options.include_usage` (pydantic-core's
`str_as_bool` / `int_as_bool`, written out here apart from the door's own reading), one token per
content delta, a final finish event, then llama.cpp's separate usage event (`choices: []`, as the
real llama-server in this repository streams it), then `[DONE]`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from hostagent.frontdoor import FrontDoor, FrontDoorSettings, RoutingTable, ServedModel

TOKENS = ("Hel", "lo", ",", " wor", "ld")  # one token per delta
PROMPT_TOKENS = 11
CHAT = "/v1/chat/completions"


def pydantic_bool(value: Any) -> bool:
    """How vLLM's and SGLang's pydantic request models read a `bool` field (lax mode)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        if value == "1" or value.lower() in ("t", "y", "on", "yes", "true") and value.isascii():
            return True
        if value == "0" or value.lower() in ("f", "n", "no", "off", "false") and value.isascii():
            return False
    raise ValueError(f"Input should be a valid boolean: {value!r}")


@dataclass
class Engine:
    """A stub vLLM/llama.cpp: `hold_usage_s` waits between the last content event and the usage
    event; `sends_usage` False plays an engine that sends none."""

    hold_usage_s: float = 0.0
    sends_usage: bool = True
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def chunk(self, **fields: Any) -> bytes:
        event = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": "stub", **fields}
        return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": len(TOKENS), "total_tokens": 16}
        try:
            stream = pydantic_bool(body.get("stream", False)) if body.get("stream") is not None else False
            options = body.get("stream_options") or {}
            include = pydantic_bool(options.get("include_usage", True)) if options else False
        except ValueError as exc:
            return web.json_response({"object": "error", "message": str(exc), "code": 400}, status=400)
        if not stream:
            message = {"role": "assistant", "content": "".join(TOKENS)}
            answer = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}
            return web.json_response(answer)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self.chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": None}}]))
        for token in TOKENS:
            await response.write(self.chunk(choices=[{"index": 0, "delta": {"content": token}}]))
        await response.write(self.chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]))
        if include and self.sends_usage:
            await asyncio.sleep(self.hold_usage_s)
            await response.write(self.chunk(choices=[], usage=usage))
        await response.write(b"data: [DONE]\n\n")
        return response


class Served:
    """The stub engine and a FrontDoor in front of it, in their own event loop and thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        class Ready:  # the engine is up already: a load has nothing to start
            async def load(self, name: str) -> None:
                return None

            async def unload(self, name: str) -> None:
                return None

        async def start() -> tuple[web.AppRunner, FrontDoor]:
            app = web.Application()
            app.router.add_post(CHAT, engine.chat)
            runner = web.AppRunner(app, handler_cancellation=True)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = runner.addresses[0][1]
            table = RoutingTable(
                (ServedModel(name="qwen-r1", upstream=f"http://127.0.0.1:{port}", aliases=("coder",)),)
            )
            door = FrontDoor(table, Ready(), lambda: {"ram": 1 << 40}, FrontDoorSettings(host="127.0.0.1", port=0))
            await door.start()
            return runner, door

        self.runner, self.door = self.call(start())
        self.url = f"http://127.0.0.1:{self.door.port}"

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def booked(self, requests: int = 1, within_s: float = 10.0) -> dict[str, Any]:
        """The door's one usage row once it counts `requests` (its ledger, as the agent reads it)."""
        deadline = time.monotonic() + within_s
        while True:
            rows = httpx.get(f"{self.url}/frontdoor/usage", timeout=5).json()["usage"]
            if rows and rows[0]["requests"] >= requests:
                assert len(rows) == 1, rows
                return dict(rows[0])
            assert time.monotonic() < deadline, f"nothing booked: {rows}"
            time.sleep(0.02)

    def close(self) -> None:
        self.call(self.door.stop())
        self.call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    opened: list[Served] = []

    def open_(**engine: Any) -> Served:
        opened.append(Served(Engine(**engine)))
        return opened[-1]

    yield open_
    for served in opened:
        served.close()


def ask(url: str, **fields: Any) -> httpx.Response:
    body = {"model": "coder", "messages": [{"role": "user", "content": "hi"}], **fields}
    return httpx.post(url + CHAT, json=body, timeout=10)


@pytest.mark.parametrize("stream", ["true", "1", 1, 1.0, "yes", "On", "T", "y", "TRUE"])
def test_a_stream_asked_for_with_a_string_or_number_is_metered(serve, stream):
    """The attack: `"stream": "true"` (or 1, "yes", ...) through the door. vLLM and SGLang read it
    as true and stream; the door read only JSON `true` as a stream, passed the body on as it was
    and booked the stream at zero tokens. Now the door reads it as they do, the engine gets a real
    `true`, and the tokens are booked."""
    served = serve()
    answer = ask(served.url, stream=stream)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    events = [line for line in answer.text.splitlines() if line.startswith("data: {")]
    assert "".join(json.loads(e[6:])["choices"][0]["delta"].get("content") or "" for e in events) == "Hello, world"
    assert all('"usage"' not in e for e in events)  # the client did not ask for the usage event
    row = served.booked()
    assert (row["prompt_tokens"], row["completion_tokens"], row["errors"]) == (PROMPT_TOKENS, len(TOKENS), 0)
    sent = served.engine.bodies[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("stream", ["false", "0", 0, "no", "OFF", "f", None])
def test_a_non_stream_asked_for_with_a_string_or_number_is_one_metered_answer(serve, stream):
    served = serve()
    answer = ask(served.url, stream=stream)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "Hello, world"
    row = served.booked()
    assert (row["prompt_tokens"], row["completion_tokens"]) == (PROMPT_TOKENS, len(TOKENS))
    assert served.engine.bodies[0]["stream"] is False


def test_include_usage_false_as_a_string_still_gets_the_usage_metered(serve):
    """`stream_options.include_usage: "false"` was truthy to the door (so it did not ask for usage)
    and false to vLLM (so none came)."""
    served = serve()
    answer = ask(served.url, stream=True, stream_options={"include_usage": "false"})
    assert answer.status_code == 200 and '"usage"' not in answer.text
    assert served.booked()["completion_tokens"] == len(TOKENS)
    assert served.engine.bodies[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": "maybe"}, "stream"),
        ({"stream": 2}, "stream"),
        ({"stream": 0.5}, "stream"),
        ({"stream": ""}, "stream"),
        ({"stream": " true"}, "stream"),
        ({"stream": "truee"}, "stream"),
        ({"stream": ["true"]}, "stream"),
        ({"stream": {"on": True}}, "stream"),
        ({"stream": "\u212a"}, "stream"),  # KELVIN SIGN: lower() makes it "k", pydantic refuses it
        ({"stream": True, "stream_options": {"include_usage": "sometimes"}}, "stream_options.include_usage"),
    ],
)
def test_a_stream_flag_no_engine_reads_as_a_boolean_is_refused_with_400(serve, fields, param):
    served = serve()
    answer = ask(served.url, **fields)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == param and error["code"] == "invalid_value" and "must be true or false" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert served.engine.bodies == []  # nothing reached the engine
    assert httpx.get(f"{served.url}/frontdoor/usage", timeout=5).json()["usage"] == []


def test_a_client_that_hangs_up_before_the_usage_event_is_booked_the_tokens_it_was_sent(serve):
    """The attack: read every content event and hang up before llama.cpp's separate usage event
    (here held back 5 s). The door books the content deltas it passed on, one token each."""
    served = serve(hold_usage_s=5.0)
    started = time.monotonic()
    body = {"model": "coder", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.Client(timeout=10) as client, client.stream("POST", served.url + CHAT, json=body) as answer:
        for line in answer.iter_lines():
            if '"finish_reason":"stop"' in line:
                break  # the whole text is here: hang up
    row = served.booked()
    assert time.monotonic() - started < 5.0  # booked at the hang-up, not from a usage event
    assert row["completion_tokens"] == len(TOKENS)
    assert row["prompt_tokens"] == 0  # unknown: the engine says it only in the usage event
    assert row["errors"] == 1  # the stream did not reach its end


def test_an_engine_that_sends_no_usage_is_booked_the_deltas_it_streamed(serve):
    served = serve(sends_usage=False)
    answer = ask(served.url, stream=True)
    assert answer.status_code == 200 and answer.text.rstrip().endswith("data: [DONE]")
    row = served.booked()
    assert (row["completion_tokens"], row["errors"]) == (len(TOKENS), 0)


def test_stream_flags_read_as_pydantic_reads_them() -> None:
    """The door's reading and the stub's (pydantic's, written apart) agree on every value tried."""
    from hostagent.frontdoor.flags import FlagError, lax_bool

    values: list[Any] = [True, False, 0, 1, 2, -1, 0.0, 1.0, 1.5, None, [], {}, "", " ", "\u212a", "İ"]
    values += [w for word in ("true", "false", "yes", "no", "on", "off", "t", "f", "y", "n", "1", "0") for w in
               (word, word.upper(), word.title(), f" {word}", f"{word}\n")]  # fmt: skip
    values += ["01", "1.0", "tru", "yess", "nope", "enabled"]
    for value in values:
        try:
            expected: bool | None = pydantic_bool(value)
        except ValueError:
            expected = None
        try:
            got: bool | None = lax_bool(value, "stream")
        except FlagError:
            got = None
        assert got is expected, value
