"""What the agent hands the front door, checked before it serves: routing tables, key tables and
settings refuse what cannot be served with a clear message; a stream's usage is read and dropped
wherever the engine's reads happen to cut its events."""

from __future__ import annotations

import argparse
import json

import pytest

from hostagent.frontdoor import KeyTable, RoutingTable, hash_key
from hostagent.frontdoor.__main__ import parse_grace
from hostagent.frontdoor.settings import FrontDoorSettings, SettingsError
from hostagent.frontdoor.table import TableError
from hostagent.frontdoor.usage import UsageStream, ends_stream

MODEL = {"name": "qwen-r12", "upstream": "http://127.0.0.1:8001", "aliases": ["coder"], "mode": "pinned"}


def test_a_routing_table_round_trips_and_resolves_names_and_aliases() -> None:
    table = RoutingTable.from_json(json.dumps({"models": [MODEL | {"api_key": "engine-secret"}]}))
    assert table.resolve("coder") is table.resolve("qwen-r12") is table.models[0]
    assert table.resolve("qwen") is None
    assert RoutingTable.from_dict(table.to_dict()) == table
    assert "engine-secret" not in repr(table)


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ([MODEL, MODEL | {"upstream": "http://127.0.0.1:8002"}], "'qwen-r12' names two models"),
        ([MODEL, {"name": "fast", "upstream": "http://h:1", "aliases": ["coder"]}], "'coder' names two models"),
        ([MODEL | {"upstream": "127.0.0.1:8001"}], r"upstream must be an http\(s\) URL"),
        ([MODEL | {"mode": "sometimes"}], "mode must be pinned or on-demand"),
        ([MODEL | {"memory": {"gpu0": -1}}], "negative planned memory on gpu0"),
        ([MODEL | {"idle_ttl_s": 0}], "idle_ttl_s must be positive"),
        ([MODEL | {"name": " "}], "needs a name"),
        ([MODEL | {"paths": "/v1/chat/completions"}], "paths must be a list of API paths"),
        ([MODEL | {"paths": [1]}], "paths must be a list of API paths"),
        ([MODEL | {"threads": "abc"}], "threads must be a whole number"),
        ([MODEL | {"threads": True}], "threads must be a whole number"),
        ([MODEL | {"threads": 2.7}], "threads must be a whole number"),
    ],
)
def test_a_table_that_cannot_be_served_is_refused_whole(models: list[dict[str, object]], message: str) -> None:
    with pytest.raises(TableError, match=message):
        RoutingTable.from_dict({"models": models})


def test_keys_are_kept_as_digests_and_allow_names_or_aliases() -> None:
    keys = KeyTable.from_json(
        json.dumps({"keys": [{"name": "alice", "sha256": hash_key("sk-a"), "models": ["coder"]}]})
    )
    alice = keys.find({"Authorization": "Bearer sk-a"})
    assert alice is not None and keys.find({"Authorization": "Bearer sk-b"}) is None
    assert keys.find({"Authorization": "sk-a"}) is None and keys.find({}) is None
    assert keys.find({"x-api-key": "sk-a"}) is alice and keys.find({"X-Api-Key": " sk-a "}) is alice
    assert keys.find({"authorization": "bearer sk-a"}) is alice and keys.find({"x-api-key": "Bearer sk-a"}) is None
    assert keys.find({"Authorization": "Bearer nope", "x-api-key": "sk-a"}) is alice
    assert alice.allows("coder", "qwen-r12") and not alice.allows("qwen-r12", "qwen-r12")
    assert "sk-a" not in repr(keys) and hash_key("sk-a") not in repr(keys)
    with pytest.raises(ValueError, match="same key"):
        KeyTable.from_dict({"keys": [{"name": n, "sha256": hash_key("x")} for n in ("a", "b")]})


def test_the_door_mode_decides_open_and_an_older_table_keeps_its_meaning() -> None:
    alice = [{"name": "alice", "sha256": hash_key("sk-a")}]
    assert not KeyTable.from_dict({"mode": "keys_required", "keys": []}).open  # no live key: closed
    assert not KeyTable.from_dict({"mode": "keys_required", "keys": alice}).open
    assert KeyTable.from_dict({"mode": "open", "keys": alice}).open
    assert KeyTable.from_dict({"keys": []}).open and not KeyTable.from_dict({"keys": alice}).open  # no mode
    assert KeyTable().open  # a door that has no table yet
    for bad in ("closed", "", 1, ["open"]):
        with pytest.raises(ValueError, match="door mode"):
            KeyTable.from_dict({"mode": bad, "keys": []})


def test_settings_come_from_the_environment_and_bad_values_are_named() -> None:
    settings = FrontDoorSettings.from_env(
        {"CONTROLPANEL_FRONT_DOOR_BIND": "0.0.0.0:4100", "CONTROLPANEL_FRONT_DOOR_QUEUE_MAX": "8"}
    )
    assert (settings.host, settings.port, settings.queue_max, settings.queue_wait_s) == ("0.0.0.0", 4100, 8, 300.0)
    assert FrontDoorSettings.from_env({}).bind == "127.0.0.1:4000"
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_BIND must be HOST:PORT"):
        FrontDoorSettings.from_env({"CONTROLPANEL_FRONT_DOOR_BIND": "4000"})
    with pytest.raises(SettingsError, match="CONTROLPANEL_FRONT_DOOR_QUEUE_WAIT must be at least 0.0"):
        FrontDoorSettings.from_env({"CONTROLPANEL_FRONT_DOOR_QUEUE_WAIT": "-1"})


STREAM = (
    b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
    b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("cut", [1, 7, 40, 64, 101, len(STREAM)])
@pytest.mark.parametrize("strip", [True, False])
def test_the_usage_event_is_read_wherever_the_reads_cut_it(cut: int, strip: bool) -> None:
    reader = UsageStream(strip=strip)
    out = b"".join(reader.feed(STREAM[i : i + cut]) for i in range(0, len(STREAM), cut)) + reader.close()
    assert reader.usage == {"prompt_tokens": 9, "completion_tokens": 2}
    expected = STREAM.replace(b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}\n\n', b"")
    assert out == (expected if strip else STREAM)


@pytest.mark.parametrize("cut", [1, 7, 40, 64, 101, len(STREAM)])
def test_the_piece_that_carries_the_streams_end_is_known_wherever_the_reads_cut_it(cut: int) -> None:
    """The door counts a client that hangs up on [DONE] as answered from the write that hands it
    [DONE] on: exactly one piece says it ends the stream, and a model that writes "[DONE]" in its
    text ends nothing."""
    reader = UsageStream(strip=True)
    pieces = [reader.feed(STREAM[i : i + cut]) for i in range(0, len(STREAM), cut)] + [reader.close()]
    assert [ends_stream(p) for p in pieces if p].count(True) == 1
    assert ends_stream(next(p for p in reversed(pieces) if p))
    quoted = b'data: {"choices":[{"delta":{"content":"data: [DONE]"}}]}\n\n'
    assert not ends_stream(quoted) and not ends_stream(b'data: {"content":"\\n[DONE]"}\n\n')


@pytest.mark.parametrize("raw", ["-1", "inf", "nan", "soon"])
def test_the_standalone_doors_stop_grace_is_a_finite_number_of_seconds(raw: str) -> None:
    """--stop-grace inf would never send SIGKILL to a stopped engine: refused, naming the flag."""
    with pytest.raises(argparse.ArgumentTypeError, match="--stop-grace"):
        parse_grace(raw)
    assert parse_grace("0") == 0.0 and parse_grace("2.5") == 2.5


def test_the_lan_address_moves_the_doors_default_bind_and_its_own_setting_still_wins() -> None:
    """CONTROLPANEL_LAN_ADDRESS (issue 41): the door listens on port 4000 there; the panel's check
    at start (serving.binds.front_door_bind) reads the same rule."""
    from serving.binds import front_door_bind

    for environ, bind in (
        ({}, "127.0.0.1:4000"),
        ({"CONTROLPANEL_LAN_ADDRESS": "10.213.7.1"}, "10.213.7.1:4000"),
        ({"CONTROLPANEL_LAN_ADDRESS": "fd00::7"}, "[fd00::7]:4000"),
        (
            {"CONTROLPANEL_LAN_ADDRESS": "10.213.7.1", "CONTROLPANEL_FRONT_DOOR_BIND": "127.0.0.1:4400"},
            "127.0.0.1:4400",
        ),
    ):
        assert FrontDoorSettings.from_env(environ).bind == bind
        assert front_door_bind(environ) == bind
