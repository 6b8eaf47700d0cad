"""Operations: every background action is a row first, then a task with the row's id.

The host lock is the partial unique constraint on Operation (one exclusive operation queued
or running per host), so a lock can never outlive its operation: when an operation ends,
fails or is found `lost`, the host is free again.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat, Right
from django.dispatch import Signal
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record, person_of
from core.secrets_mask import mask_text
from deployments.choices import ACTIVE_STATES, EXCLUSIVE_KINDS, OperationState
from deployments.models import BenchmarkRun, DeploymentRevision, Operation
from deployments.services.dispatch import broker_errors, operation_dispatch, operation_message_waiting
from hardware.models import Host, online_at
from notifications.events import operation_event
from notifications.services import notify

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

LOG_LIMIT = 200_000  # characters of log kept per operation (the tail)
# A running operation whose worker has not touched it for this long is `lost`.
LOST_AFTER = timedelta(seconds=90)
# A queued operation of an idle, online host older than this lost its message (a broker that
# restarted without it, an agent killed between taking it and beginning it): it is sent again.
RESEND_AFTER = timedelta(seconds=30)

# Sent once, after the commit, when an operation ends (succeeded, failed, cancelled or lost),
# with `operation=` the ended row: what follows an operation (a benchmark gate, the next wave
# of a rollout, a change request's outcome) listens here instead of being called from here.
operation_ended = Signal()


def _announce_end(op: Operation) -> None:
    # A benchmark that ended without the host's figures (lost, failed or cancelled before it
    # measured) is no longer running: its run says how it ended (a late report still fills it in).
    running = BenchmarkRun.objects.filter(operation_id=op.pk, status="running")
    running.update(status=op.state, finished_at=op.finished_at)
    transaction.on_commit(lambda: operation_ended.send(sender=Operation, operation=op))


class HostBusyError(ValidationError):
    """Another exclusive operation is queued or running on the host."""


def _busy_message(host: Host) -> str:
    current = Operation.objects.filter(host=host, exclusive=True, state__in=ACTIVE_STATES).first()
    if current is None:
        return f"{host.name} is busy."
    who = current.requested_by.username if current.requested_by else "the system"
    return (
        f"{host.name} is busy: {current.get_kind_display().lower()} requested by {who} is "
        f"{current.state} (stage: {current.stage or 'waiting'}). Wait for it or cancel it."
    )


def operation_create(
    *,
    kind: str,
    host: Host,
    revision: DeploymentRevision | None = None,
    params: dict[str, Any] | None = None,
    enqueue: Callable[[Operation], None] | None = None,
    actor: AbstractUser | None,
) -> Operation:
    """Insert the Operation (taking the host lock for exclusive kinds) and enqueue on commit."""
    op = Operation(
        kind=kind,
        host=host,
        revision=revision,
        params=params or {},
        requested_by=person_of(actor),
        exclusive=kind in EXCLUSIVE_KINDS,
    )
    try:
        with transaction.atomic():
            op.save()
    except IntegrityError as exc:
        raise HostBusyError(_busy_message(host)) from exc
    audit_record(
        action=f"operation.{kind}",
        summary=f"{kind} on {host.name}" + (f" to r{revision.number}" if revision else ""),
        obj=op,
        host=host,
        data={"operation": str(op.pk), "params": op.params},
        actor=actor,
    )
    if enqueue is not None:
        transaction.on_commit(lambda: enqueue(op))
    return op


def operation_begin(*, op_id: UUID | str, worker: str) -> Operation | None:
    """Mark a queued operation running. None when it is gone or already ended (idempotent
    redelivery: a task that arrives twice must not act twice)."""
    with transaction.atomic():
        op = Operation.objects.select_for_update().filter(pk=op_id).first()
        if op is None or op.state != OperationState.QUEUED:
            return None
        now = timezone.now()
        op.state = OperationState.RUNNING
        op.started_at = now
        op.heartbeat_at = now
        op.worker = worker
        op.save(update_fields=["state", "started_at", "heartbeat_at", "worker"])
        return op


def operation_progress(
    *, op_id: Any, stage: str | None = None, progress: float | None = None, log: str | None = None
) -> bool:
    """Report progress; appends `log` lines. Returns whether cancellation was requested."""
    fields: dict[str, Any] = {"heartbeat_at": timezone.now()}
    if stage is not None:
        fields["stage"] = stage[:120]
    if progress is not None:
        fields["progress"] = max(0.0, min(1.0, float(progress)))
    if log:
        log = mask_text(log)  # a host's report is stored and shown: no credential in it
        line = log if log.endswith("\n") else log + "\n"
        fields["log"] = Right(Concat(F("log"), Value(line)), LOG_LIMIT)
    Operation.objects.filter(pk=op_id, state=OperationState.RUNNING).update(**fields)
    return bool(Operation.objects.filter(pk=op_id, cancel_requested=True).exists())


def operation_finish(
    *, op_id: Any, state: str, result: dict[str, Any] | None = None, error: str = "", accept_lost: bool = False
) -> None:
    """End an active operation. `accept_lost`: also one marked `lost` (its host's late report)."""
    if state not in (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.CANCELLED):
        raise ValueError(f"{state} is not a finishing state")
    error = mask_text(error)
    with transaction.atomic():
        # FOR UPDATE OF the operation only: its host is read (the audit row's name), not written,
        # and a host row held here held up that host's probe and heartbeat until this commits.
        op = Operation.objects.select_for_update(of=("self",)).select_related("host").filter(pk=op_id).first()
        if op is None:
            return
        if op.state not in ACTIVE_STATES and not (accept_lost and op.state == OperationState.LOST):
            return
        op.state = state
        op.finished_at = timezone.now()
        op.result = result or {}
        op.error = error[:5000]
        if state == OperationState.SUCCEEDED:
            op.progress = 1.0
        op.save(update_fields=["state", "finished_at", "result", "error", "progress"])
        audit_record(
            action=f"operation.{state}",
            summary=f"{op.kind} on {op.host.name} {state}" + (f": {error[:200]}" if error else ""),
            obj=op,
            host=op.host,
            data={"operation": str(op.pk), "result": _audit_safe(op.result)},
            actor=None,
        )
        notify(operation_event(op))  # a failed switch, install or download; sent after commit
        _announce_end(op)


def _audit_safe(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k in {"rolled_back", "rollback_failed", "revision", "previous"}}


def operation_cancel(*, op: Operation, actor: AbstractUser | None) -> Operation:
    """Queued: cancelled at once. Running: the task stops at its next safe point."""
    ensure_role(actor, OPERATOR)
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=op.pk)
        if op.state == OperationState.QUEUED:
            op.state = OperationState.CANCELLED
            op.finished_at = timezone.now()
            op.error = "Cancelled before it started."
            op.save(update_fields=["state", "finished_at", "error"])
            _announce_end(op)
        elif op.state == OperationState.RUNNING:
            op.cancel_requested = True
            op.save(update_fields=["cancel_requested"])
        else:
            raise ValidationError(f"This operation already ended ({op.state}).")
        audit_record(
            action="operation.cancel", summary=f"cancel {op.kind} on {op.host.name}", obj=op, host=op.host, actor=actor
        )
    return op


def operations_mark_lost(
    *, host: Host | None = None, worker_gone: bool = False, reason: str, by_kind: dict[str, str] | None = None
) -> list[Operation]:
    """Running operations whose worker is gone become `lost`, which frees the host lock.

    `worker_gone=True` (an agent starting up on `host`) marks every running operation of the
    host; otherwise only those whose heartbeat is older than LOST_AFTER. `by_kind`: the reason
    for an operation of that kind (what became of its work), `reason` for the others.
    """
    qs = Operation.objects.filter(state=OperationState.RUNNING)
    if host is not None:
        qs = qs.filter(host=host)
    if not worker_gone:
        qs = qs.filter(heartbeat_at__lt=timezone.now() - LOST_AFTER)
    lost = []
    with transaction.atomic():
        for op in qs.select_for_update(of=("self",)).select_related("host"):  # not their hosts' rows
            op.state = OperationState.LOST
            op.finished_at = timezone.now()
            op.error = (by_kind or {}).get(op.kind, reason)
            op.save(update_fields=["state", "finished_at", "error"])
            audit_record(
                action="operation.lost",
                summary=f"{op.kind} on {op.host.name} lost: {op.error}",
                obj=op,
                host=op.host,
                actor=None,
            )
            notify(operation_event(op))
            _announce_end(op)
            lost.append(op)
    return lost


def operations_resend_stranded(*, now: datetime | None = None) -> list[Operation]:
    """Queued operations whose message is gone are sent to their host again.

    An online host with nothing running takes a queued operation's message within seconds; one
    still queued after RESEND_AFTER lost it (the broker restarted without it, or an agent was
    killed after taking it and before beginning it: Redis gives that one back only after the
    visibility timeout), or was never sent (the broker was away when it was asked for; none is
    sent while it still is). One whose message still waits on the queue is left alone (an agent that
    does not consume its queue gets no pile of copies). Sending again is safe: the task id is the
    operation's and operation_begin acts once, so a second message that does arrive finds it
    begun and does nothing (docs/architecture.md, "Tasks and acknowledgements")."""
    now = now or timezone.now()
    busy = Operation.objects.filter(state=OperationState.RUNNING).values("host_id")
    stranded = (
        Operation.objects.filter(state=OperationState.QUEUED, created_at__lt=now - RESEND_AFTER)
        .exclude(host_id__in=busy)
        .select_related("host")
        .order_by("created_at")
    )
    try:
        sent = [op for op in stranded if online_at(op.host.last_heartbeat, now) and not operation_message_waiting(op)]
    except broker_errors():
        return []  # the broker is away: they stay queued, for the sweep after it is back
    for op in sent:
        operation_dispatch(op)
    return sent
