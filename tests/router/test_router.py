"""The lab router end to end (tests/router/conftest.py: two hosts' real front doors and engines,
the router as its own process on the panel's database), through the official `openai` client
with no retries of its own: what the router does is what the client sees."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import AuthenticationError, InternalServerError, NotFoundError, OpenAI, PermissionDeniedError

from bench.bench_frontdoor import metric
from tests.hostagent.door.test_front_door_e2e import until

from .conftest import Lab

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
ASK = [{"role": "user", "content": "Say hello."}]


def client(lab: Lab, key: str | None = "all") -> OpenAI:
    secret = lab.keys[key] if key else "cpk_not-a-key"
    return OpenAI(base_url=f"{lab.router}/v1", api_key=secret, max_retries=0, timeout=120)


def door_answers(lab: Lab, host: str, code: str) -> float:
    """How many requests `host`'s front door answered with `code` (its own metrics)."""
    return lab.doors[host].metric("frontdoor_requests_total", code=code)


def routed(lab: Lab, host: str, alias: str, code: str) -> float:
    """How many requests for `alias` the router counted as `host`'s door answering `code`
    (its /metrics; host and alias "" when the router answered itself)."""
    return metric(lab.router, "router_requests_total", host=host, alias=alias, code=code)


def door_gauge(lab: Lab, name: str, host: str) -> float:
    return metric(lab.router, name, host=host)


def test_requests_go_by_name_or_alias_to_a_host_that_serves_it_and_keys_are_the_doors(two_hosts: Lab) -> None:
    lab = client(two_hosts)
    coder = lab.chat.completions.with_raw_response.create(model="coder", messages=ASK, max_tokens=3)
    assert coder.headers["X-Controlpanel-Host"] == "lab-a" and coder.parse().model == "gemma-a"
    fast = lab.chat.completions.with_raw_response.create(model="fast", messages=ASK, max_tokens=3)
    assert fast.headers["X-Controlpanel-Host"] == "lab-b" and fast.parse().model == "gemma-b"
    assert lab.chat.completions.create(model="gemma-b-r1", messages=ASK, max_tokens=2).model == "gemma-b"
    assert lab.completions.create(model="coder", prompt="Once upon a time", max_tokens=3).choices[0].text

    listed = {model.id: model.model_extra["controlpanel"] for model in lab.models.list()}
    assert set(listed) == {"chat", "coder", "fast", "gemma-a-r1", "gemma-b-r1"}
    assert listed["chat"]["hosts"] == ["lab-a", "lab-b"] and listed["fast"]["hosts"] == ["lab-b"]

    with pytest.raises(NotFoundError) as unknown:
        lab.chat.completions.create(model="no-such-model", messages=ASK, max_tokens=2)
    assert unknown.value.code == "model_not_found" and unknown.value.type == "invalid_request_error"
    assert "`no-such-model` does not exist" in unknown.value.message

    only_fast = client(two_hosts, "only-fast")
    assert only_fast.chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-b"
    with pytest.raises(PermissionDeniedError) as refused:
        only_fast.chat.completions.create(model="coder", messages=ASK, max_tokens=2)
    assert refused.value.code == "model_not_allowed" and "`only-fast` may not use `coder`" in refused.value.message
    assert [model.id for model in only_fast.models.list()] == ["fast"]
    with pytest.raises(AuthenticationError) as no_key:
        client(two_hosts, None).chat.completions.create(model="fast", messages=ASK, max_tokens=2)
    assert no_key.value.code == "invalid_api_key"
    assert door_answers(two_hosts, "lab-a", "403") == 0  # refused at the router: no door saw it

    # The router's /metrics count what happened: by the host that answered, the name and the status.
    assert routed(two_hosts, "lab-a", "coder", "200") == 2  # a chat and a completion
    assert routed(two_hosts, "lab-b", "fast", "200") == 2 and routed(two_hosts, "lab-b", "gemma-b-r1", "200") == 1
    assert metric(two_hosts.router, "router_requests_total", model="gemma-a-r1") == 2
    assert routed(two_hosts, "", "coder", "403") == 1  # the router refused it, no door saw it
    assert routed(two_hosts, "", "", "404") == 1 and routed(two_hosts, "", "", "401") == 1  # no client-made label
    assert metric(two_hosts.router, "router_requests_total") == 8
    assert metric(two_hosts.router, "router_failovers_total") == 0
    assert door_gauge(two_hosts, "router_door_down", "lab-a") == 0 == door_gauge(two_hosts, "router_door_down", "lab-b")

    # An Anthropic-style client sends its key as x-api-key: a real answer, through the router and the door.
    body = {"model": "fast", "messages": ASK, "max_tokens": 2}
    headers = {"x-api-key": two_hosts.keys["only-fast"]}
    answer = httpx.post(f"{two_hosts.router}/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert answer.status_code == 200 and answer.json()["model"] == "gemma-b"
    assert answer.headers["X-Controlpanel-Host"] == "lab-b"


def test_a_stream_passes_through_as_written_and_a_client_that_hangs_up_ends_it_at_the_door(two_hosts: Lab) -> None:
    lab = client(two_hosts)
    count = [{"role": "user", "content": "Count from one to forty, in words."}]
    arrived = []
    for chunk in lab.chat.completions.create(model="coder", messages=count, max_tokens=40, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            arrived.append(time.monotonic())
    # Tokens arrive as the engine writes them, not all at once at the end.
    assert len(arrived) >= 20 and arrived[-1] - arrived[0] > 0.05, arrived

    # A client that reads three tokens of a long answer and hangs up: the door sees its request
    # closed (499) long before the 2,000 tokens the engine was asked for.
    left_before = door_answers(two_hosts, "lab-a", "499")
    endless = lab.chat.completions.create(
        model="coder", messages=count, max_tokens=2000, stream=True, extra_body={"ignore_eos": True}
    )
    for seen, _ in enumerate(endless, 1):
        if seen == 3:
            break
    assert door_gauge(two_hosts, "router_requests_in_flight", "lab-a") == 1  # the router's, as it stands
    assert door_gauge(two_hosts, "router_requests_in_flight", "lab-b") == 0
    endless.close()
    until(
        "lab-a's door ends the request the client left",
        lambda: door_answers(two_hosts, "lab-a", "499") == left_before + 1,
        timeout=120,
    )
    until("nothing in flight at lab-a", lambda: two_hosts.doors["lab-a"].state()["gemma-a-r1"]["in_flight"] == 0)
    assert routed(two_hosts, "lab-a", "coder", "499") == 1 and routed(two_hosts, "lab-a", "coder", "200") == 1
    assert door_gauge(two_hosts, "router_requests_in_flight", "lab-a") == 0


def test_a_host_whose_door_is_down_is_skipped_for_another_that_serves_the_alias(two_hosts: Lab) -> None:
    lab = client(two_hosts)
    first = lab.chat.completions.with_raw_response.create(model="chat", messages=ASK, max_tokens=2)
    assert first.headers["X-Controlpanel-Host"] == "lab-a"  # both loaded, equally idle: the first by name

    door = two_hosts.doors["lab-a"].proc
    door.terminate()
    door.wait(30)
    for _ in range(2):  # the failed-over request, then one that no longer tries lab-a
        answer = lab.chat.completions.with_raw_response.create(model="chat", messages=ASK, max_tokens=2)
        assert answer.headers["X-Controlpanel-Host"] == "lab-b" and answer.parse().model == "gemma-b"
    assert two_hosts.router_log().count("lab-a's front door") == 1, two_hosts.router_log()

    with pytest.raises(InternalServerError) as nowhere:  # only lab-a serves `coder`
        lab.chat.completions.create(model="coder", messages=ASK, max_tokens=2)
    assert nowhere.value.status_code == 503 and nowhere.value.code == "no_route"
    assert "lab-a: refused a connection just now" in nowhere.value.message
    assert nowhere.value.response.headers["Retry-After"] == "10"

    # The router's /metrics: one failover (lab-a refused, lab-b answered), lab-a down while skipped.
    assert metric(two_hosts.router, "router_failovers_total", host="lab-a") == 1
    assert metric(two_hosts.router, "router_failovers_total") == 1
    assert routed(two_hosts, "lab-a", "chat", "200") == 1 and routed(two_hosts, "lab-b", "chat", "200") == 2
    assert routed(two_hosts, "", "coder", "503") == 1
    assert door_gauge(two_hosts, "router_door_down", "lab-a") == 1
    assert door_gauge(two_hosts, "router_door_down", "lab-b") == 0
    assert 0 <= metric(two_hosts.router, "router_route_table_age_seconds") < 5  # read every 0.3 s
    assert metric(two_hosts.router, "router_route_table_read_failures_total") == 0
