"""A host's events page, its part of the host page and the API's list, through the Django test
client; the events come in as the agent reports them (its API, with the host's own token)."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from api.tokens import token_create
from hardware.credentials import host_token_issue
from hardware.models import HostEvent
from hardware.services import host_event_record

pytestmark = pytest.mark.django_db
SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123456789"  # a hub token's shape: masked wherever it lands


class Agent:
    def __init__(self, token: str) -> None:
        self.token, self.client = token, Client()

    def post(self, path: str, body: Any) -> Any:
        return self.client.post(
            f"/agent/v1/{path}", data=json.dumps(body), content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {self.token}",
        )  # fmt: skip


@pytest.fixture
def box(admin_user: User) -> dict[str, Any]:
    host, token = host_token_issue(name="gpu-box-1", actor=admin_user)
    other, _ = host_token_issue(name="gpu-box-2", actor=admin_user)
    agent = Agent(token)
    said = [
        ("restarted", "engine exited (killed by SIGKILL); restarted it (1 of 5 this hour)"),
        ("agent.restarted", "The previous agent (pid 4242, started 2026-12-07 00:30:00 UTC) ended without "
         f"stopping cleanly: it was killed or it crashed. HF_TOKEN={SECRET}"),
        ("door.down", "The front door did not start: it cannot listen on 0.0.0.0:4000 (Address already in use)"),
    ]  # fmt: skip
    for kind, text in said:
        body = {"kind": kind, "message": text} if kind == "restarted" else {"kind": kind, "reason": text}
        assert agent.post("events", body).status_code == 200
    host_event_record(host=other, kind=HostEvent.Kind.DOOR_DOWN, summary="the other host's door", reason="")
    return {"host": host, "agent": agent}


def _get(user: User, path: str, **headers: Any) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path, **headers)
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode())


def test_the_events_page_lists_the_hosts_events_newest_first_with_their_reasons(box, viewer):
    page = _get(viewer, "/hosts/gpu-box-1/events/")
    order = [
        "gpu-box-1's front door is down: clients of its endpoint get no answer.",
        "gpu-box-1's agent started again after its previous run was killed or crashed.",
        "The watchdog restarted the engine on gpu-box-1.",
    ]
    assert [page.index(text) for text in order] == sorted(page.index(text) for text in order)
    assert "Address already in use" in page and "pid 4242" in page and "killed by SIGKILL" in page
    assert "the other host's door" not in page
    assert SECRET not in page  # masked when it was recorded
    assert 'class="badge failed"' in page and 'class="badge warning"' in page  # door down; agent restarted
    assert 'hx-trigger="every 5s"' in page  # live


def test_the_kind_filter_shows_one_kind_and_the_poll_keeps_it(box, viewer):
    page = _get(viewer, "/hosts/gpu-box-1/events/?kind=agent.restarted")
    assert "pid 4242" in page and "Address already in use" not in page and "killed by SIGKILL" not in page
    assert "/hosts/gpu-box-1/events/?kind=agent.restarted" in page  # the poll asks for the same kind
    fragment = _get(viewer, "/hosts/gpu-box-1/events/?kind=door.down", HTTP_HX_REQUEST="true")
    assert "<html" not in fragment and fragment.startswith('<div id="host-events"')
    assert "Address already in use" in fragment and "pid 4242" not in fragment
    unknown = _get(viewer, "/hosts/gpu-box-1/events/?kind=nonsense")
    assert "No such kind of event: nonsense." in unknown and "pid 4242" not in unknown


def test_the_host_page_shows_the_last_events_and_links_to_the_page(box, viewer):
    for n in range(6):
        host_event_record(host=box["host"], kind=HostEvent.Kind.DOOR_UP, summary=f"door back #{n}")
    page = _get(viewer, "/hosts/gpu-box-1/")
    assert "door back #5" in page and "door back #1" in page and "door back #0" not in page  # the last five
    assert 'href="/hosts/gpu-box-1/events/" id="host-events-link"' in page
    recent = _get(viewer, "/hosts/gpu-box-1/events/?recent=1", HTTP_HX_REQUEST="true")
    assert recent.startswith('<div id="host-events-recent"') and "door back #5" in recent


def test_the_api_lists_a_hosts_events(box, viewer):
    token = token_create(user=viewer, name="ci", actor=viewer).secret
    client = Client()
    answer = client.get("/api/v1/hosts/gpu-box-1/events/?limit=2", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200
    data = answer.json()
    assert data["count"] == 3 and [e["kind"] for e in data["items"]] == ["door.down", "agent.restarted"]
    assert data["items"][0]["severity"] == "failure" and "Address already in use" in data["items"][0]["reason"]
    assert SECRET not in answer.content.decode()
    only = client.get("/api/v1/hosts/gpu-box-1/events/?kind=watchdog.restarted", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert [e["kind"] for e in only.json()["items"]] == ["watchdog.restarted"]
    bad = client.get("/api/v1/hosts/gpu-box-1/events/?kind=nonsense", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert bad.status_code == 400 and "kind must be one of" in bad.json()["detail"]


def test_a_bad_host_event_is_400_and_records_nothing(box):
    before = HostEvent.objects.count()
    for bad in (
        {"kind": "door.sideways", "reason": "x"},
        {"kind": "door.down", "reason": 5},
        {"kind": "agent.restarted", "reason": ["a"]},
    ):
        assert box["agent"].post("events", bad).status_code == 400
    assert HostEvent.objects.count() == before


def test_host_events_are_never_edited(box):
    event = HostEvent.objects.filter(host=box["host"]).first()
    event.summary = "rewritten"
    with pytest.raises(Exception, match="never edited"):
        event.save()


def test_every_host_event_kind_is_a_notification_a_rule_can_watch():
    from notifications.choices import RULE_EVENTS, SEVERITY

    assert set(HostEvent.Kind.values) <= {value for value, _ in RULE_EVENTS}
    assert set(HostEvent.Kind.values) <= set(SEVERITY)


def test_a_host_keeps_only_its_newest_events(box, settings, viewer):
    """A door that flaps all night must not grow the table without end: past HOST_EVENTS_KEPT the
    host's oldest go, its newest (and another host's events) stay."""
    settings.HOST_EVENTS_KEPT = 10
    host = box["host"]
    for n in range(12):
        body = {"kind": "door.up" if n % 2 else "door.down", "reason": f"flap {n}"}
        assert box["agent"].post("events", body).status_code == 200
    kept = list(HostEvent.objects.filter(host=host).order_by("pk").values_list("reason", flat=True))
    assert kept == [f"flap {n}" for n in range(2, 12)]  # the three from the fixture and flaps 0-1 went
    assert HostEvent.objects.exclude(host=host).filter(summary="the other host's door").exists()
    page = _get(viewer, f"/hosts/{host.name}/events/")
    assert "flap 11" in page and "flap 2" in page and "pid 4242" not in page
