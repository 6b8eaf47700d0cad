"""Change requests that carry a time (issue 30 with 28's schedules): a switch or an alias move
scheduled on a protected host opens a request with its time and schedules nothing; approved, it
becomes a scheduled change (not run at once) that beat runs when due with the approval, shown on
the request and the schedule list; its schedule can be cancelled before it runs."""

from __future__ import annotations

import io
from datetime import time, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from changes.choices import ChangeState
from changes.models import ChangeRequest
from changes.services import change_approve, change_reconfirm, host_review_set
from core.models import AuditEvent
from deployments.models import Operation
from hardware.review import ChangeRequested
from schedules.models import ScheduledChange
from schedules.services import change_schedule, changes_run_due, window_set
from tests.changes.test_change_paths import _api

pytestmark = pytest.mark.django_db


def _propose(protected, author, **when) -> ChangeRequest:
    with pytest.raises(ChangeRequested) as caught:
        change_schedule(kind="switch", host=protected["host"], params={"revision": 2}, actor=author, **when)
    return ChangeRequest.objects.get(pk=caught.value.change.pk)


def test_a_switch_scheduled_on_a_protected_host_opens_a_request_with_its_time(client, protected, operator, reviewer):
    at = (timezone.now() + timedelta(hours=3)).replace(second=0, microsecond=0)
    change = _propose(protected, operator, at=at)
    assert change.kind == "switch" and change.params["when"] == {"at": at.isoformat()}
    assert not ScheduledChange.objects.exists() and not Operation.objects.exists()
    client.force_login(reviewer)
    page = client.get(f"/changes/{change.pk}/").content.decode()
    assert f"Runs at {at:%Y-%m-%d %H:%M} UTC once approved, not at once." in page
    listed = client.get("/schedule/").content.decode()  # awaiting review, not scheduled yet
    assert f'id="awaiting-{change.pk}"' in listed and f"at {at:%Y-%m-%d %H:%M} UTC" in listed


def test_approved_it_is_scheduled_not_run_and_beat_runs_it_with_the_approval(
    client, protected, operator, reviewer, django_capture_on_commit_callbacks
):
    at = timezone.now() + timedelta(hours=2)
    change = change_approve(change=_propose(protected, operator, at=at), comment="tonight", actor=reviewer)
    scheduled = ScheduledChange.objects.get()
    assert change.state == ChangeState.APPROVED and change.scheduled == scheduled and change.operation is None
    assert not Operation.objects.exists()  # not at once
    assert (scheduled.run_at, scheduled.created_by, scheduled.approved_by) == (at, operator, reviewer)
    assert scheduled.change_request == change.pk and "when" not in scheduled.params
    created = AuditEvent.objects.get(action="schedule.create")
    assert created.actor == operator and created.data["approved_by"] == "olga"

    client.force_login(reviewer)
    assert f"scheduled change #{scheduled.pk}</a>, pending" in client.get(f"/changes/{change.pk}/").content.decode()
    listed = client.get("/schedule/?host=guarded").content.decode()
    assert f'id="scheduled-{scheduled.pk}"' in listed and "switch to r2" in listed
    assert f'approved by olga (<a href="/changes/{change.pk}/">change request #{change.pk}</a>)' in listed
    item = _api(client, reviewer, "get", "/api/v1/schedules/?host=guarded").json()["items"][0]
    assert (item["change_request"], item["approved_by"], item["state"]) == (change.pk, "olga", "pending")

    assert changes_run_due(now=at - timedelta(minutes=5)) == []  # not yet
    with django_capture_on_commit_callbacks(execute=False):
        changes_run_due(now=at + timedelta(seconds=30))
    scheduled.refresh_from_db()
    op = Operation.objects.get()
    assert scheduled.state == "ran" and scheduled.operation == op
    assert op.requested_by == operator and op.params["approved_by"] == "olga"
    assert op.params["change_request"] == change.pk and ChangeRequest.objects.count() == 1


def test_its_schedule_can_be_cancelled_before_it_runs(client, protected, operator, reviewer):
    at = timezone.now() + timedelta(hours=1)
    change = change_approve(change=_propose(protected, operator, at=at), actor=reviewer)
    client.force_login(reviewer)
    assert 'id="cancel-scheduled"' in client.get(f"/changes/{change.pk}/").content.decode()
    client.post(f"/schedule/{change.scheduled_id}/cancel/")
    assert ScheduledChange.objects.get().state == "cancelled"
    assert changes_run_due(now=at + timedelta(minutes=1)) == [] and not Operation.objects.exists()


def test_a_request_in_the_hosts_window_is_scheduled_in_it(protected, operator, reviewer):
    window_set(host=protected["host"], weekdays=list(range(7)), start=time(2), end=time(4), tz="UTC", actor=operator)
    change = _propose(protected, operator, in_window=True)
    assert change.params["when"] == {"window": True}
    change_approve(change=change, actor=reviewer)
    scheduled = ScheduledChange.objects.get()
    assert scheduled.in_window and scheduled.run_at.hour in (2, 3) or scheduled.run_at <= timezone.now()


def test_a_time_already_past_at_approval_is_refused_and_the_request_stays_open(protected, operator, reviewer):
    change = _propose(protected, operator, at=timezone.now() + timedelta(seconds=1))
    change.params["when"] = {"at": (timezone.now() - timedelta(hours=1)).isoformat()}
    change.save()
    with pytest.raises(ValidationError, match="the request itself changed since it was opened"):
        change_approve(change=change, actor=reviewer)  # any change to the request: stale
    change_reconfirm(change=change, actor=operator)
    with pytest.raises(ValidationError, match="in the past"):
        change_approve(change=change, actor=reviewer)
    assert ChangeRequest.objects.get().state == ChangeState.OPEN and not ScheduledChange.objects.exists()


def test_the_commands_and_the_api_open_timed_requests(client, protected, operator, reviewer):
    out = io.StringIO()
    at = (timezone.now() + timedelta(hours=5)).strftime("%Y-%m-%dT%H:%MZ")
    call_command("switch", "--host", "guarded", "--revision", "2", "--at", at, "--user", "otto", stdout=out)
    assert "requires review" in out.getvalue() and ChangeRequest.objects.get().params["when"]["at"]
    call_command("alias", "set", "coder", "--host", "guarded", "--revision", "2", "--at", at, "--user", "otto")
    assert ChangeRequest.objects.filter(kind="alias").count() == 1
    body = {"kind": "switch", "host": "guarded", "revision": 3, "at": at}
    answer = _api(client, operator, "post", "/api/v1/schedules/", body)
    assert answer.status_code == 202 and answer.json()["change_request"]["params"]["when"]["at"]
    body = {"host": "guarded", "kind": "switch", "revision": 2, "at": at}
    opened = _api(client, operator, "post", "/api/v1/changes/", body)
    assert opened.status_code == 201 and opened.json()["params"]["when"]["at"]
    assert not ScheduledChange.objects.exists() and not Operation.objects.exists()


def test_a_change_scheduled_before_its_host_was_protected_fails_when_due_and_runs_nothing(
    protected, operator, admin_user
):
    host_review_set(host=protected["host"], required=False, actor=admin_user)
    scheduled = change_schedule(
        kind="switch", host=protected["host"], params={"revision": 2}, at=timezone.now(), actor=operator
    )
    host_review_set(host=protected["host"], required=True, actor=admin_user)
    changes_run_due(now=timezone.now() + timedelta(seconds=5))
    scheduled.refresh_from_db()
    assert scheduled.state == "failed" and "requires review since it was scheduled" in scheduled.outcome
    assert not Operation.objects.exists() and not ChangeRequest.objects.exists()
