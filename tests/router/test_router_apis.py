"""Anthropic's Messages and OpenAI's Responses through the lab router (tests/router/conftest.py:
two hosts' real front doors and llama-servers, the router as its own process), by an alias, with
usage booked at the door that answered; the router's own refusals in each API's error shape.

The `anthropic` SDK is not installed in the suite's environment: Messages are sent as it sends them
(httpx, `x-api-key`, `anthropic-version`); Responses go through the official `openai` client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI

from bench.bench_frontdoor import metric

from .conftest import Lab

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
SAY = [{"role": "user", "content": "Count to ten."}]
PLAIN = {"ignore_eos": True}  # llama.cpp's: exactly the tokens asked for


def headers(lab: Lab, key: str = "only-fast") -> dict[str, str]:
    return {"x-api-key": lab.keys[key], "anthropic-version": "2023-06-01"}


def door_tokens(lab: Lab, kind: str) -> float:
    """The tokens lab-b's door booked to `fast` for the key `only-fast` (its own /metrics)."""
    return lab.doors["lab-b"].metric(
        "frontdoor_tokens_total", model="gemma-b-r1", alias="fast", key="only-fast", kind=kind
    )


def events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    out, name = [], ""
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            out.append((name, json.loads(line[5:])))
    return out


def test_messages_and_responses_reach_the_alias_host_booked_and_refusals_are_in_their_apis_shape(
    two_hosts: Lab,
) -> None:
    lab = two_hosts
    body = {"model": "fast", "max_tokens": 4, "messages": SAY, **PLAIN}
    plain = httpx.post(f"{lab.router}/v1/messages", json=body, headers=headers(lab), timeout=120)
    assert plain.status_code == 200, plain.text
    assert plain.headers["X-Controlpanel-Host"] == "lab-b" and plain.json()["model"] == "gemma-b"
    assert plain.json()["usage"]["output_tokens"] == 4 and door_tokens(lab, "completion") == 4

    streamed = {**body, "max_tokens": 6, "stream": True}
    with httpx.stream("POST", f"{lab.router}/v1/messages", json=streamed, headers=headers(lab), timeout=120) as r:
        assert r.status_code == 200 and r.headers["X-Controlpanel-Host"] == "lab-b"
        seen = events(r)
    assert seen[0][0] == "message_start" and seen[-1][0] == "message_stop"
    assert door_tokens(lab, "completion") == 4 + 6

    counted = httpx.post(
        f"{lab.router}/v1/messages/count_tokens", json={"model": "fast", "messages": SAY}, headers=headers(lab),
        timeout=120,
    )  # fmt: skip
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 3
    assert door_tokens(lab, "completion") == 10

    client = OpenAI(base_url=f"{lab.router}/v1", api_key=lab.keys["only-fast"], max_retries=0, timeout=120)
    answer = client.responses.create(model="fast", input="Count to ten.", max_output_tokens=3, extra_body=PLAIN)
    assert answer.model == "gemma-b" and answer.usage is not None and answer.usage.output_tokens == 3
    stream = list(
        client.responses.create(model="fast", input="Hi.", max_output_tokens=5, stream=True, extra_body=PLAIN)
    )
    assert stream[-1].type == "response.completed"
    assert door_tokens(lab, "completion") == 10 + 3 + 5
    # The router counts each as answered by lab-b: the streams' ends (message_stop, response.completed) went out.
    assert metric(lab.router, "router_requests_total", host="lab-b", alias="fast", code="200") == 5

    # The router's own refusals on /v1/messages are Anthropic's (one lab for both: each costs two engines).
    body = {**body, "max_tokens": 2}
    wrong = {"x-api-key": "cpk_not-a-key", "anthropic-version": "2023-06-01"}
    refused = httpx.post(f"{lab.router}/v1/messages", json=body, headers=wrong, timeout=30)
    assert refused.status_code == 401
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "authentication_error"
    forbidden = httpx.post(
        f"{lab.router}/v1/messages", json={**body, "model": "coder"}, headers=headers(lab), timeout=30
    )
    assert forbidden.status_code == 403 and forbidden.json()["error"]["type"] == "permission_error"
    unknown = httpx.post(
        f"{lab.router}/v1/messages", json={**body, "model": "nobody"}, headers=headers(lab), timeout=30
    )
    assert unknown.status_code == 404 and unknown.json()["error"] == {
        "type": "not_found_error",
        "message": "The model `nobody` does not exist in this lab.",
    }
    # On an OpenAI path the same refusal is OpenAI's.
    openai_shaped = httpx.post(f"{lab.router}/v1/responses", json={"model": "nobody", "input": "x"}, headers=wrong)
    assert openai_shaped.status_code == 401 and openai_shaped.json()["error"]["code"] == "invalid_api_key"
