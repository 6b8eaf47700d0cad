"""A switch's benchmark gate: the switch proves itself against the revision it replaces.

switch_request (deployments.services.switch) opens a gate when asked for one; from then on each
of its operations' ends moves it on (the `operation_ended` signal, after the commit):

    baseline (only when the previous revision has no run of the profile: it is measured first)
      -> switching (the switch, with its own health gate and rollback)
      -> measuring (the profile on the new revision)
      -> passed, or rolling_back (a rollback operation to the previous revision) -> rolled_back

Any other end (the baseline failed, the switch failed and rolled itself back, a benchmark was
cancelled, the host was busy) stops the gate with its reason. The verdict is pure
(serving.benchmarking.gate); the gate row keeps the comparison that decided it. Once the gate has
ended (passed, rolled back or stopped), `gate_ended` is sent after the commit, once: what waits
for a gate's verdict (a rollout's canary) listens there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal, receiver
from django.utils import timezone

from core.audit import audit_record, person_of
from deployments.choices import GATE_ACTIVE_STATES, GateState, OperationKind, OperationState
from deployments.models import BenchmarkRun, DeploymentRevision, Operation, SwitchGate
from notifications.events import gate_event
from notifications.services import notify
from serving.benchmarking.gate import GateInputError, gate_decide, parse_limits, run_figures, validate_limits
from serving.benchmarking.profiles import BenchmarkProfile, profile_label

from .benchmarks import benchmark_enqueue, profile_from_input
from .dispatch import operation_dispatch
from .operations import operation_create, operation_ended
from .serving import serving_wanted

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

log = logging.getLogger("controlpanel.gates")

# Sent once, after the commit, when a gate ends (passed, rolled_back or stopped), with `gate=`
# the ended SwitchGate row, as operation_ended is for an operation's end.
gate_ended = Signal()


@dataclass(frozen=True)
class GateRequest:
    """What a switch's gate measures (a profile) and how far the new revision may fall behind."""

    profile: BenchmarkProfile
    limits: dict[str, float]


def gate_from_input(*, profile: str | BenchmarkProfile, limits: str | Mapping[str, Any]) -> GateRequest:
    """A gate from a form, the API or the CLI: a named profile (or one made already) and limits
    as "decode=5,ttft_p95=10" or {"decode": 5}. ValidationError, naming the field, on bad input."""
    if isinstance(profile, str):
        if not profile.strip():
            raise ValidationError({"gate_profile": "Choose the benchmark profile the gate runs."})
        try:
            profile = profile_from_input(name=profile.strip())
        except ValidationError as exc:
            raise ValidationError({"gate_profile": exc.messages}) from exc
    try:
        checked = parse_limits(limits) if isinstance(limits, str) else validate_limits(limits)
    except GateInputError as exc:
        raise ValidationError({"gate_limits": str(exc)}) from exc
    return GateRequest(profile=profile, limits=checked)


def gate_params(gate: GateRequest | None) -> dict[str, Any]:
    """A gate as a change waiting to run keeps it (a change request, a scheduled switch): {} for none."""
    return {} if gate is None else {"gate": {"profile": gate.profile.to_dict(), "limits": gate.limits}}


def gate_from_params(params: Mapping[str, Any]) -> GateRequest | None:
    """The gate a waiting change kept (gate_params), checked again as if typed now; None without."""
    kept = params.get("gate")
    if not isinstance(kept, Mapping):
        return None
    try:
        profile = BenchmarkProfile.from_dict(kept.get("profile") or {})
    except (TypeError, ValueError) as exc:
        raise ValidationError({"gate_profile": f"The kept gate's profile is unreadable: {exc}"}) from exc
    return gate_from_input(profile=profile, limits=kept.get("limits") or {})


def baseline_run(revision: DeploymentRevision, profile: BenchmarkProfile) -> BenchmarkRun | None:
    """The revision's newest completed run of this load (custom numbers make another load)."""
    label = profile_label(profile.to_dict())
    for run in BenchmarkRun.objects.filter(revision=revision, status="completed").order_by("-created_at"):
        if run.profile_label == label:
            return run
    return None


def gate_open(
    *,
    revision: DeploymentRevision,
    previous: DeploymentRevision | None,
    gate: GateRequest,
    switch_params: dict[str, Any],
    actor: AbstractUser | None,
) -> Operation:
    """Open a gate on a switch to `revision` (switch_request has checked the switch) and queue
    its first operation: the switch, or the previous revision's run of the profile when it has
    none. Runs in switch_request's transaction."""
    host = revision.host
    if previous is None:
        raise ValidationError({"gate_profile": f"{host.name} serves nothing yet: a gate has nothing to compare with."})
    if previous.pk == revision.pk:
        raise ValidationError({"gate_profile": f"r{revision.number} is already active: there is no switch to gate."})
    row = SwitchGate(
        host=host,
        revision=revision,
        previous=previous,
        profile=gate.profile.to_dict(),
        limits=gate.limits,
        switch_params=switch_params,
        requested_by=person_of(actor),
        baseline_run=baseline_run(previous, gate.profile),
    )
    if row.baseline_run is None:
        if not _serving(host):
            raise ValidationError(
                {
                    "gate_profile": f"r{previous.number} has no '{row.profile_label}' run to compare with and "
                    "is stopped: start it (or benchmark it) first."
                }
            )
        op = benchmark_enqueue(host=host, revision=previous, profile=gate.profile, actor=actor, params={"gate": True})
        row.state, row.baseline_op = GateState.BASELINE, op
    else:
        op = _queue_switch(row, actor)
        row.state, row.switch_op = GateState.SWITCHING, op
    row.save()
    audit_record(
        action="gate.open",
        summary=f"benchmark gate on the switch of {host.name} to r{revision.number}: '{row.profile_label}', "
        + ", ".join(f"{k} {v:g} %" for k, v in gate.limits.items()),
        obj=row,
        host=host,
        data={"limits": gate.limits, "profile": row.profile_label, "previous": previous.number},
        actor=actor,
    )
    return op


def _serving(host: Any) -> bool:
    return serving_wanted(host)


def _queue_switch(row: SwitchGate, actor: AbstractUser | None) -> Operation:
    return operation_create(
        kind=OperationKind.SWITCH,
        host=row.host,
        revision=row.revision,
        params={**row.switch_params, "previous": row.previous.number, "gated": True},
        enqueue=operation_dispatch,
        actor=actor,
    )


def gate_of(op: Operation) -> SwitchGate | None:
    """The gate an operation belongs to (its baseline run, switch, measurement or rollback)."""
    return (
        SwitchGate.objects.select_related(
            "revision",
            "previous",
            "baseline_run",
            "candidate_run",
            "baseline_op",
            "switch_op",
            "benchmark_op",
            "rollback_op",
        )
        .filter(Q(baseline_op=op) | Q(switch_op=op) | Q(benchmark_op=op) | Q(rollback_op=op))
        .first()
    )


# --- moving on when an operation ends ---------------------------------------------------------------


@receiver(operation_ended, dispatch_uid="switch_gate_follow")
def _follow(sender: Any, operation: Operation, **kwargs: Any) -> None:
    try:
        gate_advance(op=operation)
    except Exception:  # noqa: BLE001 - the operation's end is recorded; a gate's trouble must not undo the reply
        log.exception("benchmark gate: moving on after operation %s failed", operation.pk)


def gate_advance(*, op: Operation) -> SwitchGate | None:
    """Take the gate `op` belongs to one step on, now that `op` has ended."""
    with transaction.atomic():
        row = (
            SwitchGate.objects.select_for_update()
            .filter(Q(baseline_op=op) | Q(switch_op=op) | Q(benchmark_op=op) | Q(rollback_op=op))
            .filter(state__in=GATE_ACTIVE_STATES)
            .first()
        )
        if row is None:
            return None
        ended = Operation.objects.get(pk=op.pk)
        actor = row.requested_by
        why = f"{ended.state}" + (f": {ended.error}" if ended.error else "")
        ok = ended.state == OperationState.SUCCEEDED
        try:
            if row.state == GateState.BASELINE and row.baseline_op_id == ended.pk:
                if not ok:
                    return _stop(row, f"the run of r{row.previous.number} to compare with {why}; nothing was switched")
                row.baseline_run = BenchmarkRun.objects.filter(operation=ended).first()
                row.switch_op, row.state = _queue_switch(row, actor), GateState.SWITCHING
            elif row.state == GateState.SWITCHING and row.switch_op_id == ended.pk:
                if not ok:
                    return _stop(row, f"the switch {why}")
                row.benchmark_op = benchmark_enqueue(
                    host=row.host,
                    revision=row.revision,
                    profile=BenchmarkProfile.from_dict(row.profile),
                    actor=actor,
                    params={"gate": True},
                )
                row.state = GateState.MEASURING
            elif row.state == GateState.MEASURING and row.benchmark_op_id == ended.pk:
                if ended.state == OperationState.CANCELLED:
                    return _stop(row, f"the run of r{row.revision.number} was cancelled: it stays, not judged")
                row.candidate_run = BenchmarkRun.objects.filter(operation=ended).first()
                if ok:
                    _judge(row)
                    if row.verdict.get("passed"):
                        return _end(row, GateState.PASSED, row.verdict["summary"])
                    row.reason = row.verdict.get("summary", "")
                else:
                    row.reason = f"the run of r{row.revision.number} {why}"
                _queue_rollback(row, actor)
            elif row.state == GateState.ROLLING_BACK and row.rollback_op_id == ended.pk:
                if not ok:
                    return _stop(row, f"{row.reason}; the rollback to r{row.previous.number} {why}")
                return _end(row, GateState.ROLLED_BACK, row.reason)
            else:
                return row
        except ValidationError as exc:  # the host busy with another operation, a revision no longer active
            return _stop(row, f"{row.get_state_display().lower()}: " + "; ".join(exc.messages))
        row.save()
        return row


def _judge(row: SwitchGate) -> None:
    base, cand = row.baseline_run, row.candidate_run
    if base is None or cand is None:
        row.verdict = {"passed": False, "summary": "a run to compare is gone", "rows": []}
        return
    verdict = gate_decide(
        run_figures(base.results or {}, base.raw or []), run_figures(cand.results or {}, cand.raw or []), row.limits
    )
    row.verdict = {**verdict.to_dict(), "baseline_run": base.pk, "candidate_run": cand.pk}


def _queue_rollback(row: SwitchGate, actor: AbstractUser | None) -> None:
    row.rollback_op = operation_create(
        kind=OperationKind.ROLLBACK,
        host=row.host,
        revision=row.previous,
        params={
            "revision": row.previous.number,
            "previous": row.revision.number,
            "reason": f"benchmark gate: {row.reason}"[:300],
        },
        enqueue=operation_dispatch,
        actor=actor,
    )
    row.state = GateState.ROLLING_BACK


def _stop(row: SwitchGate, reason: str) -> SwitchGate:
    return _end(row, GateState.STOPPED, reason)


def _end(row: SwitchGate, state: str, reason: str) -> SwitchGate:
    row.state, row.reason, row.finished_at = state, reason[:2000], timezone.now()
    row.save()
    audit_record(
        action=f"gate.{state}",
        summary=f"benchmark gate on {row.host.name} r{row.revision.number}: {row.get_state_display()} ({reason[:200]})",
        obj=row,
        host=row.host,
        data={"verdict": row.verdict.get("passed")},
        actor=None,
    )
    notify(gate_event(row))  # rolled back: as a switch that rolled back is announced
    transaction.on_commit(lambda: gate_ended.send(sender=SwitchGate, gate=row))
    return row
