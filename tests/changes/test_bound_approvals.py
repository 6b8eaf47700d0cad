"""An approval binds the exact hosts and revisions its request showed (issue 37): an operator opens
a rollout over a group with a protected host, tags a second protected host into the group
(operators may tag hosts), another operator approves. The second host is never switched under
that approval: the request is stale and says why, whether the group grew before the approval,
after it (a running rollout, a scheduled one when due), or lost a host; a timed change whose
target moved does not run when due. An unchanged group still runs as before."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from changes.choices import ChangeState
from changes.models import ChangeRequest
from changes.services import change_approve, change_reconfirm, host_review_set
from core.models import AuditEvent
from deployments.models import ModelVariant, Operation
from deployments.services.revisions import revision_mark_active
from deployments.services.switch import switch_request
from hardware.models import Host
from hardware.review import Approval, ApprovalStale, ChangeRequested
from hardware.services import host_tags_set
from notifications.models import Channel, Delivery, Rule
from notifications.secrets import url_encrypt
from rollouts.models import Rollout, RolloutHost
from rollouts.services import rollout_start, rollout_start_from
from schedules.models import ScheduledChange
from schedules.services import change_schedule, changes_run_due
from tests.changes.test_change_paths import _api
from tests.changes.test_rollout_requests import CHANGE
from tests.hardware.factories import HostFactory
from tests.rollouts.conftest import MODEL, end_switch, fleet  # noqa: F401 - the fixture
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def guarded(fleet, admin_user, operator):  # noqa: F811
    """The fleet (a..d tagged `fleet`, fleet-b requiring review) and fleet-e: protected, serving
    its r1, tagged `spare` (not in the group yet)."""
    host_review_set(host=fleet["b"], required=True, actor=admin_user)
    spare = HostFactory(name="fleet-e")
    host_tags_set(host=spare, tags=["spare"], actor=operator)
    first = make_revision(
        host=spare,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name=MODEL),
        knobs={"ctx_size": 4096, "n_gpu_layers": 0},
        message="first",
        actor=operator,
    )
    revision_mark_active(revision=first, actor=operator)
    host_review_set(host=spare, required=True, actor=admin_user)
    return {**fleet, "e": spare}


def _propose(author: Any, **when: Any) -> ChangeRequest:
    with pytest.raises(ChangeRequested) as caught:
        if when:
            params = {"group": "fleet", "kind": "revision", "change": CHANGE, "batch_size": 2}
            change_schedule(kind="rollout", host=None, params=params, actor=author, **when)
        else:
            rollout_start(group="fleet", kind="revision", change=CHANGE, batch_size=2, actor=author)
    return ChangeRequest.objects.get(pk=caught.value.change.pk)


def _tag_in(host: Host, operator: Any) -> None:
    host_tags_set(host=host, tags=["fleet", "spare"], actor=operator)


def _switched(host: Host) -> bool:
    return Operation.objects.filter(host=host, kind="switch").exists()


def test_the_request_binds_and_shows_the_hosts_and_revisions_it_covers(client, guarded, operator, reviewer):
    change = _propose(operator)
    assert [(h["name"], h["protected"], h["from"]) for h in change.bound["hosts"]] == [
        ("fleet-a", False, 1),
        ("fleet-b", True, 1),
        ("fleet-c", False, 1),
        ("fleet-d", False, 1),
    ]
    client.force_login(reviewer)
    page = client.get(f"/changes/{change.pk}/").content.decode()
    assert 'id="change-bound"' in page and "What an approval covers" in page
    for letter in "abcd":
        assert f'data-bound-host="fleet-{letter}"' in page
    assert 'data-bound-host="fleet-e"' not in page
    assert page.count("a new revision derived from r1") == 4
    read = _api(client, reviewer, "get", f"/api/v1/changes/{change.pk}/").json()
    assert [(b["name"], b["protected"], b["gets"]) for b in read["bound"]][:2] == [
        ("fleet-a", False, "a new revision derived from r1"),
        ("fleet-b", True, "a new revision derived from r1"),
    ]


def test_a_protected_host_tagged_in_before_the_approval_is_not_switched_and_the_request_is_stale(
    client, guarded, operator, reviewer
):
    change = _propose(operator)
    _tag_in(guarded["e"], operator)  # the attack: the author grows the group after opening
    reason = "the group now holds host fleet-e (requires review), which this approval did not cover"
    with pytest.raises(ValidationError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        change_approve(change=change, actor=reviewer)
    assert not Rollout.objects.exists() and not Operation.objects.exists()
    assert ChangeRequest.objects.get().state == ChangeState.OPEN
    client.force_login(reviewer)
    page = client.get(f"/changes/{change.pk}/").content.decode()
    assert "Stale:" in page and reason in page and "Approve and run" not in page

    change_reconfirm(change=change, comment="fleet-e too", actor=operator)  # bound again, shown again
    change = change_approve(change=change, actor=reviewer)  # a fresh approval that covers fleet-e
    assert {p.host.name for p in RolloutHost.objects.filter(rollout=change.rollout)} == {
        "fleet-a",
        "fleet-b",
        "fleet-c",
        "fleet-d",
        "fleet-e",
    }


def test_an_approval_from_the_page_binds_what_the_page_showed(client, guarded, operator, reviewer):
    """The author grows the group and re-confirms while the reviewer reads the page: the reviewer's
    click approves what they were shown, not the re-bound set, so it is refused."""
    change = _propose(operator)
    client.force_login(reviewer)
    page = client.get(f"/changes/{change.pk}/").content.decode()
    seen = re.search(r'name="seen" value="([0-9a-f]+)"', page).group(1)
    _tag_in(guarded["e"], operator)
    change_reconfirm(change=change, actor=operator)
    response = client.post(f"/changes/{change.pk}/decide/", {"verdict": "approve", "seen": seen}, follow=True)
    assert "was re-confirmed since you read it" in response.content.decode()
    assert not Rollout.objects.exists() and ChangeRequest.objects.get().state == ChangeState.OPEN
    page = client.get(f"/changes/{change.pk}/").content.decode()  # read again: fleet-e is shown
    assert 'data-bound-host="fleet-e"' in page
    seen = re.search(r'name="seen" value="([0-9a-f]+)"', page).group(1)
    client.post(f"/changes/{change.pk}/decide/", {"verdict": "approve", "seen": seen})
    assert RolloutHost.objects.filter(host=guarded["e"]).exists()


def test_a_host_removed_a_host_protected_or_a_revision_moved_makes_it_stale(guarded, operator, reviewer, admin_user):
    change = _propose(operator)
    host_tags_set(host=guarded["c"], tags=["only-c"], actor=operator)
    host_review_set(host=guarded["d"], required=True, actor=admin_user)
    other = make_revision(
        host=guarded["a"],
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name=MODEL),
        knobs={"ctx_size": 2048, "n_gpu_layers": 0},
        message="smaller",
        actor=operator,
    )
    revision_mark_active(revision=other, actor=operator)
    with pytest.raises(ValidationError) as refused:
        change_approve(change=change, actor=reviewer)
    said = str(refused.value)
    assert "the group no longer holds host fleet-c, which this approval covered" in said
    assert "fleet-d now requires review" in said
    assert "fleet-a serves r2 now: its new revision would derive from it (was r1)" in said
    assert not Rollout.objects.exists() and not Operation.objects.exists()


def test_a_protected_host_tagged_in_after_the_approval_is_never_switched_by_the_running_rollout(
    guarded, operator, reviewer, django_capture_on_commit_callbacks
):
    change = change_approve(change=_propose(operator), actor=reviewer)
    _tag_in(guarded["e"], operator)  # the rollout is running: its hosts were fixed when it started
    rollout = change.rollout
    for _ in range(3):  # the canary, then two waves of two
        for part in RolloutHost.objects.filter(rollout=rollout, state="switching").select_related("operation"):
            end_switch(part.operation, True, django_capture_on_commit_callbacks)
    rollout.refresh_from_db()
    assert rollout.state == Rollout.State.SUCCEEDED
    assert not _switched(guarded["e"]) and not RolloutHost.objects.filter(host=guarded["e"]).exists()
    assert all(_switched(guarded[letter]) for letter in "abcd")


def test_a_later_waves_host_that_moved_on_since_the_approval_is_not_switched(
    guarded, operator, reviewer, django_capture_on_commit_callbacks
):
    """The approval showed fleet-c's new revision derived from r1; fleet-c serves r2 by its wave:
    what it would get is not what was approved, so it is refused and its wave put back."""
    change = change_approve(change=_propose(operator), actor=reviewer)
    moved = make_revision(
        host=guarded["c"],
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name=MODEL),
        knobs={"ctx_size": 2048, "n_gpu_layers": 0},
        message="meanwhile",
        actor=operator,
    )
    revision_mark_active(revision=moved, actor=None)
    canary = RolloutHost.objects.get(rollout=change.rollout, wave=0)
    end_switch(canary.operation, True, django_capture_on_commit_callbacks)
    part = RolloutHost.objects.get(rollout=change.rollout, host=guarded["c"])
    assert part.state == "failed" and "serves r2 now, not r1" in part.message and "fresh approval" in part.message
    assert not _switched(guarded["c"]) and not _switched(guarded["d"])


def test_the_old_approval_cannot_start_the_rollout_over_the_grown_group(guarded, operator, reviewer):
    """The check inside rollout_start itself: a group grown between the approval's staleness check
    and the rollout's start (another transaction) is refused there, with nothing started."""
    change = _propose(operator)
    _tag_in(guarded["e"], operator)
    covered = frozenset(guarded[letter].pk for letter in "abcd")
    with pytest.raises(ApprovalStale, match="now holds host fleet-e"):
        rollout_start_from(change.params, actor=operator, approval=Approval(change.pk, reviewer, hosts=covered))
    assert not Rollout.objects.exists() and not Operation.objects.exists()
    with pytest.raises(ApprovalStale, match="fleet-e is not among the hosts"):  # the gate, host by host
        revision = guarded["e"].revisions.get(number=1)
        switch_request(revision=revision, actor=operator, approval=Approval(change.pk, reviewer, covered))
    assert not _switched(guarded["e"])


def test_a_scheduled_rollout_whose_group_grew_after_approval_does_not_run_when_due(
    guarded, operator, reviewer, django_capture_on_commit_callbacks
):
    channel = Channel.objects.create(
        name="ops", scheme="json", service="JSON", url_ciphertext=url_encrypt("json://127.0.0.1:9/")
    )
    Rule.objects.create(channel=channel, host=guarded["a"], events=["schedule.failed"])
    at = timezone.now() + timedelta(hours=1)
    change = change_approve(change=_propose(operator, at=at), actor=reviewer)
    scheduled = ScheduledChange.objects.get()
    _tag_in(guarded["e"], operator)  # after the approval, before it is due
    with django_capture_on_commit_callbacks(execute=True):
        changes_run_due(now=at + timedelta(seconds=5))
    scheduled.refresh_from_db()
    assert scheduled.state == "failed" and "went stale since its approval" in scheduled.outcome
    assert "the group now holds host fleet-e (requires review), which this approval did not cover" in scheduled.outcome
    assert not Rollout.objects.exists() and not Operation.objects.exists()
    change.refresh_from_db()
    assert change.state == ChangeState.STALE and "fleet-e" in change.stale_reason
    assert AuditEvent.objects.filter(action="change.stale").exists()
    assert Delivery.objects.get(channel=channel).event == "schedule.failed"  # notified
    with pytest.raises(ValidationError, match="went stale after its approval"):
        change_approve(change=change, actor=reviewer)  # it needs its author's re-confirmation first
    change_reconfirm(change=change, actor=operator)
    change.refresh_from_db()
    assert change.state == ChangeState.OPEN and "fleet-e" in [h["name"] for h in change.bound["hosts"]]


def test_a_timed_switch_whose_host_moved_on_after_approval_does_not_run_when_due(protected, operator, reviewer):
    at = timezone.now() + timedelta(hours=1)
    with pytest.raises(ChangeRequested) as caught:
        change_schedule(kind="switch", host=protected["host"], params={"revision": 2}, at=at, actor=operator)
    change = change_approve(change=ChangeRequest.objects.get(pk=caught.value.change.pk), actor=reviewer)
    revision_mark_active(revision=protected["r"][3], actor=None)  # meanwhile the host moved on
    changes_run_due(now=at + timedelta(seconds=5))
    scheduled = ScheduledChange.objects.get()
    assert scheduled.state == "failed" and "the active revision is r3 now (was r1)" in scheduled.outcome
    assert not Operation.objects.exists()
    change.refresh_from_db()
    assert change.state == ChangeState.STALE


def test_an_unchanged_group_still_runs_under_its_approval(guarded, operator, reviewer):
    at = timezone.now() + timedelta(hours=1)
    change_approve(change=_propose(operator, at=at), actor=reviewer)
    host_tags_set(host=guarded["e"], tags=["spare", "other"], actor=operator)  # not the group
    changes_run_due(now=at + timedelta(seconds=5))
    rollout = Rollout.objects.get()
    assert ScheduledChange.objects.get().state == "ran" and rollout.state == Rollout.State.RUNNING
    assert RolloutHost.objects.filter(rollout=rollout).count() == 4
    assert ChangeRequest.objects.get().state == ChangeState.APPROVED


def test_a_request_opened_before_approvals_bound_their_hosts_is_stale_until_reconfirmed(guarded, operator, reviewer):
    change = _propose(operator)
    ChangeRequest.objects.filter(pk=change.pk).update(bound={})  # as the migration leaves an older request
    change.refresh_from_db()
    with pytest.raises(ValidationError, match="opened before approvals bound the hosts and revisions"):
        change_approve(change=change, actor=reviewer)
    assert not Rollout.objects.exists()
    change_reconfirm(change=change, actor=operator)
    assert change_approve(change=change, actor=reviewer).rollout is not None
