"""The rollout pages and the host page's groups, through the views (the live page in a real
browser is tests/browser/test_rollout_live.py)."""

from __future__ import annotations

import pytest

from hardware.services import host_tag_names
from rollouts.models import Rollout

pytestmark = pytest.mark.django_db


def test_groups_are_set_on_the_host_page_by_an_operator_and_only_shown_to_a_viewer(client, fleet, operator, viewer):
    client.force_login(operator)
    response = client.post("/hosts/fleet-a/tags/", {"tags": "gpu-a, Fleet"}, follow=True)
    assert host_tag_names(fleet["a"]) == ["fleet", "gpu-a"]
    assert b"fleet-a&#x27;s tags: fleet, gpu-a." in response.content
    client.post("/hosts/fleet-a/tags/", {"tags": "no spaces!"})
    assert host_tag_names(fleet["a"]) == ["fleet", "gpu-a"]  # refused, nothing changed
    client.force_login(viewer)
    page = client.get("/hosts/fleet-a/").content.decode()
    assert 'href="/rollouts/new/?group=gpu-a"' in page and "Set groups" not in page


def test_the_form_starts_a_rollout_or_says_why_not_and_the_status_stops_polling_when_it_ends(client, fleet, operator):
    client.force_login(operator)
    form = {"group": "fleet", "kind": "revision", "knobs": "threads=4", "message": "", "batch_size": "2"}
    refused = client.post("/rollouts/new/", form)
    assert refused.status_code == 400 and "Say what the change is for" in refused.content.decode()
    assert not Rollout.objects.exists()
    started = client.post("/rollouts/new/", {**form, "message": "four threads"})
    rollout = Rollout.objects.get()
    assert started.status_code == 302 and started.url == f"/rollouts/{rollout.pk}/"
    live = client.get(f"/rollouts/{rollout.pk}/status/", HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and 'data-host="fleet-a" data-state="switching"' in live.content.decode()
    client.post(f"/rollouts/{rollout.pk}/cancel/")
    ended = client.get(f"/rollouts/{rollout.pk}/status/", HTTP_HX_REQUEST="true")
    assert ended.status_code == 286 and "Cancelled by otto" in ended.content.decode()
    assert "rollout-cancel" not in ended.content.decode()
    listed = client.get("/rollouts/").content.decode()
    assert f"#{rollout.pk}</a>" in listed and "threads=4" in listed and "Cancelled" in listed
