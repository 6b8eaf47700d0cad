"""The door mode (issue 37): revoking the last inference key used to open every front door and the
lab router (an empty key table meant "open"). Now "open" and "keys required" are two explicit
states: open on a fresh install, keys required from the first key made on, changed by an admin
only, shown on the host page and the Keys page, in the audit log. A key goes in
`Authorization: Bearer` or `x-api-key`, at the door and at the router alike.

The door and the router are real (each in its own event loop, on this machine's lab address as
the router's other tests have them); what they serve and which keys they take is the panel's own
document for the host (what the agent polls) and the panel's own route table (what
`manage.py router` reads), re-read after each change in the panel. The door's one model names a
command that exits at once: a request that gets past the key check meets the real failed load
(503 `model_load_failed`), one that does not gets 401.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from core.models import AuditEvent
from deployments.models import DoorPolicy, InferenceKey
from deployments.services.front_door import front_door_document, front_door_report
from deployments.services.lab_routes import lab_routes
from hardware.models import Host
from hostagent.door.tables import serving_set
from hostagent.frontdoor import FrontDoor, FrontDoorSettings, KeyTable
from hostagent.frontdoor.launcher import Command, ProcessLoader
from labrouter.app import Router
from serving.lab_routes import LabRoutes
from tests.hardware.factories import HostFactory

from .conftest import active_tiny_revision, lab_address

pytestmark = pytest.mark.django_db
ASK = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


class Loop:
    """An event loop in its own thread, as the door and the router each run in their own process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class Lab:
    host: Host
    door: FrontDoor
    door_url: str
    router: Router
    router_url: str
    routes: list[LabRoutes]  # what the router reads next: the panel's table, as of the last sync()
    loop: Loop

    def sync(self) -> None:
        """What the agent and the router each do on their next poll: read the panel again."""
        keys = KeyTable.from_dict(front_door_document(self.host).keys)

        async def update() -> None:
            self.door.update_keys(keys)

        self.loop.call(update())
        self.routes[0] = lab_routes()
        read = self.router.read_at
        deadline = time.monotonic() + 5
        while self.router.read_at == read:  # the router's next read has the new table
            assert time.monotonic() < deadline, "the router never read its table again"
            time.sleep(0.02)


@pytest.fixture
def lab(operator: User, tmp_path: Path) -> Iterator[Lab]:
    address = lab_address()
    host = HostFactory(name="lab-a", address=address, model_dirs=["/models"], last_heartbeat=timezone.now())
    active_tiny_revision(host, operator, "chat")
    document = front_door_document(host).to_dict()
    loader = ProcessLoader({"tiny-r1": Command(("/bin/false",), "http://127.0.0.1:9/health")}, log_dir=tmp_path)
    settings = FrontDoorSettings(host="0.0.0.0", port=0, queue_wait_s=5.0)  # noqa: S104 - the lab's door
    loop = Loop()

    async def start_door() -> FrontDoor:
        keys = KeyTable.from_dict(document["keys"])
        table = serving_set(document, bind_host="127.0.0.1").table  # as the host's agent makes it
        door = FrontDoor(table, loader, lambda: {"ram": 1 << 40}, settings, keys=keys)
        await door.start()
        return door

    door = loop.call(start_door())
    state = [{"name": "tiny-r1", "phase": "unloaded"}]
    front_door_report(host=host, version=document["version"], bind=f"0.0.0.0:{door.port}", state=state, usage=[])  # noqa: S104
    routes = [lab_routes()]
    assert routes[0].doors[0].usable, routes[0].doors[0].problem

    async def read() -> LabRoutes:
        return routes[0]

    router = Router(read, port=0, refresh_s=0.05)
    loop.call(router.start())
    try:
        yield Lab(host, door, f"http://{address}:{door.port}", router, f"http://127.0.0.1:{router.port}", routes, loop)
    finally:
        loop.call(router.stop())
        loop.call(door.stop())
        loop.call(loader.close())
        loop.close()


def ask(url: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json=ASK, headers=headers, timeout=30)


def models(url: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/models", headers=headers, timeout=10)


def refused(answer: httpx.Response) -> bool:
    error = answer.json()["error"]
    return (
        answer.status_code == 401
        and error["code"] == "invalid_api_key"
        and "Authorization: Bearer" in error["message"]
        and "x-api-key" in error["message"]
    )


def let_in(answer: httpx.Response) -> bool:
    """Past the key check: the model's real load was tried (its command exits at once)."""
    return answer.status_code == 503 and answer.json()["error"]["code"] == "model_load_failed"


def make_key(client: Client, name: str) -> str:
    page = client.post("/keys/", {"name": name, "models": ""})
    assert page.status_code == 200, page.content[:500]
    return page.content.decode().split('id="new-key-secret">', 1)[1].split("<", 1)[0]


def test_revoking_the_last_key_leaves_every_door_and_the_router_closed(
    lab: Lab, client: Client, admin_user: User
) -> None:
    # A fresh install is open: no key, and requests with none are let in.
    assert not DoorPolicy.objects.exists()
    assert let_in(ask(lab.door_url)) and let_in(ask(lab.router_url))
    assert models(lab.router_url).status_code == 200

    client.force_login(admin_user)
    secret = make_key(client, "only")
    lab.sync()
    assert refused(ask(lab.door_url)) and refused(ask(lab.router_url))
    assert let_in(ask(lab.door_url, authorization=f"Bearer {secret}"))
    assert let_in(ask(lab.router_url, authorization=f"Bearer {secret}"))

    # The attack: the only key is revoked; a request with no Authorization must not get in.
    revoked = client.post("/keys/only/revoke/", follow=True)
    assert "No live key is left: every request is refused" in revoked.content.decode()
    assert InferenceKey.objects.get(name="only").revoked
    lab.sync()
    for url in (lab.door_url, lab.router_url):
        assert refused(ask(url)), url
        assert refused(ask(url, authorization=f"Bearer {secret}")) and refused(ask(url, **{"x-api-key": secret}))
        assert models(url).status_code == 401
    assert lab.router.keys.mode == "keys_required" and lab.door.keys.mode == "keys_required"


def test_an_anthropic_style_x_api_key_is_a_key_at_the_door_and_through_the_router(
    lab: Lab, client: Client, admin_user: User
) -> None:
    client.force_login(admin_user)
    secret = make_key(client, "claude-code")
    lab.sync()
    for url in (lab.door_url, lab.router_url):
        assert let_in(ask(url, **{"x-api-key": secret})), url  # the router passes it on; the door checks it
        assert sorted(m["id"] for m in models(url, **{"X-Api-Key": secret}).json()["data"]) == ["chat", "tiny-r1"]
        assert refused(ask(url, **{"x-api-key": "cpk_not-a-key"})), url
    through = ask(lab.router_url, **{"x-api-key": secret})
    assert through.headers["X-Controlpanel-Host"] == "lab-a"  # the door's answer, not the router's own
    usage = {row.key for row in lab.door.usage()}
    assert "claude-code" in usage  # metered to the key it carried


def test_only_an_admin_changes_the_mode_and_the_host_page_and_audit_log_show_it(
    lab: Lab, client: Client, operator: User, admin_user: User, viewer: User
) -> None:
    client.force_login(viewer)
    assert 'id="door-mode" data-mode="open"' in client.get("/hosts/lab-a/").content.decode()

    client.force_login(admin_user)
    make_key(client, "ci")
    first = AuditEvent.objects.get(action="keys.mode")
    assert "keys required" in first.summary and "the first key, ci, was made" in first.summary
    client.force_login(viewer)
    page = client.get("/hosts/lab-a/").content.decode()
    assert 'id="door-mode" data-mode="keys_required"' in page and "keys required" in page

    client.force_login(operator)
    assert client.post("/keys/mode/", {"mode": "open"}).status_code == 403
    assert DoorPolicy.objects.get().mode == "keys_required"
    lab.sync()
    assert refused(ask(lab.router_url))

    client.force_login(admin_user)
    assert client.post("/keys/mode/", {"mode": "closed-ish"}).status_code == 302  # refused, nothing changed
    assert DoorPolicy.objects.get().mode == "keys_required"
    client.post("/keys/mode/", {"mode": "open"})
    event = AuditEvent.objects.filter(action="keys.mode").latest("pk")
    assert event.actor == admin_user and event.data == {"before": "keys_required", "after": "open"}
    assert 'data-mode="open"' in client.get("/keys/").content.decode()
    lab.sync()
    assert let_in(ask(lab.door_url)) and let_in(ask(lab.router_url))  # open with a key live: an admin's choice
    make_key(client, "ci-2")  # a later key leaves the admin's choice as it is
    assert DoorPolicy.objects.get().mode == "open"
