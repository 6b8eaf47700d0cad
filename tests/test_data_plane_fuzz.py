"""Hostile requests at the data plane: a host's front door and the lab router, each on loopback in
its own event loop, asked anything a client on the lab's network could send (any bytes or JSON as
the body, any `model`, any path and method, any Authorization header).

Each answer is an OpenAI-shaped error or a real answer, never a 500: a client library shows the
message, and the process serves on (its /health answers after every example). The door's one model
names a command that exits at once, so a request that reaches it runs the real failed-load path
(503 with the reason); the router's one door refuses connections (503 `no_route`).

Both run with a metrics token (401 without it) and their connection bounds; bodies include JSON
nested any depth up to 100,000 (400 `invalid_body` past 64 levels, never a RecursionError's 500).
The connection settings themselves are drawn too: any value in the environment makes settings
within their bounds, or a SettingsError naming the variable.

Examples per property: 100, and the explicit ones each path must see (the failed load, an alias, no
key, a key's other model, a body too large, a body 100,000 deep); about 30 s in all on a loaded
machine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hostagent.frontdoor import FrontDoor, FrontDoorSettings, KeyTable, RoutingTable, ServedModel, hash_key
from hostagent.frontdoor.keys import InferenceKey
from hostagent.frontdoor.launcher import Command, ProcessLoader
from hostagent.frontdoor.limits import ConnectionLimits
from hostagent.frontdoor.settings import SettingsError
from labrouter.app import Router
from serving.lab_routes import Door, LabRoutes
from tests.support.event_loop import LoopThread

SECRET = "cpk_fuzz-secret-4hXk"
NAMES = ["lazy", "coder", "LAZY", "lazy ", "", "../etc/passwd", "lazy\x00", "é" * 300, "a" * 70_000]
METRICS_TOKEN = "scrape-fuzz-token"
PATHS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/../metrics", "/v2/x", "/"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int, opener: bytes) -> bytes:
    closer = b"]" if opener == b"[" else b"}"
    inner = b'"a": ' if opener == b"{" else b""
    return (opener + inner) * depth + b"0" * (opener == b"[") + b"null" * (opener == b"{") + closer * depth


deep_bodies = st.builds(nested, st.integers(1, 100_000), st.sampled_from([b"[", b"{"]))
bodies = st.one_of(
    st.binary(max_size=400),
    deep_bodies,
    deep_bodies.map(lambda b: b'{"model": "lazy", "messages": ' + b + b"}"),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"model": st.sampled_from(NAMES) | json_values},
        optional={"stream": json_values, "messages": json_values, "max_tokens": json_values, "input": json_values},
    ).map(lambda v: json.dumps(v).encode()),
)
authorizations = st.one_of(
    st.none(),
    st.just(f"Bearer {SECRET}"),
    st.just(f"Bearer {METRICS_TOKEN}"),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60).map(str.strip),  # as sent
)


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("door-logs")
    # An engine that exits at once: a request that gets as far as a load meets the real failed load.
    loader = ProcessLoader({"lazy": Command(("/bin/false",), "http://127.0.0.1:9/health")}, log_dir=Path(logs))
    table = RoutingTable((ServedModel(name="lazy", upstream="http://127.0.0.1:9", aliases=("coder",)),))
    keys = KeyTable((InferenceKey(name="fuzz", sha256=hash_key(SECRET), models=frozenset({"lazy"})),))
    settings_ = FrontDoorSettings(host="127.0.0.1", port=0, queue_wait_s=5.0, metrics_token=METRICS_TOKEN)
    loop = LoopThread()

    async def start() -> FrontDoor:
        served = FrontDoor(table, loader, lambda: {"ram": 1 << 40}, settings_, keys=keys)
        await served.start()
        return served

    served = loop.call(start())
    try:
        yield f"http://127.0.0.1:{served.port}"
    finally:
        loop.call(served.stop())
        loop.close()


@pytest.fixture(scope="module")
def router() -> Iterator[str]:
    table = LabRoutes(
        (Door(host="gpu-a", url="http://127.0.0.1:9", labels={"coder": "lazy", "lazy": "lazy"}),),
        keys={"keys": [{"name": "fuzz", "sha256": hash_key(SECRET), "models": ["lazy"]}]},
    )

    async def read() -> LabRoutes:
        return table

    loop = LoopThread()
    served = Router(read, port=0, refresh_s=60, metrics_token=METRICS_TOKEN)
    loop.call(served.start())
    try:
        yield f"http://127.0.0.1:{served.port}"
    finally:
        loop.call(served.stop())
        loop.close()


def check(
    url: str, method: str, path: str, body: bytes, authorization: str | None, allowed: Callable[[int], bool]
) -> None:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = httpx.request(method, url + path, content=body, headers=headers, timeout=30)
    assert allowed(answer.status_code), (answer.status_code, answer.text[:300])
    if answer.status_code >= 400:
        error = answer.json()["error"]
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["code"], str)
        assert SECRET not in answer.text
    assert httpx.get(url + "/health", timeout=10).status_code == 200


CHAT = "/v1/chat/completions"
KEY = f"Bearer {SECRET}"
ASK = json.dumps({"model": "coder", "messages": [{"role": "user", "content": "hi"}]}).encode()


def chosen(test: Callable[..., None]) -> Callable[..., None]:
    """The requests each path must see whatever the draw: a real one for the alias (the door's
    load fails, the router's door refuses), no key, a key's other model, an unknown model, too large."""
    for method, path, body, authorization in [
        ("POST", CHAT, ASK, KEY),
        ("POST", CHAT, ASK.replace(b"coder", b"lazy"), KEY),
        ("POST", CHAT, ASK, None),
        ("POST", CHAT, ASK.replace(b"coder", b"other"), KEY),
        ("POST", CHAT, b'{"model": "coder", "pad": "' + b"x" * (64 << 20) + b'"}', KEY),
        ("POST", CHAT, b"[" * 100_000 + b"]" * 100_000, KEY),
        ("POST", CHAT, b'{"model": "lazy", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", KEY),
        ("GET", "/v1/../metrics", b"", f"Bearer {METRICS_TOKEN}"),
    ]:
        test = example(method=method, path=path, body=body, authorization=authorization)(test)
    return test


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("server", ["door", "router"])
@FUZZ
@chosen
@given(
    method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE"]),
    path=st.sampled_from(PATHS),
    body=bodies,
    authorization=authorizations,
)
def test_the_door_and_the_router_answer_anything_with_a_reason_and_serve_on(
    server: str, request: pytest.FixtureRequest, method: str, path: str, body: bytes, authorization: str | None
) -> None:
    # 503: at the door, the model's load failed (its engine exits); at the router, the only door
    # that serves the name refuses connections (no_route). 413: too large. 4xx: refused, with the reason.
    check(request.getfixturevalue(server), method, path, body, authorization, lambda code: code < 500 or code == 503)


CONNECTION_SETTINGS = {
    "CONTROLPANEL_FRONT_DOOR_HEADER_TIMEOUT": ("header_timeout_s", 0.1),
    "CONTROLPANEL_FRONT_DOOR_BODY_TIMEOUT": ("body_timeout_s", 0.1),
    "CONTROLPANEL_FRONT_DOOR_IDLE_TIMEOUT": ("idle_timeout_s", 0.1),
    "CONTROLPANEL_FRONT_DOOR_MAX_CONNECTIONS": ("max_connections", 1),
    "CONTROLPANEL_FRONT_DOOR_MAX_CONNECTIONS_PER_PEER": ("max_connections_per_peer", 1),
}
setting_values = st.one_of(
    st.text(max_size=12),
    st.floats().map(str),
    st.integers(-10, 10**6).map(str),
    st.sampled_from(["0", "0.05", "0.1", "1e309", "nan", "-inf", " 5 ", "10s", "1_000"]),
)


@settings(max_examples=100, deadline=None)
@given(environ=st.dictionaries(st.sampled_from(sorted(CONNECTION_SETTINGS)), setting_values))
def test_any_connection_setting_makes_bounded_settings_or_names_the_variable(environ: dict[str, str]) -> None:
    try:
        made = FrontDoorSettings.from_env(environ)
    except SettingsError as exc:
        assert any(name in str(exc) for name in environ)
        return
    limits = made.limits
    for name, (field_name, minimum) in CONNECTION_SETTINGS.items():
        value = getattr(limits, field_name)
        assert math.isfinite(value) and value >= minimum
        if name not in environ or not environ[name].strip():
            assert value == getattr(ConnectionLimits(), field_name)
    assert isinstance(limits.max_connections, int) and isinstance(limits.max_connections_per_peer, int)


SWAP_SETTINGS = {
    "CONTROLPANEL_FRONT_DOOR_TURN": ("turn_s", 0.0),
    "CONTROLPANEL_FRONT_DOOR_TURN_LINGER": ("turn_linger_s", 0.0),
    "CONTROLPANEL_FRONT_DOOR_CORES": ("cores", 0),
}


@settings(max_examples=100, deadline=None)
@given(environ=st.dictionaries(st.sampled_from(sorted(SWAP_SETTINGS)), setting_values))
def test_any_swap_setting_makes_bounded_settings_or_names_the_variable(environ: dict[str, str]) -> None:
    try:
        made = FrontDoorSettings.from_env(environ)
    except SettingsError as exc:
        assert any(name in str(exc) for name in environ)
        return
    for name, (field_name, minimum) in SWAP_SETTINGS.items():
        value = getattr(made, field_name)
        assert math.isfinite(value) and value >= minimum
        if name not in environ or not environ[name].strip():
            assert value == getattr(FrontDoorSettings, field_name)
    assert isinstance(made.cores, int)
