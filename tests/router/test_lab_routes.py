"""The router's route table as the panel's database makes it (deployments.services.lab_routes):
which doors serve which names, and which may be used now."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from deployments.models import FrontDoor
from deployments.services.front_door import front_door_report
from deployments.services.inference_keys import key_create
from deployments.services.lab_routes import lab_routes
from hardware.models import Host
from tests.hardware.factories import HostFactory

from .conftest import active_tiny_revision

pytestmark = pytest.mark.django_db


def serving_host(name: str, operator: User, *, bind: str = "0.0.0.0:4000", loaded: bool = True) -> Host:  # noqa: S104
    host = HostFactory(name=name, address=f"10.0.0.{len(name)}", model_dirs=["/models"], last_heartbeat=timezone.now())
    active_tiny_revision(host, operator, "chat")
    state = [{"name": "tiny-r1", "phase": "loaded" if loaded else "unloaded"}]
    front_door_report(host=host, version="v1", bind=bind, state=state, usage=[])
    return host


def problems() -> dict[str, str]:
    return {door.host: door.problem for door in lab_routes().doors}


def test_each_door_with_its_names_aliases_url_and_the_doors_keys(operator: User, admin_user: User) -> None:
    serving_host("gpu-a", operator, loaded=False)
    serving_host("gpu-bb", operator, bind="[::]:4100")
    key_create(name="ci", models="chat", actor=admin_user)
    table = lab_routes()
    assert [(d.host, d.url, dict(d.labels), d.usable) for d in table.doors] == [
        ("gpu-a", "http://10.0.0.5:4000", {"tiny-r1": "tiny-r1", "chat": "tiny-r1"}, True),
        ("gpu-bb", "http://10.0.0.6:4100", {"tiny-r1": "tiny-r1", "chat": "tiny-r1"}, True),
    ]
    assert [r.door.host for r in table.routes("chat")] == ["gpu-bb", "gpu-a"]  # the one with it loaded first
    assert table.known("chat") and not table.known("coder") and table.routes("coder") == []
    assert [(k["name"], k["models"]) for k in table.keys["keys"]] == [("ci", ["chat"])]


def test_offline_hosts_stale_reports_and_doors_other_machines_cannot_reach_are_not_used(
    operator: User, settings: Any
) -> None:
    settings.ROUTER_STALE_S = 30
    for name in ("offline", "stale", "loopback", "fine"):
        serving_host(name, operator, bind="127.0.0.1:4000" if name == "loopback" else "0.0.0.0:4000")  # noqa: S104
    long_ago = timezone.now() - timedelta(seconds=settings.HOST_OFFLINE_AFTER_S + 1)
    Host.objects.filter(name="offline").update(last_heartbeat=long_ago)
    FrontDoor.objects.filter(host__name="stale").update(reported_at=timezone.now() - timedelta(seconds=31))
    found = problems()
    assert found["offline"] == "its host is offline"
    assert found["stale"] == "its front door's last report is 31 s old"
    assert "listens on 127.0.0.1:4000, which other machines cannot reach" in found["loopback"]
    assert found["fine"] == ""
    table = lab_routes()
    assert [r.door.host for r in table.routes("chat")] == ["fine"]
    assert sorted(table.unusable("chat"))[0].startswith("loopback: loopback's front door listens on 127.0.0.1:4000")
