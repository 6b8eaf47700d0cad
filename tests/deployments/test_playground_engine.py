"""The chat playground against the real engine: a real agent serves the real Gemma 3 270M on
llama-server behind an API key; the panel relays its stream to the page (tests/deployments/
test_playground.py has the refusals and the engine that is not there)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from django.test import Client

from core.models import AuditEvent
from deployments.choices import OperationState
from deployments.models import ModelVariant
from deployments.selectors.hosts import serving_status
from deployments.services.secrets import secret_set
from deployments.services.switch import switch_request
from hardware.models import Host
from tests.deployments.test_playground import chat, chat_url, page_url, sse_events
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

ENGINE_KEY = "sk-engine-playground-0123456789"


def serve(lab: dict[str, Any], operator: Any, **fields: Any) -> Any:
    """Record a llama.cpp revision of the lab's Gemma (2k context) with these revision fields, switch
    to it, and wait until the host reports it serving."""
    revision = lab["rev"]("gemma for the playground", 2048, fields=fields)
    op = wait_done(switch_request(revision=revision, actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    deadline = time.monotonic() + 30
    while not serving_status(Host.objects.get(pk=lab["host"].pk)).serving:
        assert time.monotonic() < deadline, Host.objects.get(pk=lab["host"].pk).engine_state
        time.sleep(0.2)
    return revision


def test_the_answer_streams_from_the_served_model_with_its_key_kept_in_the_panel(lab, operator, admin_user, client):
    ModelVariant.objects.filter(pk=lab["gemma"].pk).update(sampling_presets={"default": {"temperature": 0.2}})
    secret_set(host=lab["host"], name="engine-key", value=ENGINE_KEY, actor=admin_user)
    revision = serve(lab, operator, api_key_secret="engine-key")
    unauthorised = httpx.post(f"http://127.0.0.1:{lab['port']}/v1/chat/completions", json={}, timeout=10)
    assert unauthorised.status_code == 401  # the engine wants the key: an answer proves the panel sent it

    client.force_login(operator)
    page = client.get(page_url(revision)).content.decode()
    assert 'name="temperature" value="0.2"' in page and ENGINE_KEY not in page
    # The package's Gemma 3 270M is a base model, recorded for completions: the box says the text is
    # continued, and the engine gets it at /v1/completions (a chat would get the question back).
    assert "is recorded for completions (a base model)" in page
    answer = chat(client, revision, prompt="Say hello in one short sentence.", temperature="0.2", max_tokens="32")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/event-stream"
    events = sse_events(answer)
    names = [name for name, _ in events]
    assert names[0] == "start" and names[-1] == "done" and names.count("delta") >= 2, events
    reply = "".join(data["content"] for name, data in events if name == "delta")
    assert reply.strip() and ENGINE_KEY not in str(events)
    done = events[-1][1]
    assert done["tokens"] >= 2 and done["ttft_ms"] > 0 and done["tokens_per_s"] > 0
    assert done["finish_reason"] in ("stop", "length") and done["prompt_tokens"] > 5

    # The next turn carries the conversation: the engine reads more prompt tokens.
    history = json.dumps(
        [{"role": "user", "content": "Say hello in one short sentence."}, {"role": "assistant", "content": reply}]
    )
    second = sse_events(chat(client, revision, prompt="Again, shorter.", max_tokens="16", history=history))
    assert second[-1][0] == "done" and second[-1][1]["prompt_tokens"] > done["prompt_tokens"], second[-1]

    # A prompt longer than the context: the engine's own words, in the box.
    refused = sse_events(chat(client, revision, prompt="lorem ipsum " * 1500, max_tokens="16"))
    assert refused[-1][0] == "error" and "context" in refused[-1][1]["message"].lower(), refused

    audits = AuditEvent.objects.filter(action="revision.chat").order_by("created_at")
    assert [a.data["messages"] for a in audits] == [1, 3, 1] and audits[0].data["temperature"] == 0.2
    assert all(a.actor == operator and ENGINE_KEY not in str(a.data) for a in audits)


def _signed_in(live_server: Any, user: Any, page: str) -> tuple[httpx.Client, str]:
    """An httpx client with `user`'s session and the CSRF token of `page`, as a browser has them."""
    session = Client()
    session.force_login(user)
    http = httpx.Client(base_url=live_server.url, cookies={"sessionid": session.cookies["sessionid"].value}, timeout=60)
    assert http.get(page).status_code == 200
    return http, http.cookies["csrftoken"]


def _busy_slots(port: int) -> list[dict[str, Any]]:
    slots = httpx.get(f"http://127.0.0.1:{port}/slots", timeout=5).json()
    return [s for s in slots if s.get("is_processing")]


def test_a_page_that_goes_away_stops_the_engines_answer(lab, operator, live_server):
    revision = serve(lab, operator)
    http, csrf = _signed_in(live_server, operator, page_url(revision))
    # Temperature 2 keeps a small model talking until max_tokens: an answer of minutes on this CPU.
    data = {"prompt": "Tell me a very long story.", "temperature": "2", "top_p": "1", "max_tokens": "1800"}
    deltas = 0
    headers = {"X-CSRFToken": csrf}
    with http.stream("POST", chat_url(revision), data={**data, "history": "[]"}, headers=headers) as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            deltas += line == "event: delta"
            if deltas == 3:
                break
        assert _busy_slots(lab["port"]), "the engine should still be answering"
    http.close()  # the page is gone: the connection closes with the answer half read
    t0 = time.monotonic()
    while _busy_slots(lab["port"]):
        assert time.monotonic() - t0 < 10, "the engine went on answering a page that was gone"
        time.sleep(0.1)
