"""Swaps on a host with room for one, as the issue measured them (issue 39): the door against the
stand-in engines of tests/support/slot_engine.py (real processes, started and stopped by the door's
own ProcessLoader), and an engine that drops pooled connections.

- Two teams of clients, one per model, room for one: the loaded model keeps answering its own
  clients' new requests while the other model waits its turn, so it swaps once per batch, not once
  per request as when it drained at once (the behaviour measured: a request that arrived during a
  drain waited a whole swap cycle).
- It never starves the other model: with its own clients sending without pause, the loaded model
  hands over after its turn (`turn_s`), and the waiting request is answered.
- Room on a CPU host counts cores: two engines of 2 threads each never run side by side on 2 cores.
- A retry after a pooled connection broke goes out on a fresh connection, at the door and at the lab router (the 502
  `upstream_unavailable` with both models loaded).
- Each swap's timeline is in /metrics, phase by phase, the loader's spawn and health wait within the start.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from hostagent.frontdoor import Mode, ServedModel
from hostagent.frontdoor.launcher import Command
from tests.support.llama import free_port
from tests.support.slot_engine import command

from .conftest import PLANNED, DoorThread, Host, start_door
from .test_stream_cut import lab_router

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Say hello."}]


def engines(threads: int | None = None, **options: Any) -> Host:
    """Models `a` and `b`, each a stand-in engine planned at PLANNED bytes (and `threads`)."""
    host = Host(budget=PLANNED)  # room for one
    for name in ("a", "b"):
        port = free_port()
        host.commands[name] = Command(command(port, **options), f"http://127.0.0.1:{port}/health")
        host.models[name] = ServedModel(
            name=name, upstream=f"http://127.0.0.1:{port}", memory={"ram": PLANNED}, threads=threads
        )
    return host


@pytest.fixture
def doors(tmp_path: Path) -> Iterator[Callable[..., DoorThread]]:
    opened: list[DoorThread] = []

    def open_(host: Host, **settings: Any) -> DoorThread:
        settings = {"key_inflight_max": 0, "key_queue_share": 1.0, **settings}
        door = start_door(host, tmp_path, None, settings.pop("wrap", None), **settings)
        opened.append(door)
        return door

    yield open_
    for door in opened:
        if not door.loop.is_closed():  # a test may close one itself
            door.close()


def ask(door: DoorThread, model: str, tokens: int = 4) -> httpx.Response:
    body = {"model": model, "messages": ASK, "max_tokens": tokens}
    return httpx.post(door.url + CHAT, json=body, timeout=60)


def teams(door: DoorThread, clients: int, requests: int) -> list[httpx.Response]:
    """`clients` threads for each of a and b, each sending `requests` requests one after another."""
    answers: list[httpx.Response] = []

    def client(model: str) -> None:
        for _ in range(requests):
            answers.append(ask(door, model, tokens=10))

    threads = [threading.Thread(target=client, args=(m,)) for m in ("a", "b") for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return answers


def loads(door: DoorThread) -> float:
    return sum(door.metric("frontdoor_loads_total", model=m, result="ok") for m in ("a", "b"))


def test_two_teams_of_clients_swap_once_per_batch_not_once_per_request(doors: Callable[..., DoorThread]) -> None:
    """Three clients of a and three of b, four requests each back to back, room for one."""
    # Each request 10 tokens of 20 ms; each start about 0.3 s (a python process) + 0.2 s "Loading model".
    at_once = doors(engines(slots=8, token_s=0.02, ready_after=0.2), turn_s=0)  # the behaviour measured
    answers = teams(at_once, clients=3, requests=4)
    assert [a.status_code for a in answers] == [200] * 24
    drained_at_once = loads(at_once)
    at_once.close()
    # Draining at once, a's clients' next requests wait for a whole swap cycle each round.
    assert drained_at_once >= 5

    door = doors(engines(slots=8, token_s=0.02, ready_after=0.2), turn_s=5, turn_linger_s=0.5)
    answers = teams(door, clients=3, requests=4)
    assert [a.status_code for a in answers] == [200] * 24
    # a answers its clients' requests as they come while b waits its turn (4 x 0.2 s < 5 s): a then b
    # where clients come back at once; on this shared machine a client may come back later than the
    # linger, which costs a swap, never the 8 of draining at once.
    assert loads(door) <= 5 and loads(door) < drained_at_once, (loads(door), drained_at_once)
    assert len(door.loader.running()) == 1
    # The timeline: each swap's phases are in /metrics.
    for phase in ("turn", "drain", "stop", "release", "start", "spawn", "health", "first_token"):
        assert sum(door.metric("frontdoor_swap_phase_seconds_count", model=m, phase=phase) for m in "ab") >= 1, phase
    # The loader's own phases are the start's: its spawn and its health wait add up to no more than it.
    for m in "ab":
        start = door.metric("frontdoor_swap_phase_seconds_sum", model=m, phase="start")
        inside = sum(door.metric("frontdoor_swap_phase_seconds_sum", model=m, phase=p) for p in ("spawn", "health"))
        assert 0 < inside <= start, (m, inside, start)


def test_the_loaded_model_hands_over_after_its_turn_however_busy(doors: Callable[..., DoorThread]) -> None:
    door = doors(engines(slots=4, token_s=0.02), turn_s=1.0, turn_linger_s=0.5)  # its clients come back
    assert ask(door, "a").status_code == 200  # a is loaded
    stop = threading.Event()
    served_a: list[float] = []

    def busy_a() -> None:  # a's own clients, without pause
        while not stop.is_set():
            assert ask(door, "a", tokens=10).status_code == 200
            served_a.append(time.monotonic())

    clients = [threading.Thread(target=busy_a) for _ in range(3)]
    for thread in clients:
        thread.start()
    try:
        time.sleep(0.5)
        asked = time.monotonic()
        b = ask(door, "b")
        took = time.monotonic() - asked
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=60)
    assert b.status_code == 200
    # a kept answering its own requests during its turn (not refused into a swap cycle) ...
    assert any(asked < t < asked + 0.9 for t in served_a)
    # ... and handed over once its turn was up: b waited its turn, the drain and a start, no more.
    wait = int(b.headers["X-Queue-Wait-Ms"]) / 1000
    assert 0.8 < wait < 1.0 + 5.0, wait
    assert took < 8.0
    assert door.metric("frontdoor_unloads_total", model="a", reason="room") == 1


def test_two_cpu_engines_never_share_the_cores_each_thinks_are_its_own(doors: Callable[..., DoorThread]) -> None:
    host = engines(threads=2, slots=2, token_s=0.01)
    host.budget = 2 * PLANNED  # memory for both
    door = doors(host, cores=2)  # but 2 cores: one engine of 2 threads at a time
    assert ask(door, "a").status_code == 200
    assert ask(door, "b").status_code == 200
    assert door.loader.running() == {"b"}
    assert door.metric("frontdoor_unloads_total", model="a", reason="room") == 1
    door.close()

    roomy = doors(engines(threads=2, slots=2, token_s=0.01), cores=4)
    roomy.host.budget = 2 * PLANNED
    assert ask(roomy, "a").status_code == 200
    assert ask(roomy, "b").status_code == 200
    assert roomy.loader.running() == {"a", "b"}  # 4 cores: side by side


def test_an_engine_with_more_threads_than_the_hosts_cores_loads_alone(doors: Callable[..., DoorThread]) -> None:
    """The panel counts a CPU engine left at its default threads as every core of its host (and an
    operator may give -t above them): such an engine takes the whole host, never fails to fit it."""
    host = engines(threads=16, slots=2, token_s=0.01)
    host.budget = 2 * PLANNED
    door = doors(host, cores=2)
    assert ask(door, "a").status_code == 200
    assert ask(door, "b").status_code == 200
    assert door.loader.running() == {"b"}  # one at a time: each takes all 2 cores


def test_a_pinned_engine_holding_the_cores_leaves_no_room_and_says_so(doors: Callable[..., DoorThread]) -> None:
    host = engines(threads=2, slots=2, token_s=0.01)
    host.budget = 2 * PLANNED
    host.models["a"] = replace(host.models["a"], mode=Mode.PINNED)
    door = doors(host, cores=3)
    door.wait_for(lambda state: state["a"]["phase"] == "loaded")
    refused = ask(door, "b")
    error = refused.json()["error"]
    assert refused.status_code == 503 and error["code"] == "no_room", error
    assert "not enough room to load `b` (cores: needs 2, 1 free)" in error["message"]
    assert door.loader.running() == {"a"}


class NoLoader:
    """The engine is already up (started by the test): loads and unloads do nothing."""

    async def load(self, name: str) -> None:
        return None

    async def unload(self, name: str) -> None:
        return None


class DroppingEngine:
    """An engine that keeps connections alive after an answer, then closes each one as its next
    request arrives, unanswered (an engine closing idle keep-alive connections as the door reuses
    them): the first request on a connection is answered, a later one never."""

    ANSWER = (
        b'{"id":"x","object":"chat.completion","created":0,"model":"a","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
    )

    def __init__(self) -> None:
        self.port = free_port()
        self.serving: set[asyncio.Task[None]] = set()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self.loop
        ).result(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.serving.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            for turn in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.lower().split(b"\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in lines if line.startswith(b"content-length"))
                await reader.readexactly(length)
                if turn == 1:
                    return  # closed, the request unanswered
                await asyncio.sleep(0.3)  # slow enough that the door opens one connection per request
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                    + f"Content-Length: {len(self.ANSWER)}\r\n\r\n".encode()
                    + self.ANSWER
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        async def shut() -> None:
            self.server.close()
            for task in self.serving:
                task.cancel()
            await asyncio.gather(*self.serving, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def test_a_request_on_stale_pooled_connections_is_answered_not_502(doors: Callable[..., DoorThread]) -> None:
    engine = DroppingEngine()
    try:
        host = Host()
        host.models["a"] = ServedModel(name="a", upstream=f"http://127.0.0.1:{engine.port}", mode=Mode.PINNED)
        door = doors(host, wrap=lambda inner: NoLoader())
        door.wait_for(lambda state: state["a"]["phase"] == "loaded")
        threads = [threading.Thread(target=ask, args=(door, "a")) for _ in range(3)]
        for thread in threads:  # three answers at once: three connections in the door's pool
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        # The first pooled connection is dropped as the request arrives; the retry must not take
        # the next pooled one (dropped the same way), but a new connection.
        answer = ask(door, "a")
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "hi"
    finally:
        engine.close()


def test_a_request_the_router_sends_on_stale_pooled_connections_is_answered_not_502() -> None:
    """The lab router's pool to a door meets the same: idle connections the door closed as they
    are reused. Its retry goes out on a fresh connection too (PooledClient.post, as the door's)."""
    door = DroppingEngine()  # a door that closes each reused connection, its request unanswered
    try:
        with lab_router(f"http://127.0.0.1:{door.port}", {"a": "a"}) as router:
            asked: list[httpx.Response] = []

            def one() -> None:
                asked.append(httpx.post(router + CHAT, json={"model": "a", "messages": ASK}, timeout=30))

            threads = [threading.Thread(target=one) for _ in range(3)]
            for thread in threads:  # three answers at once: three connections in the router's pool
                thread.start()
            for thread in threads:
                thread.join(timeout=30)
            assert [answer.status_code for answer in asked] == [200, 200, 200]
            # The first pooled connection is dropped as the request arrives; the retry must not
            # take the next pooled one (dropped the same way), but a new connection.
            answer = httpx.post(router + CHAT, json={"model": "a", "messages": ASK}, timeout=30)
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["content"] == "hi"
            assert answer.headers["X-Controlpanel-Host"] == "lab-a"
    finally:
        door.close()


def test_a_threads_entry_below_one_is_refused() -> None:
    from hostagent.frontdoor.table import TableError

    with pytest.raises(TableError, match="threads must be at least 1"):
        ServedModel.from_dict({"name": "a", "upstream": "http://127.0.0.1:1", "threads": 0})
    assert ServedModel.from_dict({"name": "a", "upstream": "http://127.0.0.1:1", "threads": 2}).threads == 2
