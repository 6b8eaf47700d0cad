"""Scheduled rollouts (issue 28): a rollout waits for a time or for its canary's maintenance window,
like a switch or an alias move, from the service, the form, the API (the rollout body's `at` /
`window`) and the command (`--at` / `--window`); beat starts it when due, as the person who
scheduled it; it is checked on every host when scheduled (a refusal stores nothing) and can be
cancelled before it runs."""

from __future__ import annotations

import io
from datetime import time, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from core.models import AuditEvent
from deployments.models import DeploymentRevision, Operation
from rollouts.models import Rollout, RolloutHost
from schedules.models import ScheduledChange
from schedules.services import change_cancel, change_schedule, changes_run_due, window_set
from tests.changes.test_change_paths import _api
from tests.rollouts.conftest import fleet  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db
CHANGE = {"set": {"threads": 4}, "message": "four threads everywhere"}
PARAMS = {"group": "fleet", "kind": "revision", "change": CHANGE, "batch_size": 2, "canary": "fleet-c"}


def _schedule(actor: Any, params: dict[str, Any] | None = None, **when: Any) -> ScheduledChange:
    return change_schedule(kind="rollout", host=None, params=params or PARAMS, actor=actor, **when)


def test_a_scheduled_rollout_waits_then_beat_starts_it_as_its_person(
    fleet,  # noqa: F811
    operator,
    django_capture_on_commit_callbacks,
):
    at = timezone.now() + timedelta(hours=1)
    scheduled = _schedule(operator, at=at)
    assert scheduled.host == fleet["c"] and scheduled.kind == "rollout"  # kept on its canary's row
    assert scheduled.params["canary"] == "fleet-c" and scheduled.params["change"]["set"] == {"threads": 4}
    assert not Rollout.objects.exists() and DeploymentRevision.objects.count() == 4  # its trial was undone
    created = AuditEvent.objects.get(action="schedule.create")
    assert "rollout of fleet (threads=4)" in created.summary

    assert changes_run_due(now=at - timedelta(minutes=1)) == []
    with django_capture_on_commit_callbacks(execute=False):
        changes_run_due(now=at + timedelta(seconds=10))
    scheduled.refresh_from_db()
    rollout = Rollout.objects.get()
    assert scheduled.state == "ran" and scheduled.outcome == f"Rollout #{rollout.pk} of fleet started, fleet-c first."
    assert rollout.created_by == operator and rollout.state == "running"
    canary = RolloutHost.objects.get(rollout=rollout, wave=0)
    assert canary.host == fleet["c"] and canary.state == "switching"
    assert Operation.objects.get().requested_by == operator


def test_in_the_canarys_window_and_refused_without_one(fleet, operator):  # noqa: F811
    with pytest.raises(ValidationError, match="fleet-c has no maintenance window"):
        _schedule(operator, in_window=True)
    window_set(host=fleet["c"], weekdays=list(range(7)), start=time(1), end=time(2), tz="UTC", actor=operator)
    scheduled = _schedule(operator, in_window=True)
    assert scheduled.in_window and scheduled.host == fleet["c"]
    assert (scheduled.run_until - scheduled.run_at) <= timedelta(hours=1)


def test_a_rollout_refused_on_a_host_or_cancelled_never_starts(fleet, operator):  # noqa: F811
    bad = {**PARAMS, "change": {"set": {"no_such_knob": 1}, "message": "x"}}
    with pytest.raises(ValidationError, match="fleet-"):
        _schedule(operator, bad, at=timezone.now() + timedelta(hours=1))
    with pytest.raises(ValidationError, match="canary"):
        _schedule(operator, {**PARAMS, "canary": "elsewhere"}, at=timezone.now() + timedelta(hours=1))
    assert not ScheduledChange.objects.exists()
    scheduled = _schedule(operator, at=timezone.now() + timedelta(minutes=5))
    change_cancel(change=scheduled, actor=operator)
    assert changes_run_due(now=timezone.now() + timedelta(minutes=10)) == [] and not Rollout.objects.exists()


def test_a_host_busy_in_another_rollout_at_the_due_time_fails_it_with_the_reason(fleet, operator):  # noqa: F811
    scheduled = _schedule(operator, at=timezone.now())
    from rollouts.services import rollout_start

    rollout_start(group="only-c", kind="revision", change=CHANGE, batch_size=1, actor=operator)
    changes_run_due(now=timezone.now() + timedelta(seconds=5))
    scheduled.refresh_from_db()
    assert scheduled.state == "failed" and "Another rollout holds fleet-c" in scheduled.outcome
    assert Rollout.objects.count() == 1


def test_the_form_the_api_and_the_command_schedule_it(client, fleet, operator):  # noqa: F811
    at = (timezone.now() + timedelta(hours=4)).replace(second=0, microsecond=0)
    client.force_login(operator)
    form = {"group": "fleet", "kind": "revision", "knobs": "threads=4", "message": "four", "batch_size": "1"}
    response = client.post("/rollouts/new/", {**form, "when": "at", "at": at.strftime("%Y-%m-%dT%H:%M")})
    assert response.status_code == 302 and response["Location"] == "/schedule/?host=fleet-a"
    by_form = ScheduledChange.objects.get()
    assert by_form.run_at == at and by_form.kind == "rollout" and not Rollout.objects.exists()
    listed = client.get("/schedule/").content.decode()
    assert f'id="scheduled-{by_form.pk}"' in listed and "rollout of fleet (threads=4)" in listed
    refused = client.post("/rollouts/new/", {**form, "when": "at", "at": "tomorrow-ish"})
    assert refused.status_code == 400 and ScheduledChange.objects.count() == 1

    body = {"group": "fleet", "set": {"threads": 4}, "message": "four", "at": at.isoformat()}
    answer = _api(client, operator, "post", "/api/v1/rollouts/", body)
    assert answer.status_code == 202 and answer.json()["kind"] == "rollout" and answer.json()["host"] == "fleet-a"
    both = _api(client, operator, "post", "/api/v1/rollouts/", {**body, "window": True})
    assert both.status_code == 400 and ScheduledChange.objects.count() == 2

    out = io.StringIO()
    args = ["start", "--group", "fleet", "--set", "threads=4", "--message", "four", "--user", "otto"]
    call_command("rollout", *args, "--at", at.strftime("%Y-%m-%dT%H:%MZ"), stdout=out)
    third = ScheduledChange.objects.latest("pk")
    assert out.getvalue().startswith(f"Scheduled #{third.pk}: fleet-a rollout of fleet (threads=4) at ")
    assert not Rollout.objects.exists() and not Operation.objects.exists()
