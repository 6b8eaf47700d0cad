"""A request that reaches the host's pinned engine while it starts again: the watchdog restarts a
crashed engine on the same port, and a real llama-server answers every path "503 Loading model"
from the moment it listens until its model is loaded. The door used to pass that 503 to the client
(seen in the suite, `test_agent_door.py`'s watchdog test, on a loaded machine); it now waits for
the engine as for an engine that refused the connection, and the client gets its answer. Any other
503 (SGLang's full queue) is the client's answer, and the engine is left alone."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from hostagent.frontdoor import Mode, ServedModel

from .conftest import ENGINE_KEY, Host, start_door


class PinnedLoader:
    """The agent's loader for the host's pinned engine (hostagent/door/loader.py): the engine is the
    host supervisor's (here: the test's), a load waits for its health, an unload stops nothing."""

    def __init__(self, health: str) -> None:
        self.health = health
        self.loads = self.unloads = 0

    async def load(self, name: str) -> None:
        self.loads += 1
        deadline = time.monotonic() + 120
        async with httpx.AsyncClient(timeout=2) as client:
            while time.monotonic() < deadline:
                try:
                    if (await client.get(self.health)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError(f"{name} did not come up")

    async def unload(self, name: str) -> None:
        self.unloads += 1


@pytest.fixture
def engine(host: Host, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The pinned `small` engine, started as the host's supervisor would; the list holds each start."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def start(host: Host, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(list(host.commands["small"].argv), stdout=out, stderr=subprocess.STDOUT)


def health(host: Host) -> httpx.Response | None:
    try:
        return httpx.get(host.engine_url("small") + "/health", timeout=1)
    except httpx.HTTPError:
        return None


@pytest.mark.engine
def test_a_request_while_the_pinned_engine_loads_again_waits_for_it(host: Host, engine, tmp_path: Path) -> None:
    host.models["small"] = replace(host.models["small"], mode=Mode.PINNED)
    log = tmp_path / "engine.log"
    engine.append(start(host, log))
    loader = PinnedLoader(host.engine_url("small") + "/health")
    door = start_door(host, tmp_path, wrap=lambda _process_loader: loader)
    try:
        body = {"model": "fast", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        first = httpx.post(f"{door.url}/v1/chat/completions", json=body, timeout=120)
        assert first.status_code == 200, first.text
        assert loader.loads == 1

        # The engine crashes; the supervisor's watchdog starts it again on the same port.
        engine[-1].send_signal(signal.SIGKILL)
        engine[-1].wait()
        engine.append(start(host, log))
        deadline = time.monotonic() + 30
        while (answer := health(host)) is None or answer.status_code != 503:  # listening, loading its model
            assert answer is None or answer.status_code != 200, "the engine loaded before the request could be sent"
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.005)
        assert "Loading model" in answer.text

        during = httpx.post(f"{door.url}/v1/chat/completions", json=body, timeout=120)
        assert during.status_code == 200, during.text  # was: 503 "Loading model", the engine's own
        assert during.json()["choices"][0]["message"]["content"]
        assert loader.loads == 2  # the door waited for it, as for a load
        assert ENGINE_KEY not in during.text
    finally:
        door.close()


# SGLang's answer when its waiting queue is full (srt/managers/scheduler.py _abort_on_queued_limit: an
# abort with 503), in the shape of its OpenAI errors (srt/entrypoints/openai/serving_base.py
# create_error_response). A stub: SGLang needs a GPU; this is the edge the door meets.
QUEUE_FULL = {"object": "error", "message": "The request queue is full.", "type": "SERVICE_UNAVAILABLE", "code": 503}


@pytest.fixture
def busy_engine() -> Iterator[tuple[str, list[str]]]:
    """An engine on loopback that answers every chat with SGLang's queue-full 503; (url, paths asked)."""
    asked: list[str] = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def chat(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.json_response(QUEUE_FULL, status=503)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/health", health)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    runner = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", asked
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_an_engines_full_queue_is_the_clients_answer_and_the_engine_is_left_alone(
    host: Host, busy_engine: tuple[str, list[str]], tmp_path: Path
) -> None:
    """An on-demand engine the door loaded answers 503 for its full queue: the client gets that
    answer at once, asked once, and the door stops nothing (a 503 taken for "gone" would have
    stopped the engine, cutting every stream through it, and loaded it again)."""
    url, asked = busy_engine
    host.models = {"busy": ServedModel(name="busy", upstream=url, aliases=("fast",), memory={"ram": 1 << 20})}
    loader = PinnedLoader(url + "/health")
    door = start_door(host, tmp_path, wrap=lambda _process_loader: loader)
    try:
        body = {"model": "fast", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        answer = httpx.post(f"{door.url}/v1/chat/completions", json=body, timeout=30)
        assert answer.status_code == 503 and "The request queue is full." in answer.text
        assert asked == ["/v1/chat/completions"]
        assert (loader.loads, loader.unloads) == (1, 0)
    finally:
        door.close()
