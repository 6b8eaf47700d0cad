"""Where people read the lab router's URL (CONTROLPANEL_ROUTER_URL): the Keys page, and the
Exports page of a revision its host's front door carries: the configs' URL, the door's own a choice."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from deployments.services.front_door import front_door_report
from tests.hardware.factories import HostFactory

from .conftest import active_tiny_revision

pytestmark = pytest.mark.django_db
ROUTER = "https://llm.lab.example"


@pytest.fixture
def served(operator: User) -> Any:
    host = HostFactory(name="lab", address="10.0.0.7", model_dirs=["/models"], ram_bytes=8 << 30)
    revision = active_tiny_revision(host, operator, "coder")
    front_door_report(host=host, version="v1", bind="0.0.0.0:4000", state=[], usage=[])  # noqa: S104
    return revision


def test_the_keys_and_exports_pages_give_the_lab_routers_url(
    client: Client, admin_user: User, served: Any, settings: Any
) -> None:
    settings.ROUTER_URL = ROUTER
    client.force_login(admin_user)
    assert f"One URL for the whole lab: <code>{ROUTER}/v1</code>" in client.get("/keys/").content.decode()
    page = client.get(f"/hosts/lab/revisions/{served.number}/exports/").content.decode()
    assert f"<tr><th>Base URL</th><td><code>{ROUTER}/v1</code></td></tr>" in page  # the configs' URL now
    assert '<tr id="lab-router"><th>Host\'s front door</th><td><code>http://10.0.0.7:4000/v1</code>' in page
    by_door = client.get(f"/hosts/lab/revisions/{served.number}/exports/?via=door").content.decode()
    assert f'<tr id="lab-router"><th>Lab router</th><td><code>{ROUTER}/v1</code> with the same name' in by_door
    assert "whichever host serves <code>coder</code>" in by_door

    settings.ROUTER_URL = ""  # no router (CONTROLPANEL_ROUTER_BIND=off and no URL): neither page names one
    assert 'id="lab-router"' not in client.get("/keys/").content.decode()
    assert 'id="lab-router"' not in client.get(f"/hosts/lab/revisions/{served.number}/exports/").content.decode()
