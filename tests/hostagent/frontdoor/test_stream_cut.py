"""A stream cut mid-answer is a failure the client sees, never a short clean 200 (issue 39).

Before, when an engine, a door or an agent died mid-stream, the door and the lab router ended the
response as a whole one (chunked encoding's last chunk, no `[DONE]`, no error): curl exited 0,
the official `openai` client raised nothing and handed over a truncated answer (`finish_reason`
None), and the router counted a 200. Now the client gets an OpenAI error event in the stream
(`upstream_stream_cut`, on which the `openai` client raises APIError), then the connection closes
with the body unfinished (curl exits 18, httpx raises), and the door and the router each count it
as a 502 and a stream cut.

All real: the front door in its own process (`python -m hostagent.frontdoor`), its engines real
processes it starts (tests/support/slot_engine.py; `dying` exits after its third token, as a
crashed engine does), the lab router in front of it in its own event loop, and real clients
(curl, the `openai` client, httpx). A door killed mid-stream is killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import pytest
from openai import APIError, OpenAI
from openai.types.chat import ChatCompletionMessageParam

from bench.bench_frontdoor import FrontDoorProcess, entry, front_door, metric
from hostagent.frontdoor.proxy import chunks
from labrouter.app import Router
from serving.lab_routes import Door, LabRoutes
from tests.support.llama import free_port
from tests.support.slot_engine import command

from .conftest import DoorThread, Host

ASK = [{"role": "user", "content": "Say hello."}]
CURL = shutil.which("curl")


@dataclass
class Lab:
    door: FrontDoorProcess
    router: str  # the lab router's root URL, in front of the door as host `lab-a`


ENGINES = {  # name -> slot_engine options
    "steady": {"token_s": 0.01},
    "dying": {"token_s": 0.01, "die_after": 3},  # exits after its third token, mid-answer
    "slow": {"token_s": 0.2},  # a stream long enough to kill its door in the middle of
}


@contextlib.contextmanager
def lab_router(door: str, labels: dict[str, str] | None = None) -> Iterator[str]:
    """The lab router, in its own event loop, whose route table has the door at `door` as host
    `lab-a`, serving `labels` (by default the ENGINES)."""
    labels = labels if labels is not None else {name: name for name in ENGINES}
    table = LabRoutes((Door(host="lab-a", url=door, labels=labels),))

    async def read() -> LabRoutes:
        return table

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    router = Router(read, port=0, refresh_s=5.0)
    asyncio.run_coroutine_threadsafe(router.start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{router.port}"
    finally:
        asyncio.run_coroutine_threadsafe(router.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


@pytest.fixture
def lab() -> Iterator[Lab]:
    ports = {name: free_port() for name in ENGINES}
    models = [entry(name, port) for name, port in ports.items()]
    argvs = {name: list(command(ports[name], **options)) for name, options in ENGINES.items()}  # type: ignore[arg-type]
    with front_door(models, argvs, 64 << 30) as door, lab_router(door.url) as router:
        yield Lab(door, router)


def chat(model: str, tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": ASK, "max_tokens": tokens, "stream": True}


def curl(url: str, model: str, tokens: int = 20) -> subprocess.CompletedProcess[str]:
    assert CURL is not None
    argv = [CURL, "-sN", "-X", "POST", f"{url}/v1/chat/completions", "-H", "Content-Type: application/json"]
    argv += ["-d", json.dumps(chat(model, tokens))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603


def events(text: str) -> list[Any]:
    """The data of each event of a stream, JSON decoded ([DONE] as the string)."""
    lines = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def openai_reads(
    url: str, model: str, *, tokens: int = 20, then: Callable[[], None] | None = None
) -> tuple[str, list[str | None], APIError | None]:
    """Iterate a stream with the official client: (the text, the finish reasons, what it raised);
    `then()` runs once the first text arrived."""
    client = OpenAI(base_url=f"{url}/v1", api_key="no-key", max_retries=0, timeout=30)
    text, raised = "", None
    finish: list[str | None] = []
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
    try:
        stream = client.chat.completions.create(model=model, messages=messages, max_tokens=tokens, stream=True)
        for chunk in stream:
            for choice in chunk.choices:
                if then is not None and choice.delta.content and not text:
                    then()
                text += choice.delta.content or ""
                finish.append(choice.finish_reason)
    except APIError as error:
        raised = error
    return text, finish, raised


def raw_read_fails(url: str, model: str) -> bool:
    """A client that reads bytes, not events (httpx): the body ends unfinished."""
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=chat(model, 20), timeout=30) as answer:
        assert answer.status_code == 200
        try:
            for _ in answer.iter_bytes():
                pass
        except httpx.RemoteProtocolError:
            return True
    return False


def cut_event(stream: list[Any]) -> dict[str, Any]:
    assert "[DONE]" not in stream, stream
    assert isinstance(stream[-1], dict) and "error" in stream[-1], stream
    error: dict[str, Any] = stream[-1]["error"]
    assert error["code"] == "upstream_stream_cut" and error["type"] == "server_error"
    return error


@pytest.mark.skipif(CURL is None, reason="no curl on this machine")
@pytest.mark.parametrize("via", ["door", "router"])
def test_an_engine_that_dies_mid_stream_is_a_failure_at_every_client_and_counted_so(lab: Lab, via: str) -> None:
    url = lab.door.url if via == "door" else lab.router
    # curl: the three tokens, the error event, no [DONE], and exit 18 (transfer closed with
    # outstanding read data remaining), where it used to exit 0.
    shown = curl(url, "dying")
    assert shown.returncode == 18, (shown.returncode, shown.stdout, shown.stderr)
    stream = events(shown.stdout)
    assert [e["choices"][0]["delta"]["content"] for e in stream[:-1]] == ["x", "x", "x"]
    error = cut_event(stream)
    assert "`dying` broke off this answer before its end" in error["message"]  # the door's, passed on

    # The official client raises while it iterates (it used to hand over "xxx", finish_reason None).
    text, finish, raised = openai_reads(url, "dying")
    assert text == "xxx" and finish == [None, None, None]
    assert isinstance(raised, APIError) and raised.code == "upstream_stream_cut"
    assert "incomplete" in raised.message

    # A client that reads no events at all still fails: the body never ends.
    assert raw_read_fails(url, "dying")

    # Counted the same at the door and at the router: a 502 and a cut stream, never a 200.
    assert lab.door.metric("frontdoor_streams_cut_total", model="dying", alias="dying") == 3
    assert lab.door.metric("frontdoor_requests_total", model="dying", code="502") == 3
    assert lab.door.metric("frontdoor_requests_total", model="dying", code="200") == 0
    routed = 3 if via == "router" else 0
    assert metric(lab.router, "router_streams_cut_total", host="lab-a", model="dying", alias="dying") == routed
    assert metric(lab.router, "router_requests_total", host="lab-a", alias="dying", code="502") == routed
    assert metric(lab.router, "router_requests_total", alias="dying", code="200") == 0


@pytest.mark.skipif(CURL is None, reason="no curl on this machine")
@pytest.mark.parametrize("via", ["door", "router"])
def test_a_whole_stream_still_ends_with_done_and_a_clean_end(lab: Lab, via: str) -> None:
    url = lab.door.url if via == "door" else lab.router
    shown = curl(url, "steady", 5)
    assert shown.returncode == 0, (shown.returncode, shown.stderr)
    stream = events(shown.stdout)
    assert stream[-1] == "[DONE]" and not any(isinstance(e, dict) and "error" in e for e in stream)
    assert shown.stdout.endswith("data: [DONE]\n\n")

    text, finish, raised = openai_reads(url, "steady", tokens=5)
    assert raised is None and text == "xxxxx" and finish[-1] == "length"
    assert not raw_read_fails(url, "steady")

    assert lab.door.metric("frontdoor_requests_total", model="steady", code="200") == 3
    assert lab.door.metric("frontdoor_streams_cut_total") == 0
    assert metric(lab.router, "router_requests_total", alias="steady", code="200") == (3 if via == "router" else 0)
    assert metric(lab.router, "router_streams_cut_total") == 0


def test_a_door_killed_mid_stream_is_a_failure_at_the_routers_client(lab: Lab) -> None:
    killed: list[int] = []

    def kill_the_door() -> None:
        engine = lab.door.engine_pid("slow")
        lab.door.proc.send_signal(signal.SIGKILL)  # the door (or the agent it runs in) dies
        lab.door.proc.wait(10)
        os.kill(engine, signal.SIGKILL)  # its engine, left behind, with it
        killed.append(engine)

    text, finish, raised = openai_reads(lab.router, "slow", tokens=50, then=kill_the_door)
    assert killed and 1 <= len(text) < 50 and None in finish and "length" not in finish
    assert isinstance(raised, APIError) and raised.code == "upstream_stream_cut"
    assert "lab-a's front door broke off this answer before its end" in raised.message
    assert metric(lab.router, "router_streams_cut_total", host="lab-a", alias="slow") == 1
    assert metric(lab.router, "router_requests_total", host="lab-a", alias="slow", code="502") == 1
    assert metric(lab.router, "router_requests_total", alias="slow", code="200") == 0


def named_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """A Messages or Responses stream's events: (the event's name, its data)."""
    found = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines and "data" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


@pytest.mark.parametrize("via", ["door", "router"])
def test_an_anthropic_stream_cut_mid_answer_ends_with_anthropics_error_event_unfinished(lab: Lab, via: str) -> None:
    """Claude Code and the `anthropic` SDK read Messages' own error event (`event: error`), not
    OpenAI's `data: {"error": ...}`, which they would skip as an unknown event."""
    url = lab.door.url if via == "door" else lab.router
    body = {"model": "dying", "max_tokens": 20, "messages": ASK, "stream": True}
    text, unfinished = "", False
    with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=30) as answer:
        assert answer.status_code == 200
        try:
            for piece in answer.iter_text():
                text += piece
        except httpx.RemoteProtocolError:
            unfinished = True
    assert unfinished, text  # the body never ends: a client that reads no events fails too
    stream = named_events(text)
    deltas = [data["delta"]["text"] for name, data in stream if name == "content_block_delta"]
    assert deltas == ["x", "x", "x"]
    assert "message_stop" not in [name for name, _ in stream]
    name, error = stream[-1]
    assert name == "error" and error["type"] == "error", stream[-1]
    assert error["error"]["type"] == "api_error"
    assert "`dying` broke off this answer before its end: it is incomplete" in error["error"]["message"]
    assert [n for n, _ in stream].count("error") == 1  # the door's, passed on by the router: one
    assert lab.door.metric("frontdoor_streams_cut_total", model="dying", alias="dying") == 1
    if via == "router":
        assert metric(lab.router, "router_streams_cut_total", host="lab-a", model="dying", alias="dying") == 1


@pytest.mark.parametrize("via", ["door", "router"])
def test_a_responses_stream_cut_mid_answer_raises_in_the_openai_client(lab: Lab, via: str) -> None:
    """Codex and the `openai` client read the Responses API's own error event; the client hands it
    over as the last event, numbered after the engine's, then raises on the unfinished body."""
    url = lab.door.url if via == "door" else lab.router
    client = OpenAI(base_url=f"{url}/v1", api_key="no-key", max_retries=0, timeout=30)
    got: list[Any] = []
    with pytest.raises(APIError):
        for event in client.responses.create(model="dying", input="Say hello.", max_output_tokens=20, stream=True):
            got.append(event)
    kinds = [event.type for event in got]
    assert kinds == ["response.created"] + ["response.output_text.delta"] * 3 + ["error"], kinds
    error = got[-1]
    assert error.code == "upstream_stream_cut" and error.sequence_number == 4
    assert "`dying` broke off this answer before its end: it is incomplete" in error.message
    assert "response.completed" not in kinds
    assert lab.door.metric("frontdoor_streams_cut_total", model="dying", alias="dying") == 1
    if via == "router":
        assert metric(lab.router, "router_streams_cut_total", host="lab-a", model="dying", alias="dying") == 1


TOKEN = {"object": "chat.completion.chunk", "model": "coder", "choices": [{"index": 0, "delta": {"content": "x"}}]}
DOOR_CUT = {
    "error": {
        "message": "The engine serving `coder` broke off this answer before its end: it is incomplete.",
        "type": "server_error", "param": None, "code": "upstream_stream_cut",
    }
}  # fmt: skip


@contextlib.contextmanager
def door_whose_last_event_comes_with_its_close() -> Iterator[str]:
    """A front door's bytes at their worst timing, which a real door meets now and then: two
    tokens and the door's error event, as the door writes a cut stream, sent in one write with the
    connection's close (the body unfinished), so the router reads them together with the break
    (aiohttp's reads raise at a break and drop what came with it). A plain socket server: an
    aiohttp one cannot send its last bytes and its close in one segment."""
    events = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (TOKEN, TOKEN, DOOR_CUT))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = head + f"{len(events):x}\r\n".encode() + events + b"\r\n"  # no last, empty chunk
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(65536)
                head_end = request.index(b"\r\n\r\n") + 4
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in request[:head_end].split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                while len(request) < head_end + length:  # the whole request read: the close is a FIN
                    request += conn.recv(65536)
                conn.sendall(answer)
                conn.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        thread.join(5)


def test_the_doors_error_event_reaches_the_client_even_when_it_comes_with_the_doors_close() -> None:
    with door_whose_last_event_comes_with_its_close() as door, lab_router(door, {"coder": "coder"}) as router:
        for _ in range(3):
            text, _finish, raised = openai_reads(router, "coder")
            assert text == "xx" and isinstance(raised, APIError) and raised.code == "upstream_stream_cut"
            assert "The engine serving `coder` broke off" in raised.message  # the door's reason, not lost
        if CURL is not None:
            shown = curl(router, "coder")
            assert shown.returncode == 18
            stream = events(shown.stdout)
            assert len(stream) == 3 and cut_event(stream) == DOOR_CUT["error"]  # one error event, the door's
        assert metric(router, "router_streams_cut_total", host="lab-a", alias="coder") == 3 + (CURL is not None)


def test_what_came_with_the_break_is_read_before_the_break() -> None:
    """The door and the router read upstreams through proxy.chunks: when the last events and the
    close are both in before the next read (the reader was busy writing to a slow client), aiohttp
    raises at once and drops them; chunks() hands them over first, then raises."""

    async def read(url: str) -> tuple[list[bytes], BaseException | None]:
        got: list[bytes] = []
        async with aiohttp.ClientSession() as session:
            upstream = await session.post(f"{url}/v1/chat/completions", json=chat("coder", 2))
            await asyncio.sleep(0.3)  # busy elsewhere: the events and the close both arrive meanwhile
            try:
                async for chunk in chunks(upstream):
                    got.append(chunk)
            except aiohttp.ClientPayloadError as exc:
                return got, exc
        return got, None

    with door_whose_last_event_comes_with_its_close() as door:
        got, broke = asyncio.run(read(door))
    assert broke is not None
    stream = events(b"".join(got).decode())
    assert stream == [TOKEN, TOKEN, DOOR_CUT]


@pytest.mark.engine
def test_a_real_llama_server_killed_mid_stream_is_an_error_at_the_client(
    host: Host, open_door: Callable[..., DoorThread]
) -> None:
    door = open_door()

    def kill_the_engine() -> None:
        pid = door.loader.pid("small")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)

    text, finish, raised = openai_reads(door.url, "small", tokens=400, then=kill_the_engine)
    assert text and "stop" not in finish and "length" not in finish
    assert isinstance(raised, APIError) and raised.code == "upstream_stream_cut"
    assert "`small` broke off this answer before its end" in raised.message
    assert door.metric("frontdoor_streams_cut_total", model="small", alias="small") == 1
    assert door.metric("frontdoor_requests_total", model="small", alias="small", key="",
                       endpoint="/v1/chat/completions", code="502") == 1  # fmt: skip
