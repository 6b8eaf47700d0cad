"""The host page's front-door section and the dashboard's card change live in a real browser: a
new report from the host's front door (requests waiting, a model's phase, the loaded set) shows
within a poll or two, no reload."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from deployments.models import ModelVariant
from deployments.services.revisions import revision_mark_active
from hardware.credentials import host_token_issue
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _report(token: str, phase: str, waiting: int) -> None:
    row = {"name": "tiny-r1", "mode": "pinned", "phase": phase, "in_flight": 1, "waiting": waiting}
    row |= {"aliases": ["coder"], "memory": {"ram": 1 << 30}}
    body = {"version": "v1", "bind": "127.0.0.1:4000", "state": [row], "usage": []}
    response = Client().post(
        "/agent/v1/serving/report", json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip
    assert response.status_code == 204


def test_the_front_door_section_changes_live(live_server: Any, page: Any, viewer: User, operator: User) -> None:
    from playwright.sync_api import expect

    host, token = host_token_issue(name="door", actor=None)
    host.last_heartbeat, host.ram_bytes, host.model_dirs = timezone.now(), 8 << 30, ["/models"]
    host.save()
    variant = ModelVariant.objects.create(
        name="tiny-gguf", format="gguf", gguf_file="/models/tiny.gguf", weights_bytes=1 << 30,
        arch={"architecture": "gemma3", "num_layers": 18},
    )  # fmt: skip
    r1 = make_revision(
        host=host, engine="llama.cpp", model_variant=variant, served_name="tiny", port=8001,
        knobs={"ctx_size": 2048}, message="first", actor=operator,
    )  # fmt: skip
    revision_mark_active(revision=r1, actor=operator)
    _report(token, "loading", 5)

    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "vera")
    page.fill("input[name=password]", "pw-vera")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/hosts/door/")
    section = page.locator("#front-door")
    expect(section.locator("tr[data-model='tiny-r1'] .fd-phase")).to_have_text("loading")
    expect(section.locator(".fd-waiting")).to_have_text("5 waiting")

    _report(token, "loaded", 0)
    expect(section.locator("tr[data-model='tiny-r1'] .fd-phase")).to_have_text("loaded", timeout=15_000)
    expect(section.locator(".fd-waiting")).to_have_text("0 waiting")

    page.goto(f"{live_server.url}/")  # the dashboard's card of the host, polled as the page does
    line = page.locator("#host-card-door .front-door-line")
    expect(line.locator(".fd-loaded")).to_have_text("1 loaded")
    expect(line).to_contain_text("1 GiB planned")
    expect(line.locator(".fd-aliases")).to_contain_text("coder→tiny-r1")
    _report(token, "loading", 3)
    expect(line.locator(".fd-loaded")).to_have_text("0 loaded", timeout=15_000)
    expect(line.locator(".fd-loading")).to_have_text("1 loading")
    expect(line.locator(".fd-waiting")).to_have_text("3 waiting")
    assert page.native_dialogs == []
