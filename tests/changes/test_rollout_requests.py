"""A rollout over a group with a host that requires review (issue 30): it becomes a change request
of kind "rollout" and nothing starts; the request's page shows each host's part (the diff, the
planner, the waves); another operator approves it (never its author, never a viewer) and the
rollout starts, its switches carrying the approval so the protected host's wave runs; author and
approver are in the audit. A rejected one starts nothing."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command
from django.utils import timezone

from changes.choices import ChangeState
from changes.models import ChangeRequest
from changes.services import change_approve, change_reject, host_review_set
from core.models import AuditEvent
from deployments.models import DeploymentRevision, Operation
from hardware.review import ChangeRequested
from rollouts.models import Rollout, RolloutHost
from rollouts.services import rollout_start
from schedules.models import ScheduledChange
from schedules.services import change_schedule, changes_run_due
from tests.changes.test_change_paths import _api
from tests.rollouts.conftest import end_switch, fleet  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db
CHANGE = {"set": {"threads": 4}, "message": "four threads everywhere"}


@pytest.fixture
def guarded(fleet, admin_user):  # noqa: F811
    """The fleet with fleet-b requiring review."""
    host_review_set(host=fleet["b"], required=True, actor=admin_user)
    return fleet


def _propose(author: Any) -> ChangeRequest:
    with pytest.raises(ChangeRequested) as caught:
        rollout_start(group="fleet", kind="revision", change=CHANGE, batch_size=2, actor=author)
    return ChangeRequest.objects.get(pk=caught.value.change.pk)


def test_a_rollout_over_a_protected_host_opens_a_request_and_starts_nothing(guarded, operator):
    change = _propose(operator)
    assert (change.kind, change.state, change.author, change.host) == ("rollout", "open", operator, guarded["b"])
    assert change.params == {
        "group": "fleet",
        "kind": "revision",
        "change": {"set": {"threads": 4}, "set_env": {}, "model": None, "message": "four threads everywhere"},
        "batch_size": 2,
        "canary": "fleet-a",
    }
    assert "rollout of fleet: threads=4" in change.summary
    assert not Rollout.objects.exists() and not Operation.objects.exists()
    assert DeploymentRevision.objects.count() == 4  # the trial's revisions were undone: each host has its r1


def test_a_refused_rollout_opens_no_request(guarded, operator):
    bad = {"set": {"no_such_knob": 1}, "message": "x"}
    with pytest.raises(ValidationError, match="fleet-a"):
        rollout_start(group="fleet", kind="revision", change=bad, batch_size=1, actor=operator)
    assert not ChangeRequest.objects.exists()


def test_the_request_page_shows_each_hosts_diff_planner_and_wave(client, guarded, operator, reviewer):
    change = _propose(operator)
    client.force_login(reviewer)
    page = client.get(f"/changes/{change.pk}/").content.decode()
    assert 'id="rollout-preview"' in page
    for letter in "abcd":
        assert f'data-host="fleet-{letter}"' in page
    assert "Canary" in page and "Wave 1" in page and "Wave 2" in page
    assert page.count("threads") >= 4  # the knob's change in each host's diff
    assert "r1 → a new revision (r2 if made now)" in page
    assert "Planner" in page and "Approve and run" in page
    assert DeploymentRevision.objects.count() == 4  # reading the page made nothing


def test_neither_the_author_nor_a_viewer_approves_and_a_rejected_one_starts_nothing(
    guarded, operator, viewer, reviewer
):
    change = _propose(operator)
    with pytest.raises(PermissionDenied, match="own request"):
        change_approve(change=change, actor=operator)
    with pytest.raises(PermissionDenied):
        change_approve(change=change, actor=viewer)
    change_reject(change=change, comment="not this week", actor=reviewer)
    assert ChangeRequest.objects.get().state == ChangeState.REJECTED
    assert not Rollout.objects.exists() and not Operation.objects.exists()


def test_an_approved_rollout_starts_and_its_protected_hosts_wave_runs_with_both_people(
    client, guarded, operator, reviewer, django_capture_on_commit_callbacks
):
    change = _propose(operator)
    change = change_approve(change=change, comment="go", actor=reviewer)
    rollout = Rollout.objects.get()
    assert change.state == ChangeState.APPROVED and change.rollout == rollout and change.operation is None
    assert (rollout.created_by, rollout.approved_by, rollout.change_request) == (operator, reviewer, change.pk)
    started = AuditEvent.objects.get(action="rollout.start")
    assert started.actor == operator and started.data["approved_by"] == "olga"
    assert started.data["change_request"] == change.pk
    assert AuditEvent.objects.get(action="change.approve").data["rollout"] == rollout.pk

    canary = RolloutHost.objects.get(rollout=rollout, wave=0)
    assert canary.host.name == "fleet-a" and canary.operation.params["approved_by"] == "olga"
    end_switch(canary.operation, True, django_capture_on_commit_callbacks)
    guarded_part = RolloutHost.objects.get(rollout=rollout, host=guarded["b"])
    assert guarded_part.state == "switching", guarded_part.message  # the approval carried to its wave
    assert guarded_part.operation.requested_by == operator
    assert guarded_part.operation.params["change_request"] == change.pk
    assert ChangeRequest.objects.count() == 1  # no request of its own for the wave's switch
    client.force_login(reviewer)
    page = client.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert f'approved by olga (<a href="/changes/{change.pk}/">change request #{change.pk}</a>)' in page
    read = _api(client, reviewer, "get", f"/api/v1/rollouts/{rollout.pk}/").json()
    assert (read["created_by"], read["approved_by"], read["change_request"]) == ("otto", "olga", change.pk)


def test_the_rollout_command_and_the_form_open_the_request(client, guarded, operator):
    out = io.StringIO()
    call_command(
        "rollout", "start", "--group", "fleet", "--set", "threads=4", "--message", "four", "--user", "otto", stdout=out
    )
    assert "requires review" in out.getvalue() and ChangeRequest.objects.count() == 1
    client.force_login(operator)
    form = {"group": "fleet", "kind": "revision", "knobs": "threads=6", "message": "six", "batch_size": "1"}
    response = client.post("/rollouts/new/", form)
    second = ChangeRequest.objects.latest("pk")
    assert response.status_code == 302 and response["Location"] == f"/changes/{second.pk}/"
    assert second.params["change"]["set"] == {"threads": "6"} and not Rollout.objects.exists()


def test_a_rollout_scheduled_over_a_protected_host_is_reviewed_then_started_by_beat_with_the_approval(
    guarded, operator, reviewer, django_capture_on_commit_callbacks
):
    at = timezone.now() + timedelta(hours=1)
    params = {"group": "fleet", "kind": "revision", "change": CHANGE, "batch_size": 3}
    with pytest.raises(ChangeRequested) as caught:
        change_schedule(kind="rollout", host=None, params=params, at=at, actor=operator)
    change = ChangeRequest.objects.get(pk=caught.value.change.pk)
    assert change.kind == "rollout" and change.params["when"] == {"at": at.isoformat()}
    assert not ScheduledChange.objects.exists()

    change = change_approve(change=change, actor=reviewer)
    scheduled = ScheduledChange.objects.get()
    assert change.scheduled == scheduled and change.rollout is None and not Rollout.objects.exists()
    assert (scheduled.kind, scheduled.host, scheduled.approved_by) == ("rollout", guarded["a"], reviewer)
    with django_capture_on_commit_callbacks(execute=False):
        changes_run_due(now=at + timedelta(seconds=5))
    rollout = Rollout.objects.get()
    assert (rollout.created_by, rollout.approved_by, rollout.change_request) == (operator, reviewer, change.pk)
    assert ScheduledChange.objects.get().state == "ran" and ChangeRequest.objects.count() == 1
