"""The revision page's chat playground without an engine: who may send, which revision can be
tried, bad input, and an engine that is not there or never answers (a message in the box, never a
500). The streaming itself, against the real llama-server, is tests/deployments/test_playground_engine.py."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from deployments.models import ModelVariant
from deployments.services import playground
from deployments.services.revisions import revision_mark_active
from hardware.models import Host
from tests.support.llama import free_port
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

HEALTHY = {"running": True, "health": "healthy", "revision_label": "r1"}


def sse_events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    """The page's events from a streamed answer: (name, data) in order."""
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines.get("data", "{}"))))
    return events


def serving_box(operator: Any, *, port: int, engine_state: dict[str, Any] | None = None) -> tuple[Host, Any]:
    """A host that reports its engine healthy and serving r1 (llama.cpp on `port`, 2k context)."""
    host = Host.objects.create(
        name="box", last_heartbeat=timezone.now(), engine_state=engine_state or HEALTHY, model_dirs=["/srv/models"]
    )
    model = ModelVariant.objects.create(
        name="gemma-box",
        format="gguf",
        gguf_file="/srv/models/gemma.gguf",
        sampling_presets={"default": {"temperature": 0.3, "top_p": 0.9, "top_k": 40}},
    )
    r1 = gemma_revision(host, model, operator, port=port)
    revision_mark_active(revision=r1, actor=operator)
    return Host.objects.get(pk=host.pk), r1


def gemma_revision(host: Host, model: ModelVariant, operator: Any, **changes: Any) -> Any:
    """A llama.cpp revision of `model` served as "gemma" with a 2k context, but for `changes`."""
    values = {"served_name": "gemma", "port": 8080, "knobs": {"ctx_size": 2048, "parallel": 1}, "message": "gemma"}
    return make_revision(host=host, engine="llama.cpp", model_variant=model, actor=operator, **(values | changes))


def chat_url(revision: Any) -> str:
    return reverse("deployments:revision_chat", args=[revision.host.name, revision.number])


def page_url(revision: Any) -> str:
    return reverse("deployments:revision_detail", args=[revision.host.name, revision.number])


def chat(client: Any, revision: Any, **fields: Any) -> Any:
    data = {"prompt": "Say hello.", "system": "", "temperature": "", "top_p": "", "max_tokens": "", "history": "[]"}
    return client.post(chat_url(revision), {**data, **fields})


def chats() -> int:
    return AuditEvent.objects.filter(action="revision.chat").count()


def test_an_operator_gets_the_form_with_the_revisions_sampling(client, operator):
    _host, r1 = serving_box(operator, port=8080)
    client.force_login(operator)
    page = client.get(page_url(r1)).content.decode()
    assert 'id="playground-form"' in page and "js/playground.js" in page
    assert 'name="temperature" value="0.3"' in page and 'name="top_p" value="0.9"' in page
    assert 'name="max_tokens" value="512"' in page  # the exports' reply budget: a quarter of the 2,048
    assert "the catalog&#x27;s &#x27;default&#x27; sampling preset" in page and "<code>top_k=40</code>" in page


def test_a_viewer_reads_but_cannot_send(client, operator, viewer):
    _host, r1 = serving_box(operator, port=8080)
    client.force_login(viewer)
    page = client.get(page_url(r1)).content.decode()
    assert "people with the operator role can chat with it here" in page
    assert 'id="playground-form"' not in page and "js/playground.js" not in page
    assert chat(client, r1).status_code == 403
    assert chats() == 0


def test_only_the_revision_the_host_serves_can_be_tried(client, operator):
    host, r1 = serving_box(operator, port=8080)
    r2 = gemma_revision(host, r1.model_variant, operator, knobs={"ctx_size": 4096})
    client.force_login(operator)
    page = client.get(page_url(r2)).content.decode()
    why = "box serves r1, not r2: switch to r2 to try it here."
    assert why in page and 'id="playground-form"' not in page
    refused = chat(client, r2)
    assert refused.status_code == 409 and refused.json() == {"error": why}

    Host.objects.filter(pk=host.pk).update(engine_state={"running": False, "phase": "exited"})
    refused = chat(client, r1)
    assert refused.status_code == 409
    assert refused.json()["error"] == "Not serving now: r1 is the active revision, but its engine is stopped (exited)."
    yesterday = timezone.now() - timezone.timedelta(days=1)
    Host.objects.filter(pk=host.pk).update(engine_state=HEALTHY, last_heartbeat=yesterday)
    assert "box is offline" in chat(client, r1).json()["error"]
    assert chats() == 0


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"prompt": "   "}, "Message: This field is required."),
        ({"temperature": "5"}, "temperature: Ensure this value is less than or equal to 2.0."),
        ({"top_p": "nan"}, "top_p: Enter a finite number."),
        ({"history": '[{"role": "system", "content": "x"}]'}, "Each message of the conversation is a user or"),
        ({"history": "{not json"}, "The conversation could not be read"),
        ({"prompt": "a\x00b"}, "Message: Null characters are not allowed."),
        ({"history": '[{"role": "user", "content": "a\\u0000b"}]'}, "a message contains a NUL character"),
        ({"max_tokens": "5000"}, "At most 2,048 tokens: that is all the context one request gets on this server."),
    ],
)
def test_bad_input_is_refused_with_its_reason_and_nothing_sent(client, operator, fields, error):
    _host, r1 = serving_box(operator, port=8080)
    client.force_login(operator)
    refused = chat(client, r1, **fields)
    assert refused.status_code == 400 and error in refused.json()["error"]
    assert chats() == 0


def test_an_engine_that_is_not_there_is_a_message_in_the_box(client, operator):
    port = free_port()  # nothing listens there
    _host, r1 = serving_box(operator, port=port)
    client.force_login(operator)
    answer = chat(client, r1, temperature="0.5", max_tokens="64")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/event-stream"
    events = sse_events(answer)
    assert [name for name, _ in events] == ["start", "error"]
    assert events[0][1] == {"model": "gemma"}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    assert events[1][1]["message"].startswith(f"The panel could not reach the engine at {url}: ")
    [audit] = AuditEvent.objects.filter(action="revision.chat")
    assert audit.actor == operator and audit.summary == "chat with r1 on box (1 message(s))"
    assert audit.data == {"max_tokens": 64, "temperature": 0.5, "top_p": None, "messages": 1}  # never the text


@pytest.fixture
def silent_engine() -> Iterator[int]:
    """A port that accepts connections and never answers (an engine stuck loading, say)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_an_engine_that_never_answers_times_out_with_a_message(client, operator, silent_engine, monkeypatch):
    monkeypatch.setattr(playground, "READ_TIMEOUT_S", 0.5)
    _host, r1 = serving_box(operator, port=silent_engine)
    client.force_login(operator)
    events = sse_events(chat(client, r1))
    url = f"http://127.0.0.1:{silent_engine}/v1/chat/completions"
    assert events[-1] == ("error", {"message": f"The engine at {url} did not answer within 0.5 s."})
