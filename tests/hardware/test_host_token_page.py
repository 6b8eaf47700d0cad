"""An admin issues, rotates and revokes a host's agent token from the host page; the token is
shown once, on the answer to the POST, and works on the agent API until it is replaced."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from core.models import AuditEvent
from tests.hardware.factories import HostFactory

pytestmark = pytest.mark.django_db


def _agent_heartbeat(token: str) -> int:
    return (
        Client()
        .post(
            "/agent/v1/heartbeat",
            data=json.dumps({"engine_state": {}}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )
        .status_code
    )


def _issue(client: Client, name: str) -> str:
    page = client.post(reverse("hardware:host_token", args=[name]), {"action": "issue"})
    assert page.status_code == 200 and "no-store" in page["Cache-Control"]
    found = re.search(r'<code id="host-token">(cph_[^<]+)</code>', page.content.decode())
    assert found, page.content.decode()
    return found.group(1)


def test_admin_issues_rotates_and_revokes_the_agent_token(client, admin_user):
    host = HostFactory(name="gpu-a")
    client.force_login(admin_user)
    page = client.get(reverse("hardware:host_detail", args=["gpu-a"])).content.decode()
    assert "No agent token" in page and "Issue a token" in page

    first = _issue(client, "gpu-a")
    assert _agent_heartbeat(first) == 200
    page = client.get(reverse("hardware:host_detail", args=["gpu-a"])).content.decode()
    assert first[:12] in page and first not in page  # the prefix to tell it apart, never the token
    assert "Rotate the token" in page and "last used" in page

    second = _issue(client, "gpu-a")
    assert _agent_heartbeat(first) == 401 and _agent_heartbeat(second) == 200

    response = client.post(reverse("hardware:host_token", args=["gpu-a"]), {"action": "revoke"}, follow=True)
    assert "its agent is refused from now on" in response.content.decode()
    assert _agent_heartbeat(second) == 401
    actions = list(AuditEvent.objects.filter(host=host).values_list("action", "actor__username"))
    assert actions.count(("host.token.issue", "ada")) == 2 and ("host.token.revoke", "ada") in actions


def test_operators_neither_see_nor_issue_tokens(client, operator):
    HostFactory(name="gpu-b")
    client.force_login(operator)
    page = client.get(reverse("hardware:host_detail", args=["gpu-b"])).content.decode()
    assert "Agent token" not in page
    assert client.post(reverse("hardware:host_token", args=["gpu-b"]), {"action": "issue"}).status_code == 403
