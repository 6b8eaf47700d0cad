"""Strangers trying to stall the data plane: a host's front door and the lab router, each on
loopback in its own event loop, with small connection bounds (hostagent/frontdoor/limits.py).

The attacker is a process of its own (tests/support/half_sent.py) that connects from 127.0.0.2
(another address on loopback, so another peer); the keyed client is this test, from 127.0.0.1.
What the attacker sends is what took every file descriptor of a door: `POST /v1/chat/completions
HTTP/1.1`, a Host header, and nothing more. The door's one model names a command that exits at
once and the router's one door refuses connections, so nothing here needs an engine: the keyed
client asks `/v1/models`, which each answers itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hostagent.frontdoor import FrontDoor, FrontDoorSettings, KeyTable, RoutingTable, ServedModel, hash_key
from hostagent.frontdoor.keys import InferenceKey
from hostagent.frontdoor.launcher import Command, ProcessLoader
from hostagent.frontdoor.limits import ConnectionLimits
from labrouter.app import Router
from serving.lab_routes import Door, LabRoutes
from tests.support.event_loop import LoopThread
from tests.support.half_sent import code as error_code
from tests.support.half_sent import status
from tests.support.panel import ROOT

SECRET = "cpk_limits-secret-9Qw"
KEY = {"Authorization": f"Bearer {SECRET}"}
ATTACKER = "127.0.0.2"
ATTACK = 1_100


@dataclass
class Served:
    url: str
    port: int
    loop: LoopThread
    stop: Callable[[], None] = field(repr=False)


def serve_door(tmp_path: Path, limits: ConnectionLimits, metrics_token: str = "") -> Served:
    loader = ProcessLoader({"lazy": Command(("/bin/false",), "http://127.0.0.1:9/health")}, log_dir=tmp_path)
    table = RoutingTable((ServedModel(name="lazy", upstream="http://127.0.0.1:9"),))
    keys = KeyTable((InferenceKey(name="limits", sha256=hash_key(SECRET), models=None),))
    settings = FrontDoorSettings(host="127.0.0.1", port=0, queue_wait_s=5.0, metrics_token=metrics_token, limits=limits)
    loop = LoopThread()

    async def start() -> FrontDoor:
        door = FrontDoor(table, loader, lambda: {"ram": 1 << 40}, settings, keys=keys)
        await door.start()
        return door

    door = loop.call(start())
    return Served(f"http://127.0.0.1:{door.port}", door.port, loop, lambda: loop.call(door.stop()))


def serve_router(tmp_path: Path, limits: ConnectionLimits, metrics_token: str = "") -> Served:
    table = LabRoutes(
        (Door(host="gpu-a", url="http://127.0.0.1:9", labels={"lazy": "lazy"}),),
        keys={"keys": [{"name": "limits", "sha256": hash_key(SECRET), "models": None}]},
    )

    async def read() -> LabRoutes:
        return table

    loop = LoopThread()
    router = Router(read, port=0, refresh_s=60, limits=limits, metrics_token=metrics_token)
    loop.call(router.start())
    return Served(f"http://127.0.0.1:{router.port}", router.port, loop, lambda: loop.call(router.stop()))


@pytest.fixture(params=["door", "router"])
def serve(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """serve(limits, metrics_token="") -> a running front door or lab router (both, by parameter)."""
    started: list[Served] = []

    def start(limits: ConnectionLimits, metrics_token: str = "") -> Served:
        served = (serve_door if request.param == "door" else serve_router)(tmp_path, limits, metrics_token)
        started.append(served)
        return served

    yield start
    for served in started:
        try:
            served.stop()
        finally:
            served.loop.close()


# The header timeout of the flood tests: well above the time 1,100 connections take to be made on a
# loaded machine.
HEAD_TIMEOUT = 8.0
# How much later than its client saw it connected a connection may be counted by the server (its
# accept, on a loaded machine): the client's view of how long each was held starts that much later.
ACCEPT_SLACK = 0.5


def most_at_once(held: list[dict[str, Any]]) -> int:
    """The most of the attacker's connections the server held at once, from the attacker's side:
    each from its connection (plus ACCEPT_SLACK) to the server's answer. A flood still connecting
    when the first ones are cut may be admitted after them, so the count in all may be higher:
    what a cap bounds is this."""
    moments = sorted([(c["at"] + ACCEPT_SLACK, 1) for c in held] + [(c["at"] + c["first"], -1) for c in held])
    now = most = 0
    for _, step in moments:  # at one moment, a release (-1) sorts before an admission (+1)
        now += step
        most = max(most, now)
    return most


@contextlib.contextmanager
def attack(
    port: int, count: int = ATTACK, within: float = 5 * HEAD_TIMEOUT
) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """`count` half-sent requests from the attacker's address, by a process of its own
    (tests/support/half_sent.py); inside, all are open; the callable gives what became of each."""
    argv = [sys.executable, "-m", "tests.support.half_sent", str(port), str(count), ATTACKER, str(within)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        opened = json.loads(proc.stdout.readline())
        assert opened["opened"] == count

        def outcome() -> list[dict[str, Any]]:
            assert proc.stdout is not None
            return list(json.loads(proc.stdout.readline()))

        yield outcome
    finally:
        proc.kill()
        proc.wait(10)


def keyed_models(url: str) -> tuple[int, float]:
    """The keyed client's `/v1/models`: its status (0: the connection was closed on it) and time."""
    started = time.monotonic()
    try:
        code = httpx.get(f"{url}/v1/models", headers=KEY, timeout=5).status_code
    except httpx.TransportError:
        code = 0
    return code, time.monotonic() - started


def connection_series(url: str) -> dict[str, float]:
    """The server's connection series on its /metrics (the door's frontdoor_*, the router's
    router_*), by name without the prefix and label: "open", "refused/peer", "timed_out/head"..."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.partition("_connections_")[2].removesuffix("_total")
            if name and sample.name.startswith(("frontdoor_connections_", "router_connections_")):
                label = sample.labels.get("cap") or sample.labels.get("part")
                found[f"{name}/{label}" if label else name] = sample.value
    return found


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@contextlib.contextmanager
def peak_descriptors() -> Iterator[Callable[[], int]]:
    """Inside, a thread counts this process's descriptors every few milliseconds; the callable
    gives the most it saw beyond those open when it started."""
    before, most, done = open_descriptors(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            most[0] = max(most[0], open_descriptors() - before)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield lambda: most[0]
    finally:
        done.set()
        sampler.join()


def accept_queue(port: int) -> int:
    """Connections the kernel has made to the server listening on 127.0.0.1:`port` that the server
    has not taken yet (a listening socket's rx_queue in /proc/net/tcp)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        _, local, _, state, queues = line.split()[:5]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            return int(queues.split(":")[1], 16)
    raise AssertionError(f"nothing listens on port {port}")


def settled_descriptors(before: int, bound: int, port: int, within: float) -> int:
    """This process's descriptors beyond `before` once the server has taken every connection made
    to it and they are at most `bound` (or what is held after `within` seconds)."""
    deadline = time.monotonic() + within
    while (accept_queue(port) or open_descriptors() - before > bound) and time.monotonic() < deadline:
        time.sleep(0.05)
    return open_descriptors() - before


def test_half_sent_requests_cost_their_peer_its_own_connections_never_the_door(serve: Callable[..., Served]) -> None:
    # The attack: 1,100 connections from one address, each with half a request head. One peer may
    # hold 50: the others are answered 503 at once and closed, the 50 are cut by the header
    # timeout; the keyed client from another address is answered meanwhile.
    limits = ConnectionLimits(header_timeout_s=HEAD_TIMEOUT, max_connections=2_000, max_connections_per_peer=50)
    served = serve(limits)
    with attack(served.port) as outcome:
        code, took = keyed_models(served.url)
        assert code == 200 and took < 1.5, (code, took)
        # The server's /metrics shows the attacker's 50 open, beside this scrape's own connection
        # (and the keyed client's, while its close is on its way).
        assert 51 <= connection_series(served.url)["open"] <= 52
        seen = outcome()
    assert all(c["closed"] for c in seen), "a half-sent connection was left open"
    timed_out = [c for c in seen if c["status"] == 408]
    refused = [c for c in seen if c["status"] != 408]
    # The peer held 50 at once, never more, and they were cut by the header timeout (408), not before it.
    assert most_at_once(timed_out) == 50 and {c["code"] for c in timed_out} == {"request_timeout"}
    assert min(c["first"] for c in timed_out) >= limits.header_timeout_s - 0.5
    # The others were closed at once: answered 503 (or, while a flood of refusals waits to close,
    # closed with no answer), long before any header timeout.
    assert {c["status"] for c in refused} <= {503, 0} and any(c["status"] == 503 for c in refused)
    assert {c["code"] for c in refused if c["status"]} == {"too_many_connections"}
    assert max(c["first"] for c in refused) < limits.header_timeout_s - 0.5
    # It counted each: refused at the address's cap, or cut by the header timeout.
    counted = connection_series(served.url)
    assert (counted["refused/peer"], counted["refused/total"]) == (len(refused), 0)
    assert (counted["timed_out/head"], counted["timed_out/body"]) == (len(timed_out), 0)


def test_the_connection_cap_keeps_the_doors_descriptors_and_the_door_serves_after(serve: Callable[..., Served]) -> None:
    # No cap per peer here: the total cap alone bounds what 1,100 half-sent requests hold of the
    # server (100 connections, so 100 descriptors, and a few refusals waiting to close), and once
    # their heads are late it serves again. The server takes connections from its listen queue a
    # batch at a time, so a flood never holds more than a few batches beyond those, even for a moment.
    limits = ConnectionLimits(header_timeout_s=HEAD_TIMEOUT, max_connections=100, max_connections_per_peer=10_000)
    served = serve(limits)
    bound = 100 + 100 // 8 + 5  # this process holds no attacker's socket: each is the server's
    before = open_descriptors()
    with peak_descriptors() as peak, attack(served.port) as outcome:
        # Once the flood's sockets are each admitted or refused (well before the header timeout):
        held = settled_descriptors(before, bound, served.port, within=HEAD_TIMEOUT / 2)
        code, took = keyed_models(served.url)
        seen = outcome()
    assert held <= bound, held
    # Four turns of the loop's accept batch (hostagent/frontdoor/connections.py ACCEPT_BATCH, 64).
    assert peak() <= bound + 4 * 64, peak()
    assert code in (503, 0) and took < 1.5  # full (of the attacker's 100): refused at once, not queued
    assert all(c["closed"] for c in seen)
    assert most_at_once([c for c in seen if c["status"] == 408]) == 100
    assert {c["status"] for c in seen} <= {408, 503, 0}
    code, took = keyed_models(served.url)
    assert code == 200 and took < 1.5
    # Every refusal at the total cap was counted, the keyed client's among them.
    counted = connection_series(served.url)
    assert counted["refused/total"] == sum(c["status"] != 408 for c in seen) + 1
    assert counted["timed_out/head"] == sum(c["status"] == 408 for c in seen)


def test_a_body_dripped_a_byte_at_a_time_is_cut_off(serve: Callable[..., Served]) -> None:
    limits = ConnectionLimits(body_timeout_s=1.0)
    served = serve(limits)
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=5)
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {SECRET}\r\n"
    sock.sendall((head + "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode())
    started, answer, closed_after = time.monotonic(), b"", None
    sock.settimeout(0.25)
    while time.monotonic() - started < 8:
        try:
            sock.sendall(b" ")  # one byte per 0.25 s: 1,000 bytes would take four minutes
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            data = b""
        if not data:
            closed_after = time.monotonic() - started
            break
        answer += data
    sock.close()
    assert status(answer) == 408 and error_code(answer) == "request_timeout", answer[:300]
    assert b"did not arrive within 1 s" in answer
    assert closed_after is not None and closed_after < 4, closed_after  # the timeout, then a short linger
    assert connection_series(served.url)["timed_out/body"] == 1


def test_an_idle_keep_alive_connection_is_closed(serve: Callable[..., Served]) -> None:
    limits = ConnectionLimits(idle_timeout_s=1.0)
    served = serve(limits)
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=5)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = sock.recv(65536)
    answered = time.monotonic()
    assert status(answer) == 200
    while data := sock.recv(65536):  # the server closes it: recv gives b""
        answer += data
    idle = time.monotonic() - answered
    sock.close()
    assert 0.8 <= idle < 4, idle


DEEP = b"[" * 100_000 + b"]" * 100_000


def nested(depth: int) -> bytes:
    """A chat body whose `messages` nest `depth` lists deep in all (the body's own object is one)."""
    return b'{"model": "lazy", "messages": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


def test_json_nested_too_deep_is_a_bad_body_not_a_crash(serve: Callable[..., Served]) -> None:
    served = serve(ConnectionLimits())
    chat = f"{served.url}/v1/chat/completions"
    for body in (DEEP, b'{"model": "lazy", "x": ' + DEEP + b"}", nested(65)):
        answer = httpx.post(chat, content=body, headers=KEY, timeout=10)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_body", answer.text[:200]
    # 64 deep is parsed, and so are brackets inside a string: the request goes on (the door's model
    # fails to load; the router's door is down).
    text = json.dumps({"model": "lazy", "messages": [{"role": "user", "content": "[{" * 50_000}]}).encode()
    for body in (nested(64), text):
        answer = httpx.post(chat, content=body, headers=KEY, timeout=10)
        assert answer.status_code == 503 and answer.json()["error"]["code"] in ("model_load_failed", "no_route")
    assert httpx.get(f"{served.url}/health", timeout=5).status_code == 200


def test_metrics_need_the_metrics_token_when_one_is_set(serve: Callable[..., Served]) -> None:
    served = serve(ConnectionLimits(), metrics_token="scrape-token-7Xv")
    metrics = f"{served.url}/metrics"
    for headers in ({}, KEY, {"Authorization": "Bearer scrape-token-7X"}, {"Authorization": "scrape-token-7Xv"}):
        answer = httpx.get(metrics, headers=headers, timeout=5)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_token"
        assert "limits" not in answer.text  # no key's name
    answer = httpx.get(metrics, headers={"Authorization": "Bearer scrape-token-7Xv"}, timeout=5)
    assert answer.status_code == 200 and "# TYPE" in answer.text


def test_metrics_stay_open_without_a_token(serve: Callable[..., Served]) -> None:
    served = serve(ConnectionLimits())
    assert httpx.get(f"{served.url}/metrics", timeout=5).status_code == 200
