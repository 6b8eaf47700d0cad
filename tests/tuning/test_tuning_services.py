"""Tuning runs through their services, without an agent: bad input changes nothing; a protected host
runs one only after its change request is approved; a run whose operation ended while the panel
was down takes its step at beat's sweep; an operation lost to a restarted agent sends the run back
to the base. Operations end here through the services the agent's port calls."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError

from changes.choices import ChangeState
from changes.models import ChangeRequest
from changes.services import change_approve, host_review_set
from core.models import AuditEvent
from deployments.choices import OperationKind, OperationState
from deployments.models import ModelVariant, Operation
from deployments.services.benchmarks import benchmark_run_record, benchmark_run_start
from deployments.services.operations import operation_begin, operation_finish, operations_mark_lost
from deployments.services.revisions import revision_mark_active
from hardware.credentials import host_token_issue
from hardware.review import ChangeRequested
from tests.support.revisions import make_revision
from tuning.models import TuningRun, TuningTrial
from tuning.services import tuning_start, tuning_sweep

pytestmark = pytest.mark.django_db
GiB = 1 << 30
LEVEL = "concurrency 4"
PROFILE = {"name": "t", "concurrency": [4], "num_requests": 4, "input_tokens": 12, "output_tokens": 48}


@pytest.fixture
def reviewer(db: Any) -> User:
    user = User.objects.create_user(username="olga", password="pw-olga")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


def serving_host(
    name: str, model: ModelVariant, operator: User, *, knobs: dict[str, Any], message: str, issuer: Any = None
) -> Any:
    """A CPU host of 8 GiB that serves `model` with llama.cpp under these knobs (its active revision,
    also as `host.base`); `issuer` issued its token."""
    host, _token = host_token_issue(name=name, actor=issuer)
    host.ram_bytes, host.model_dirs = 8 * GiB, ["/models"]
    host.save()
    active = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=model,
        served_name="tiny",
        port=8001,
        knobs=knobs,
        message=message,
        actor=operator,
    )
    revision_mark_active(revision=active, actor=operator)
    host.base = active
    return host


@pytest.fixture
def host(db: Any, admin_user: User, operator: User) -> Any:
    small = ModelVariant.objects.create(
        name="tiny-gguf",
        format="gguf",
        gguf_file="/models/tiny.gguf",
        weights_bytes=GiB // 4,
        arch={"architecture": "gemma3", "num_layers": 18},
    )
    host = serving_host(
        "tuned",
        small,
        operator,
        knobs={"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0, "flash_attn": "off"},
        message="the base",
        issuer=admin_user,
    )
    return host


def _start(host: Any, actor: Any, **more: Any) -> TuningRun:
    return tuning_start(
        host=host, space={"parallel": [2, 4]}, limits="ttft_p95<=0.5*base", profile=PROFILE, actor=actor, **more
    )


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"space": {"parallel": [2, 2]}}, "space"),
        ({"space": {"mmproj": ["/a", "/b"]}}, "space"),
        ({"space": {"parallel": [2, 4]}, "objective": "speed"}, "objective"),
        ({"space": {"parallel": [2, 4]}, "limits": "ttft_p95>=5"}, "limits"),
        ({"space": {"parallel": [2, 4]}, "level": "concurrency 99"}, "level"),
        ({"space": {"parallel": [2, 4]}, "max_trials": 0}, "max_trials"),
        ({"space": {"parallel": [2, 4]}, "profile": "no-such-profile"}, "profile"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(host, operator, request_, field):
    with pytest.raises(ValidationError) as exc:
        tuning_start(host=host, actor=operator, **{"profile": PROFILE, **request_})
    assert field in exc.value.message_dict
    assert not TuningRun.objects.exists() and not Operation.objects.exists()


def test_a_second_run_on_the_host_is_refused_while_one_is_open(host, operator):
    run = _start(host, operator)
    assert run.state == TuningRun.State.RUNNING and run.stage == TuningRun.Stage.BASE
    (op,) = Operation.objects.all()
    # The host serves the base: it is measured first, the run and trial named on the operation.
    assert (op.kind, op.revision, op.params["tuning"], op.params["trial"]) == ("benchmark", host.base, run.pk, 0)
    with pytest.raises(ValidationError, match="tuning run under way|busy"):
        _start(host, operator)
    assert TuningRun.objects.count() == 1


def test_a_protected_host_tunes_only_once_the_runs_change_request_is_approved(host, operator, admin_user, reviewer):
    host_review_set(host=host, required=True, actor=admin_user)
    with pytest.raises(ChangeRequested) as opened:
        _start(host, operator)
    assert not TuningRun.objects.exists() and not Operation.objects.exists()
    change = ChangeRequest.objects.get(pk=opened.value.change.pk)
    assert (change.kind, change.state, change.params["revision"]) == ("tuning", "open", host.base.number)
    assert "Tune tuned from r1" in change.summary and change.params["space"] == {"parallel": [2, 4]}

    change = change_approve(change=change, actor=reviewer)
    assert change.state == ChangeState.APPROVED
    run = TuningRun.objects.get()
    assert (run.change_request, run.approved_by, run.created_by) == (change.pk, reviewer, operator)
    assert run.limits == [{"metric": "ttft_p95", "level": LEVEL, "bound": 0.5, "of_base": True}]
    started = AuditEvent.objects.get(action="tuning.start")
    assert started.actor == operator and started.data["approved_by"] == "olga"


def _finish_benchmark(op: Operation, *, throughput: float, ttft: float) -> None:
    """What the agent reports at a benchmark's end: its figures, then the operation's end."""
    operation_begin(op_id=op.pk, worker="test")
    run = benchmark_run_start(op=Operation.objects.get(pk=op.pk), gpus=[])
    requests = [{"ok": True, "ttft_ms": ttft, "e2e_ms": 900.0, "output_tokens": 48} for _ in range(4)]
    level = {
        "label": LEVEL,
        "completed": 4,
        "output_tokens_per_s": throughput,
        "decode_tokens_per_s": {"mean": 40.0},
        "requests": requests,
    }
    benchmark_run_record(run=run, result={"status": "completed", "levels": [level]})
    operation_finish(op_id=op.pk, state=OperationState.SUCCEEDED)


def test_an_end_missed_while_the_panel_was_down_is_taken_at_the_sweep(host, operator):
    run = _start(host, operator)
    # Ended with no signal (this test's transaction never commits, as a panel that died first).
    _finish_benchmark(run.current_op, throughput=50.0, ttft=300.0)
    run.refresh_from_db()
    assert run.stage == TuningRun.Stage.BASE and run.current_op.state == OperationState.SUCCEEDED

    assert tuning_sweep() == 1
    run.refresh_from_db()
    base, first = TuningTrial.objects.filter(run=run).order_by("number")
    assert base.state == TuningTrial.State.MEASURED and base.value == 50.0 and len(base.rounds) == 1
    # The first candidate: a revision derived from the base, planned, and a switch to it queued.
    assert first.knobs == {"parallel": 2} and first.state == TuningTrial.State.SWITCHING
    assert first.revision.parent == host.base and first.revision.knobs["parallel"] == 2
    assert first.planned_memory.get("ram", 0) > 0
    op = run.current_op
    assert (op.kind, op.revision, run.stage) == (OperationKind.SWITCH, first.revision, TuningRun.Stage.TRIALS)
    assert tuning_sweep() == 0  # it waits for that switch now


def test_an_operation_lost_to_a_restarted_agent_sends_the_run_back_to_the_base(host, operator):
    run = _start(host, operator)
    _finish_benchmark(run.current_op, throughput=50.0, ttft=300.0)
    tuning_sweep()
    run.refresh_from_db()
    switch = run.current_op
    operation_begin(op_id=switch.pk, worker="test")
    operations_mark_lost(host=host, worker_gone=True, reason="the agent restarted")
    tuning_sweep()
    run.refresh_from_db()
    trial = run.trials.get(number=1)
    assert trial.state == TuningTrial.State.FAILED and "lost" in trial.reason
    # Whatever the engine serves now, a switch to the base is made.
    assert run.state == TuningRun.State.RESTORING and "lost" in run.reason
    back = run.current_op
    assert (back.kind, back.revision) == (OperationKind.SWITCH, host.base)
    operation_begin(op_id=back.pk, worker="test")
    operation_finish(op_id=back.pk, state=OperationState.SUCCEEDED)
    tuning_sweep()
    run.refresh_from_db()
    assert run.state == TuningRun.State.FAILED and run.finished_at is not None and run.current_op is None
