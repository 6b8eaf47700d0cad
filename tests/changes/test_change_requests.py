"""Protected hosts and change requests (issue 30): a person's switch, alias move or serving-set
change on a protected host opens a request and changes nothing; another operator or admin
approves it (never its author, never a viewer) and it runs through the same service, recorded
with both people; a rejected one changes nothing; a stale one must be re-confirmed first."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from changes.choices import ChangeState
from changes.models import ChangeComment, ChangeRequest
from changes.services import change_approve, change_reconfirm, change_reject, change_request_changes, host_review_set
from core.models import AuditEvent
from deployments.models import ModelAlias, Operation, ServedRevision
from deployments.services.aliases import alias_set
from deployments.services.revisions import revision_mark_active
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from hardware.review import ChangeRequested

pytestmark = pytest.mark.django_db


def _open_switch(protected: dict[str, Any], author: Any, number: int = 2) -> ChangeRequest:
    with pytest.raises(ChangeRequested) as caught:
        switch_request(revision=protected["r"][number], actor=author)
    return ChangeRequest.objects.get(pk=caught.value.change.pk)


def test_a_switch_on_a_protected_host_opens_a_request_and_runs_nothing(protected, operator):
    change = _open_switch(protected, operator)
    assert Operation.objects.count() == 0  # nothing queued, nothing to the host
    assert (change.kind, change.state, change.author, change.params["revision"]) == ("switch", "open", operator, 2)
    assert change.summary == "Switch guarded to r2 (now r1)"
    assert change.base == {"active": 1, "aliases": {}, "serving": {}}
    opened = AuditEvent.objects.get(action="change.open")
    assert opened.actor == operator and opened.object_id == str(change.pk)


def test_an_unprotected_host_switches_at_once_and_the_system_is_never_gated(protected, operator, admin_user):
    host_review_set(host=protected["host"], required=False, actor=admin_user)
    op = switch_request(revision=protected["r"][2], actor=operator)
    assert op.state == "queued" and "approved_by" not in op.params
    assert ChangeRequest.objects.count() == 0
    with pytest.raises(PermissionDenied):  # the setting is an admin's
        host_review_set(host=protected["host"], required=True, actor=operator)


def test_neither_the_author_nor_a_viewer_may_approve(protected, operator, viewer, reviewer):
    change = _open_switch(protected, operator)
    with pytest.raises(PermissionDenied, match="own request"):
        change_approve(change=change, actor=operator)
    with pytest.raises(PermissionDenied, match="operator role"):
        change_approve(change=change, actor=viewer)
    with pytest.raises(PermissionDenied):
        change_reject(change=change, actor=viewer)
    change.refresh_from_db()
    assert change.state == ChangeState.OPEN and change.decided_by is None
    assert Operation.objects.count() == 0 and not ChangeComment.objects.exists()


def test_an_approved_switch_runs_and_its_operation_records_author_and_approver(
    protected, operator, reviewer, django_capture_on_commit_callbacks
):
    change = _open_switch(protected, operator)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        change = change_approve(change=change, comment="looks right", actor=reviewer)
    op = Operation.objects.get()
    assert change.state == ChangeState.APPROVED and change.decided_by == reviewer and change.operation == op
    assert (op.kind, op.state, op.revision, op.requested_by) == ("switch", "queued", protected["r"][2], operator)
    assert op.params["approved_by"] == "olga" and op.params["change_request"] == change.pk
    assert len(callbacks) >= 1  # the operation goes to the host's queue once this commits
    queued = AuditEvent.objects.get(action="operation.switch")
    assert queued.actor == operator and queued.data["params"]["approved_by"] == "olga"
    approved = AuditEvent.objects.get(action="change.approve")
    assert approved.actor == reviewer and approved.data["operation"] == str(op.pk)
    with pytest.raises(ValidationError, match="approved"):  # once
        change_approve(change=change, actor=reviewer)


def test_a_rejected_request_changes_nothing(protected, operator, reviewer):
    with pytest.raises(ChangeRequested) as caught:
        alias_set(host=protected["host"], name="coder", revision=protected["r"][1], actor=operator)
    change = ChangeRequest.objects.get(pk=caught.value.change.pk)
    change_reject(change=change, comment="not now", actor=reviewer)
    change.refresh_from_db()
    assert change.state == ChangeState.REJECTED and change.decided_by == reviewer
    assert not ModelAlias.objects.exists() and Operation.objects.count() == 0
    with pytest.raises(ValidationError, match="rejected"):
        change_approve(change=change, actor=reviewer)
    assert not ModelAlias.objects.exists()


def test_a_stale_request_is_refused_until_its_author_reconfirms_it(protected, operator, reviewer):
    change = _open_switch(protected, operator, number=3)
    revision_mark_active(revision=protected["r"][2], actor=None)  # meanwhile the host moved on
    with pytest.raises(ValidationError, match="stale: the active revision is r2 now \\(was r1\\)"):
        change_approve(change=change, actor=reviewer)
    assert Operation.objects.count() == 0
    with pytest.raises(PermissionDenied):  # only its author re-confirms
        change_reconfirm(change=change, actor=reviewer)
    change_reconfirm(change=change, comment="still wanted", actor=operator)
    change.refresh_from_db()
    assert change.base["active"] == 2
    change_approve(change=change, actor=reviewer)
    assert Operation.objects.get().revision == protected["r"][3]


def test_asking_for_changes_holds_the_request_until_the_author_reconfirms(protected, operator, reviewer):
    change = _open_switch(protected, operator)
    change_request_changes(change=change, comment="use r3", actor=reviewer)
    with pytest.raises(ValidationError, match="re-confirms"):
        change_approve(change=change, actor=reviewer)
    change_reconfirm(change=change, actor=operator)
    assert change_approve(change=change, actor=reviewer).state == ChangeState.APPROVED


def test_approved_alias_and_serving_changes_run_through_their_services(protected, operator, reviewer):
    host, r = protected["host"], protected["r"]
    with pytest.raises(ChangeRequested) as caught:
        serving_mode_set(revision=r[2], mode="on-demand", idle_ttl_s=600, actor=operator)
    assert not ServedRevision.objects.exists()
    change_approve(change=ChangeRequest.objects.get(pk=caught.value.change.pk), actor=reviewer)
    assert ServedRevision.objects.get().mode == "on-demand"
    served = AuditEvent.objects.get(action="serving.mode")
    assert served.actor == operator and served.data["approved_by"] == "olga"
    with pytest.raises(ChangeRequested) as caught:
        alias_set(host=host, name="fast", revision=r[2], actor=operator)
    change_approve(change=ChangeRequest.objects.get(pk=caught.value.change.pk), actor=reviewer)
    assert ModelAlias.objects.get(name="fast").revision == r[2]


def test_a_change_the_service_refuses_opens_no_request(protected, operator):
    with pytest.raises(ValidationError) as caught:
        alias_set(host=protected["host"], name="Bad Name!", revision=protected["r"][1], actor=operator)
    assert not isinstance(caught.value, ChangeRequested)
    assert ChangeRequest.objects.count() == 0


def test_proposing_what_the_host_already_is_opens_nothing(protected, operator, admin_user):
    from changes.services import change_open

    host_review_set(host=protected["host"], required=False, actor=admin_user)
    alias_set(host=protected["host"], name="coder", revision=protected["r"][1], actor=operator)
    with pytest.raises(ValidationError, match="Nothing to review"):
        change_open(host=protected["host"], kind="alias", params={"name": "coder", "revision": 1}, actor=operator)
    change = change_open(host=protected["host"], kind="switch", params={"revision": 2}, actor=operator)
    assert change.state == "open" and Operation.objects.count() == 0  # any host can be asked for review


def test_a_gated_switch_keeps_its_gate_through_the_review_and_the_page_shows_the_plan(
    protected, operator, reviewer, client, django_capture_on_commit_callbacks
):
    from deployments.models import SwitchGate
    from deployments.services.gates import gate_from_input

    gate = gate_from_input(profile="quick", limits="decode=5,ttft_p95=10")
    with pytest.raises(ChangeRequested) as caught:
        switch_request(revision=protected["r"][2], gate=gate, actor=operator)
    change = ChangeRequest.objects.get(pk=caught.value.change.pk)
    assert change.params["gate"]["limits"] == {"decode": 5.0, "ttft_p95": 10.0}
    assert not SwitchGate.objects.exists() and Operation.objects.count() == 0

    client.force_login(reviewer)
    page = client.get(f"/changes/{change.pk}/").content.decode()
    assert "Benchmark gate" in page and "quick" in page and "ttft_p95" in page
    assert "r1 has no run of it: the gate measures it first" in page

    with django_capture_on_commit_callbacks(execute=False):
        change_approve(change=change, actor=reviewer)
    row = SwitchGate.objects.get()
    assert (row.revision, row.limits, row.requested_by) == (
        protected["r"][2],
        {"decode": 5.0, "ttft_p95": 10.0},
        operator,
    )
    first = Operation.objects.get()  # r1 has no run of the profile: it is measured first
    assert (first.kind, first.revision) == ("benchmark", protected["r"][1])
