"""Rollouts across hosts without agents: the waves, the failed wave put back, pause, resume,
cancel, two rollouts on one host refused, roles and bad input (the end to end run with three
real agents is tests/rollouts/test_rollout_e2e.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core.models import AuditEvent
from deployments.choices import OperationState
from deployments.models import DeploymentRevision, ModelAlias, ModelVariant, Operation
from deployments.services.revisions import revision_derive, revision_mark_active
from deployments.services.serving_set import serving_mode_set
from hardware.services import host_probe_record, host_tags_set
from notifications.choices import EventKind
from notifications.models import Delivery
from notifications.services import channel_create, rule_create
from rollouts.models import Rollout, RolloutHost
from rollouts.services import (
    RolloutOverlap,
    rollout_cancel,
    rollout_operation_ended,
    rollout_pause,
    rollout_resume,
    rollout_start,
)
from tests.rollouts.conftest import MODEL, active_number, end_switch, revisions_of
from tests.support.locks import Background, held_open, lock_timeout, wait_for_a_lock_wait
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
CHANGE = {"set": {"threads": 4}, "message": "four threads everywhere"}


def _parts(rollout: Rollout) -> dict[str, RolloutHost]:
    return {p.host.name[-1]: p for p in RolloutHost.objects.filter(rollout=rollout).select_related("host", "operation")}


def _states(rollout: Rollout) -> dict[str, str]:
    return {k: p.state for k, p in _parts(rollout).items()}


def _start(operator: Any, batch: int = 2, group: str = "fleet", **kw: Any) -> Rollout:
    return rollout_start(group=group, kind="revision", change=CHANGE, batch_size=batch, actor=operator, **kw)


def test_the_canary_goes_first_then_batches_and_every_host_ends_on_the_new_revision(
    fleet, operator, django_capture_on_commit_callbacks
):
    rollout = _start(operator, batch=2)
    assert _states(rollout) == {"a": "switching", "b": "pending", "c": "pending", "d": "pending"}
    canary = _parts(rollout)["a"]
    assert canary.target.number == 2 and canary.target.knobs["threads"] == 4 and canary.previous.number == 1
    assert canary.operation.revision_id == canary.target.pk
    assert revisions_of(fleet["b"]) == [1]  # a later wave's host gets its revision at its wave

    end_switch(canary.operation, True, django_capture_on_commit_callbacks)
    assert _states(rollout) == {"a": "done", "b": "switching", "c": "switching", "d": "pending"}
    for letter in "bc":
        end_switch(_parts(rollout)[letter].operation, True, django_capture_on_commit_callbacks)
    assert _states(rollout)["d"] == "switching"
    end_switch(_parts(rollout)["d"].operation, True, django_capture_on_commit_callbacks)

    rollout.refresh_from_db()
    assert rollout.state == "succeeded" and rollout.finished_at is not None
    assert [active_number(h) for h in fleet.values()] == [2, 2, 2, 2]
    assert not RolloutHost.objects.filter(claimed=True).exists()  # the hosts are free again
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"rollout.start", "rollout.succeeded"} <= actions


def test_a_failed_second_wave_is_put_back_earlier_waves_stay_later_ones_are_untouched(
    fleet, operator, django_capture_on_commit_callbacks
):
    rollout = _start(operator, batch=2)  # waves: [a] [b, c] [d]
    end_switch(_parts(rollout)["a"].operation, True, django_capture_on_commit_callbacks)
    end_switch(_parts(rollout)["b"].operation, True, django_capture_on_commit_callbacks)
    assert active_number(fleet["b"]) == 2
    end_switch(_parts(rollout)["c"].operation, False, django_capture_on_commit_callbacks, "r2 did not come up (bad)")

    parts = _parts(rollout)
    assert parts["c"].state == "failed" and "did not come up" in parts["c"].message
    assert parts["b"].state == "rolling_back"  # b took the change: a switch back to its r1
    back = parts["b"].operation
    assert back.revision.number == 1 and back.params["previous"] == 2
    assert Rollout.objects.get(pk=rollout.pk).state == "rolling_back"
    end_switch(back, True, django_capture_on_commit_callbacks)

    rollout.refresh_from_db()
    assert rollout.state == "failed" and "Wave 1 failed" in rollout.error and "fleet-c" in rollout.error
    assert _states(rollout) == {"a": "done", "b": "rolled_back", "c": "failed", "d": "pending"}
    assert active_number(fleet["a"]) == 2 and active_number(fleet["b"]) == 1
    assert revisions_of(fleet["d"]) == [1] and not Operation.objects.filter(host=fleet["d"]).exists()


def test_pause_holds_the_next_wave_resume_starts_it_cancel_frees_the_hosts(
    fleet, operator, django_capture_on_commit_callbacks
):
    rollout = _start(operator, batch=3)
    rollout_pause(rollout=rollout, actor=operator)
    end_switch(_parts(rollout)["a"].operation, True, django_capture_on_commit_callbacks)
    assert _states(rollout) == {"a": "done", "b": "pending", "c": "pending", "d": "pending"}
    with pytest.raises(ValidationError, match="Only a running rollout"):
        rollout_pause(rollout=rollout, actor=operator)

    rollout_resume(rollout=rollout, actor=operator)
    assert _states(rollout) == {"a": "done", "b": "switching", "c": "switching", "d": "switching"}
    with pytest.raises(ValidationError, match="Only a paused rollout"):
        rollout_resume(rollout=rollout, actor=operator)

    rollout_cancel(rollout=rollout, actor=operator)
    rollout.refresh_from_db()
    assert rollout.state == "cancelled" and "Cancelled by otto" in rollout.error
    assert not RolloutHost.objects.filter(claimed=True).exists()
    # A switch already running finishes; its end is recorded, nothing else starts.
    end_switch(_parts(rollout)["b"].operation, True, django_capture_on_commit_callbacks)
    assert _parts(rollout)["b"].state == "done" and Rollout.objects.get(pk=rollout.pk).state == "cancelled"
    with pytest.raises(ValidationError, match="already ended"):
        rollout_cancel(rollout=rollout, actor=operator)


def test_a_second_rollout_over_a_host_in_an_open_one_is_refused_with_nothing_changed(fleet, operator):
    _start(operator, batch=1)
    host_tags_set(host=fleet["c"], tags=["fleet", "pair"], actor=operator)
    host_tags_set(host=fleet["d"], tags=["fleet", "pair"], actor=operator)
    before = DeploymentRevision.objects.count()
    with pytest.raises(RolloutOverlap, match=r"Another rollout holds fleet-c \(rollout #\d+, running\), fleet-d"):
        _start(operator, group="pair")
    assert Rollout.objects.count() == 1 and DeploymentRevision.objects.count() == before


def test_the_canary_refused_at_its_wave_stops_the_rollout_and_touches_nobody_else(fleet, operator):
    from deployments.services.switch import switch_request

    switch_request(revision=DeploymentRevision.objects.get(host=fleet["a"], number=1), actor=operator)  # a is busy
    rollout = _start(operator, batch=2)
    rollout.refresh_from_db()
    assert rollout.state == "failed" and "fleet-a is busy" in rollout.error
    assert _states(rollout) == {"a": "failed", "b": "pending", "c": "pending", "d": "pending"}
    assert revisions_of(fleet["a"]) == [1]  # the refused attempt's revision was not kept


def test_a_host_whose_engine_cannot_load_the_rollouts_model_at_its_wave_is_refused_and_keeps_its_revisions(
    fleet, operator, django_capture_on_commit_callbacks
):
    """The rollout's model is the GGUF the fleet serves; c moves to Ollama (which loads its own tags,
    no GGUF) after the rollout started: at its wave c is refused with the reason, and gets no revision."""
    change = {"model": MODEL, "message": "the GGUF again"}
    # waves: [a] [b, c] [d]
    rollout = rollout_start(group="fleet", kind="revision", change=change, batch_size=2, actor=operator)
    ollama = make_revision(
        host=fleet["c"],
        engine="ollama",
        model_variant=ModelVariant.objects.create(name="qwen3:8b", format="ollama"),
        message="c on Ollama",
        actor=operator,
    )
    revision_mark_active(revision=ollama, actor=operator)
    end_switch(_parts(rollout)["a"].operation, True, django_capture_on_commit_callbacks)

    parts = _parts(rollout)
    assert parts["c"].state == "failed"
    assert parts["c"].message.startswith("Refused: Ollama cannot load a GGUF file"), parts["c"].message
    assert revisions_of(fleet["c"]) == [1, 2] and active_number(fleet["c"]) == 2  # nothing made, nothing switched
    assert parts["b"].state in ("switching", "rolling_back")


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"group": "nobody"}, "group", "no hosts"),
        ({"group": "Not A Tag!"}, "group", "host tag"),
        ({"batch_size": 0}, "batch_size", "batch size"),
        ({"batch_size": "many"}, "batch_size", "batch size"),
        ({"canary": "fleet-z"}, "canary", "not in the group"),
        ({"change": {"set": {"threads": 4}}}, "message", "Say what"),
        ({"change": {"message": "nothing"}}, "set", "changes something"),
        ({"change": {"model": "no-such-model", "message": "m"}}, "model", "No model"),
        ({"change": "threads=4"}, "change", "object"),
        ({"kind": "reboot"}, "kind", "revision"),
        ({"change": {"set": {"ctx_size": "lots"}, "message": "m"}}, "__all__", "fleet-a"),
        (
            {"change": {"model": "Qwen3.5-27B", "message": "m"}},  # the fleet serves llama.cpp
            "__all__",
            "fleet-a: llama.cpp cannot load a Hugging Face checkpoint",
        ),
        ({"gate": {"profile": "quick", "limits": {"decode": 5}}}, "gate_profile", "gate_from_input"),
    ],
)
def test_bad_input_is_refused_with_its_reason_and_nothing_changes(fleet, operator, fields, field, says):
    before = DeploymentRevision.objects.count()
    args = {"group": "fleet", "kind": "revision", "change": CHANGE, "batch_size": 2, **fields}
    with pytest.raises(ValidationError) as caught:
        rollout_start(actor=operator, **args)
    errors = caught.value.message_dict if hasattr(caught.value, "error_dict") else {"__all__": caught.value.messages}
    assert says in " ".join(errors[field])
    assert not Rollout.objects.exists() and DeploymentRevision.objects.count() == before


def test_a_viewer_may_not_start_pause_or_cancel_a_rollout(fleet, viewer, operator):
    with pytest.raises(PermissionDenied):
        _start(viewer)
    rollout = _start(operator)
    for act in (rollout_pause, rollout_cancel, rollout_resume):
        with pytest.raises(PermissionDenied):
            act(rollout=rollout, actor=viewer)
    assert Rollout.objects.get(pk=rollout.pk).state == "running"


def test_an_alias_rollout_moves_the_alias_on_every_host_at_once(fleet, operator):
    for host in fleet.values():
        r1 = DeploymentRevision.objects.get(host=host, number=1)
        tagged = revision_derive(host=host, parent=r1, changes={"port": 8090}, message="m", tag="next", actor=operator)
        serving_mode_set(revision=tagged, mode="on-demand", actor=operator)
    rollout = rollout_start(
        group="fleet", kind="alias", change={"alias": "coder", "tag": "next"}, batch_size=2, actor=operator
    )
    rollout.refresh_from_db()
    assert rollout.state == "succeeded"
    assert sorted(ModelAlias.objects.filter(name="coder").values_list("revision__number", flat=True)) == [2, 2, 2, 2]


def test_start_stop_and_finish_are_notified(fleet, operator, admin_user, settings, django_capture_on_commit_callbacks):
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    channel = channel_create(name="ops", url="json://127.0.0.1:9/hook", actor=admin_user)
    kinds = [EventKind.ROLLOUT_STARTED, EventKind.ROLLOUT_STOPPED, EventKind.ROLLOUT_FINISHED]
    rule_create(channel=channel, host=None, events=kinds, actor=admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        rollout = _start(operator, batch=4)
    end_switch(_parts(rollout)["a"].operation, False, django_capture_on_commit_callbacks)
    events = list(Delivery.objects.order_by("created_at").values_list("event", flat=True))
    assert events == [EventKind.ROLLOUT_STARTED, EventKind.ROLLOUT_STOPPED]
    message = Delivery.objects.get(event=EventKind.ROLLOUT_STOPPED).body
    assert f"Rollout #{rollout.pk} (threads=4) stopped" in message and "fleet-a" in message


@pytest.mark.django_db(transaction=True)
def test_a_switchs_end_waiting_for_its_rollout_holds_neither_its_part_nor_its_host(fleet, operator):
    """Two real transactions: the rollout is held (a pause not yet committed) when the canary's
    switch ends. Before, the end locked the canary's part and its host's row first, then waited
    for the rollout: the host's probe waited too, and a cancel (rollout, then every part) could
    deadlock with it."""
    rollout = _start(operator, batch=2)
    canary = _parts(rollout)["a"]
    Operation.objects.filter(pk=canary.operation_id).update(state=OperationState.SUCCEEDED)
    with held_open(lambda: rollout_pause(rollout=rollout, actor=operator)):
        ended = Background(lambda: rollout_operation_ended(op=Operation.objects.get(pk=canary.operation_id)))
        wait_for_a_lock_wait()  # the end waits for the rollout
        with lock_timeout(3):  # held up: "canceling statement due to lock timeout"
            probed = host_probe_record(name=fleet["a"].name, facts={"kernel": "6.8.0"}, inventory={"gpus": []})
            with transaction.atomic():  # the part is free for the rollout's own writers
                RolloutHost.objects.select_for_update(of=("self",)).get(pk=canary.pk)
    ended.result()
    assert probed.kernel == "6.8.0"
    assert Rollout.objects.get(pk=rollout.pk).state == "paused"
    assert _states(rollout) == {"a": "done", "b": "pending", "c": "pending", "d": "pending"}  # paused: no next wave
