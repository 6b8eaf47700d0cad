"""Scheduled changes: beat's task runs what is due through the same services as a manual change,
as the person who scheduled it (role checked again then), once, and retries a busy host until its
time is up. The beat task is called as beat calls it (the task function); the switch it queues is
a real Operation row and the audit and notification rows are real."""

from __future__ import annotations

from datetime import time, timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from core.models import AuditEvent
from deployments.models import ModelAlias, Operation
from deployments.services.aliases import alias_set
from deployments.services.serving_set import serving_mode_set
from hardware.models import Host
from hardware.services import host_heartbeat, host_probe_record
from notifications.models import Channel, Delivery, Rule
from notifications.secrets import url_encrypt
from people.services import person_set_active, person_set_role
from schedules.models import ScheduledChange
from schedules.services import change_cancel, change_schedule, changes_run_due, window_clear, window_set
from schedules.tasks import run_scheduled_changes
from tests.deployments.test_views_revisions import add_revision, make_lab
from tests.support.locks import held_open, lock_timeout

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(catalog, operator):
    host, r1 = make_lab(operator)
    return {"host": host, "r1": r1, "r2": add_revision(host, operator, message="r2", port=8002)}


@pytest.fixture
def watcher(lab):
    """A channel with a rule that hears scheduled changes run and fail, on the lab host."""
    channel = Channel.objects.create(
        name="ops", scheme="json", service="JSON", url_ciphertext=url_encrypt("json://127.0.0.1:9/")
    )
    Rule.objects.create(channel=channel, host=lab["host"], events=["schedule.ran", "schedule.failed"])
    return channel


def _switch(lab, actor, **when):
    return change_schedule(kind="switch", host=lab["host"], params={"revision": 2}, actor=actor, **when)


def _switches():
    return Operation.objects.filter(kind="switch")


def test_a_switch_scheduled_for_now_is_run_by_beats_task_as_its_person(
    lab, operator, watcher, django_capture_on_commit_callbacks
):
    change = _switch(lab, operator, at=timezone.now())
    assert AuditEvent.objects.filter(action="schedule.create", actor=operator).exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert run_scheduled_changes() == 1
    change.refresh_from_db()
    op = _switches().get()
    assert (change.state, change.operation, op.revision, op.requested_by) == ("ran", op, lab["r2"], operator)
    assert "queued" in change.outcome
    assert AuditEvent.objects.filter(action="operation.switch", actor=operator).exists()  # the service's own
    assert AuditEvent.objects.get(action="schedule.ran").data["operation"] == str(op.pk)
    assert Delivery.objects.get(channel=watcher).event == "schedule.ran"


def test_nothing_runs_before_its_time(lab, operator):
    change = _switch(lab, operator, at=timezone.now() + timedelta(hours=1))
    assert changes_run_due(now=timezone.now() + timedelta(minutes=59)) == []
    assert changes_run_due(now=change.run_at) == [change]
    assert _switches().count() == 1


def test_a_second_delivery_of_the_tick_runs_nothing_again(lab, operator):
    change = _switch(lab, operator, at=timezone.now())
    now = timezone.now()
    assert [c.pk for c in changes_run_due(now=now)] == [change.pk]
    assert changes_run_due(now=now) == [] and run_scheduled_changes() == 0
    assert _switches().count() == 1


def test_a_cancelled_change_never_runs_and_cannot_be_cancelled_twice(lab, operator, viewer):
    change = _switch(lab, operator, at=timezone.now())
    with pytest.raises(PermissionDenied):
        change_cancel(change=change, actor=viewer)
    change_cancel(change=change, actor=operator)
    assert run_scheduled_changes() == 0 and not _switches().exists()
    change.refresh_from_db()
    assert change.state == "cancelled" and change.cancelled_by == operator and "otto" in change.outcome
    with pytest.raises(ValidationError, match="already cancelled"):
        change_cancel(change=change, actor=operator)
    assert AuditEvent.objects.filter(action="schedule.cancel").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_cancel_not_yet_committed_does_not_hold_up_its_hosts_heartbeat_or_probe(lab, operator):
    """Two real transactions: before, the cancel's FOR UPDATE of the change joined its host and
    held the host's row until it committed."""
    change = _switch(lab, operator, at=timezone.now() + timedelta(hours=1))
    host = lab["host"]
    with held_open(lambda: change_cancel(change=change, actor=operator)), lock_timeout(3):
        host_heartbeat(host=host, engine_state={"running": True})  # held up: "... due to lock timeout"
        probed = host_probe_record(name=host.name, facts={"kernel": "6.8.0"}, inventory={"gpus": []})
    assert probed.kernel == "6.8.0" and Host.objects.get(pk=host.pk).engine_state == {"running": True}
    assert ScheduledChange.objects.get(pk=change.pk).state == "cancelled"


@pytest.mark.parametrize(
    "demote,reason",
    [
        (lambda user, admin: person_set_role(user=user, role="viewer", actor=admin), "no longer has the operator role"),
        (lambda user, admin: person_set_active(user=user, active=False, actor=admin), "was deactivated"),
        (lambda user, admin: user.delete(), "no longer has an account"),
    ],
)
def test_a_person_demoted_meanwhile_makes_it_fail_with_that_reason(
    lab, operator, admin_user, watcher, django_capture_on_commit_callbacks, demote, reason
):
    change = _switch(lab, operator, at=timezone.now())
    demote(operator, admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        run_scheduled_changes()
    change.refresh_from_db()
    assert change.state == "failed" and reason in change.outcome and "otto" in change.outcome
    assert not _switches().exists()
    assert reason in AuditEvent.objects.get(action="schedule.failed").summary
    assert Delivery.objects.get(channel=watcher).event == "schedule.failed"


def test_a_busy_host_is_tried_again_then_the_change_fails_with_the_reason(lab, operator, settings):
    settings.SCHEDULE_BUSY_RETRY_S = 600
    Operation.objects.create(kind="install", host=lab["host"], exclusive=True, state="running", requested_by=operator)
    change = _switch(lab, operator, at=timezone.now())
    assert change.run_until == change.run_at + timedelta(seconds=600)
    for minutes in (0, 1, 5):
        changes_run_due(now=change.run_at + timedelta(minutes=minutes))
    change.refresh_from_db()
    busy = "busy: install engine requested by otto"
    assert (change.state, change.attempts) == ("pending", 3) and busy in change.last_error
    changes_run_due(now=change.run_until)
    change.refresh_from_db()
    assert change.state == "failed" and "stayed busy" in change.outcome and busy in change.outcome
    assert _switches().count() == 0


def test_a_busy_host_that_frees_up_in_time_gets_the_change(lab, operator):
    install = Operation.objects.create(kind="install", host=lab["host"], exclusive=True, state="running")
    change = _switch(lab, operator, at=timezone.now())
    changes_run_due(now=change.run_at)
    Operation.objects.filter(pk=install.pk).update(state="succeeded")
    changes_run_due(now=change.run_at + timedelta(minutes=2))
    change.refresh_from_db()
    assert change.state == "ran" and change.operation.kind == "switch"


def test_a_change_the_panel_missed_fails_rather_than_running_late(lab, operator):
    change = _switch(lab, operator, at=timezone.now())
    changes_run_due(now=change.run_until + timedelta(seconds=1))
    change.refresh_from_db()
    assert change.state == "failed" and change.outcome.startswith("Missed") and not _switches().exists()


def test_a_refusal_of_the_service_is_the_outcome(lab, operator):
    """r3 asks for 3-way tensor parallelism on two GPUs: the planner refuses it at the due time."""
    add_revision(lab["host"], operator, knobs={"tensor_parallel_size": 3})
    change = change_schedule(kind="switch", host=lab["host"], params={"revision": 3}, at=timezone.now(), actor=operator)
    run_scheduled_changes()
    change.refresh_from_db()
    assert change.state == "failed" and "planner refused r3" in change.outcome


def test_an_alias_move_runs_through_alias_set(lab, operator):
    host = lab["host"]
    serving_mode_set(revision=lab["r2"], mode="on-demand", idle_ttl_s=None, actor=operator)
    alias_set(host=host, name="coder", revision=lab["r1"], actor=operator)
    change = change_schedule(
        kind="alias", host=host, params={"name": "coder", "revision": 2}, at=timezone.now(), actor=operator
    )
    run_scheduled_changes()
    change.refresh_from_db()
    assert change.state == "ran" and ModelAlias.objects.get(host=host, name="coder").revision == lab["r2"]
    assert AuditEvent.objects.filter(action="alias.set", actor=operator).count() == 2


@pytest.mark.parametrize(
    "kind,params,when,message",
    [
        ("switch", {"revision": 9}, {"at": "now"}, "no revision r9"),
        ("switch", {"revision": "2; rm"}, {"at": "now"}, "whole number"),
        ("alias", {"name": "Bad Name", "revision": 2}, {"at": "now"}, "lower-case"),
        ("serving", {"revision": 2}, {"at": "now"}, "not a kind"),
        ("rollout", {}, {"at": "now"}, "host tag"),
        ("switch", {"revision": 2}, {"at": "past"}, "in the past"),
        ("switch", {"revision": 2}, {"at": "far"}, "a year ahead"),
        ("switch", {"revision": 2}, {}, "one of the two"),
        ("switch", {"revision": 2}, {"in_window": True}, "no maintenance window"),
    ],
)
def test_bad_requests_are_refused_with_the_reason_and_store_nothing(lab, operator, kind, params, when, message):
    now = timezone.now()
    moments = {"now": now, "past": now - timedelta(hours=1), "far": now + timedelta(days=400)}
    if "at" in when:
        when = {"at": moments[when["at"]]}
    with pytest.raises(ValidationError, match=message):
        change_schedule(kind=kind, host=lab["host"], params=params, actor=operator, **when)
    assert not ScheduledChange.objects.exists()


def test_a_viewer_cannot_schedule(lab, viewer):
    with pytest.raises(PermissionDenied):
        _switch(lab, viewer, at=timezone.now())


def test_in_the_window_follows_the_window_as_it_is_edited_and_fails_when_it_goes(lab, operator):
    host = lab["host"]
    window_set(host=host, weekdays=[5], start=time(2), end=time(4), tz="Europe/Berlin", actor=operator)
    change = _switch(lab, operator, in_window=True)
    assert change.in_window and change.run_at.weekday() == 5 and (change.run_at.hour, change.run_until.hour) == (1, 3)
    # An overnight window on a day that is neither today nor yesterday (UTC), so it is not open now
    # whenever the suite runs (Sunday 22:00-01:00 was open on a Sunday night).
    day = (timezone.now().weekday() + 3) % 7
    window_set(host=host, weekdays=[day], start=time(22), end=time(1), tz="UTC", actor=operator)
    change.refresh_from_db()
    assert change.run_at.weekday() == day and change.run_at.hour == 22 and change.run_until.hour == 1
    window_clear(host=host, actor=operator)
    change.refresh_from_db()
    assert change.state == "failed" and "window was removed" in change.outcome


def test_a_window_open_now_runs_the_change_now(lab, operator):
    now = timezone.now()
    start, end = (now - timedelta(hours=1)).time(), (now + timedelta(hours=1)).time()
    window_set(host=lab["host"], weekdays=list(range(7)), start=start, end=end, tz="UTC", actor=operator)
    change = _switch(lab, operator, in_window=True)
    assert change.run_at <= timezone.now() and run_scheduled_changes() == 1
