"""Anthropic's Messages and OpenAI's Responses through the lab router (tests/router/conftest.py:
two hosts' real front doors and llama-servers, the router as its own process), by an alias, with
the official `anthropic` and `openai` clients, usage booked at the door that answered; the router's
own refusals in each API's error shape, as each client raises them."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from openai import OpenAI

from bench.bench_frontdoor import metric

from .conftest import Lab

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
SAY = [{"role": "user", "content": "Count to ten."}]
PLAIN = {"ignore_eos": True}  # llama.cpp's: exactly the tokens asked for


def door_tokens(lab: Lab, kind: str) -> float:
    """The tokens lab-b's door booked to `fast` for the key `only-fast` (its own /metrics)."""
    return lab.doors["lab-b"].metric(
        "frontdoor_tokens_total", model="gemma-b-r1", alias="fast", key="only-fast", kind=kind
    )


def test_messages_and_responses_reach_the_alias_host_booked_and_refusals_are_in_their_apis_shape(
    two_hosts: Lab,
) -> None:
    lab = two_hosts
    claude = anthropic.Anthropic(base_url=lab.router, api_key=lab.keys["only-fast"], max_retries=0, timeout=120)
    raw = claude.messages.with_raw_response.create(model="fast", max_tokens=4, messages=SAY, extra_body=PLAIN)
    plain = raw.parse()
    assert raw.headers["X-Controlpanel-Host"] == "lab-b" and plain.model == "gemma-b"
    assert plain.usage.output_tokens == 4 and door_tokens(lab, "completion") == 4

    with claude.messages.stream(model="fast", max_tokens=6, messages=SAY, extra_body=PLAIN) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) == 6 and final.model == "gemma-b" and final.usage.output_tokens == 6
    assert door_tokens(lab, "completion") == 4 + 6

    assert claude.messages.count_tokens(model="fast", messages=SAY).input_tokens > 3
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
    with pytest.raises(anthropic.AuthenticationError) as refused:
        anthropic.Anthropic(base_url=lab.router, api_key="cpk_not-a-key", max_retries=0).messages.create(
            model="fast", max_tokens=2, messages=SAY
        )
    assert isinstance(refused.value.body, dict) and refused.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.PermissionDeniedError) as forbidden:
        claude.messages.create(model="coder", max_tokens=2, messages=SAY)
    assert isinstance(forbidden.value.body, dict) and forbidden.value.body["error"]["type"] == "permission_error"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        claude.messages.create(model="nobody", max_tokens=2, messages=SAY)
    assert isinstance(unknown.value.body, dict) and unknown.value.body["error"] == {
        "type": "not_found_error",
        "message": "The model `nobody` does not exist in this lab.",
    }
    wrong = {"x-api-key": "cpk_not-a-key", "anthropic-version": "2023-06-01"}
    # On an OpenAI path the same refusal is OpenAI's.
    openai_shaped = httpx.post(f"{lab.router}/v1/responses", json={"model": "nobody", "input": "x"}, headers=wrong)
    assert openai_shaped.status_code == 401 and openai_shaped.json()["error"]["code"] == "invalid_api_key"
