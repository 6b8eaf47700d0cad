"""Rollouts and host tags from the command line and the API: the same services, the same
refusals (exit status 2 / HTTP 400 and 409, nothing changed)."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from api.tokens import token_create
from deployments.models import DeploymentRevision
from hardware.services import host_tag_names
from rollouts.models import Rollout

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_host_tags_and_a_rollout_from_the_shell(fleet):
    assert _run("host", "tag", "fleet-a").strip() == "fleet only-a"
    assert _run("host", "tag", "fleet-a", "fleet", "canary-box").strip() == "canary-box fleet"
    assert host_tag_names(fleet["a"]) == ["canary-box", "fleet"]
    with pytest.raises(CommandError, match="a tag is 1 to 40") as caught:
        _run("host", "tag", "fleet-a", "Bad Tag!")
    assert caught.value.returncode == 2 and host_tag_names(fleet["a"]) == ["canary-box", "fleet"]

    out = _run("rollout", "start", "--group", "fleet", "--set", "threads=4", "--message", "four", "--batch", "2")
    rollout = Rollout.objects.get()
    assert f"Rollout #{rollout.pk} of fleet: threads=4: running" in out
    assert "canary   fleet-a" in out and "switching to r2" in out and "wave 2   fleet-d" in out
    assert "paused" in _run("rollout", "pause", str(rollout.pk))
    assert f"#{rollout.pk}\tpaused\tfleet\t0/4 done" in _run("rollout", "list")
    assert "cancelled" in _run("rollout", "cancel", str(rollout.pk))


GATE_NOPE = ["--gate", "nope", "--max-drop", "decode=5"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["start", "--group", "fleet", "--message", "m"], "changes something"),
        (["start", "--group", "fleet", "--set", "threads=4"], "Say what"),
        (["start", "--group", "nobody", "--set", "threads=4", "--message", "m"], "no hosts"),
        (["start", "--group", "fleet", "--set", "threads=4", "--message", "m", "--batch", "0"], "batch"),
        (["start", "--group", "fleet", "--set", "threads=4", "--message", "m", *GATE_NOPE], "unknown profile"),
        (["start", "--group", "fleet", "--set", "threads=4", "--message", "m", "--max-drop", "5"], "go together"),
        (["show", "999"], "No rollout #999"),
        (["pause", "abc"], "whole number"),
    ],
)
def test_bad_input_on_the_command_line_exits_2_with_the_reason(fleet, args, says):
    before = DeploymentRevision.objects.count()
    with pytest.raises((CommandError, SystemExit)) as caught:
        _run("rollout", *args)
    if isinstance(caught.value, CommandError):
        assert caught.value.returncode == 2 and says in str(caught.value)
    assert not Rollout.objects.exists() and DeploymentRevision.objects.count() == before


def _api(client: Any, user: Any, method: str, path: str, body: Any = None) -> Any:
    token = token_create(user=user, name="t", actor=user).secret
    kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
    return getattr(client, method)(path, HTTP_AUTHORIZATION=f"Bearer {token}", **kwargs)


def test_the_api_starts_follows_and_refuses_an_overlapping_rollout_with_409(client, fleet, operator, viewer):
    body = {"group": "fleet", "set": {"threads": 4}, "message": "api", "batch_size": 3}
    made = _api(client, operator, "post", "/api/v1/rollouts/", body)
    assert made.status_code == 201, made.content
    got = made.json()
    assert got["state"] == "running" and [h["state"] for h in got["hosts"]] == ["switching"] + ["pending"] * 3
    assert got["hosts"][0]["previous"] == 1 and got["hosts"][0]["target"] == 2

    again = _api(client, operator, "post", "/api/v1/rollouts/", body)
    assert again.status_code == 409 and "Another rollout holds fleet-a" in again.json()["detail"]
    bad = _api(client, operator, "post", "/api/v1/rollouts/", {**body, "batch_size": 0})
    assert bad.status_code == 400 and "batch_size" in bad.json()["errors"]
    assert _api(client, viewer, "post", f"/api/v1/rollouts/{got['id']}/cancel/").status_code == 403
    assert Rollout.objects.count() == 1 and Rollout.objects.get().state == "running"
    tags = _api(client, operator, "put", "/api/v1/hosts/fleet-b/tags/", {"tags": ["Not OK"]})
    assert tags.status_code == 400 and host_tag_names(fleet["b"]) == ["fleet", "only-b"]
