"""Serving as desired state: a host serves its active revision (what the last successful switch
applied) unless someone pressed Stop. Start and Stop record that wish and queue the operation;
an agent that registers with no engine running gets its active revision back by itself.

A start is a `launch` operation of the active revision: the agent carries it out as it does a
switch (hostagent.operations.switch: the same host preflight, start and health gate), with no
previous revision to roll back to. A failed start ends failed and is notified like a failed
switch; a restore is not tried again after one failed, until someone presses Start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record
from deployments.choices import OperationKind, OperationState
from deployments.models import Deployment, DeploymentRevision, Operation, active_revision_of
from hardware.models import Host

from .dispatch import operation_dispatch
from .operations import HostBusyError, operation_create

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

log = logging.getLogger(__name__)

# Operations that decide what the host's engine runs; the newest of them tells whether the
# last start failed.
ENGINE_KINDS = (OperationKind.SWITCH, OperationKind.LAUNCH, OperationKind.STOP, OperationKind.ROLLBACK)
RESTORE_REASON = "restore"  # params["reason"] of a start the panel queued by itself


def serving_wanted(host: Host) -> bool:
    """Whether `host` should serve its active revision now (False when it has none)."""
    deployment = Deployment.objects.filter(host=host).first()
    return bool(deployment and deployment.active_revision_id and deployment.serving)


def _serving_set(host: Host, serving: bool, actor: AbstractUser | None) -> None:
    changed = Deployment.objects.filter(host=host).exclude(serving=serving).update(serving=serving)
    if changed:
        audit_record(
            action="host.serving",
            summary=f"{host.name} " + ("serves its active revision" if serving else "stays stopped until Start"),
            host=host,
            data={"serving": serving},
            actor=actor,
        )


def _launch(*, host: Host, revision: DeploymentRevision, reason: str, actor: AbstractUser | None) -> Operation:
    return operation_create(
        kind=OperationKind.LAUNCH,
        host=host,
        revision=revision,
        params={"revision": revision.number, "previous": None, "reason": reason},
        enqueue=operation_dispatch,
        actor=actor,
    )


@transaction.atomic
def start_request(*, host: Host, actor: AbstractUser | None) -> Operation:
    """Start the host's active revision again (after Stop, or a start that failed); from now on
    the host serves it after every restart."""
    ensure_role(actor, OPERATOR)
    revision = active_revision_of(host)
    if revision is None:
        raise ValidationError(f"{host.name} has no active revision to start: switch to a revision first.")
    state = host.engine_state if isinstance(host.engine_state, dict) else {}
    if host.is_online and state.get("running") and str(state.get("revision_id")) == str(revision.pk):
        raise ValidationError(f"r{revision.number} already runs on {host.name}: stop it first to start it again.")
    op = _launch(host=host, revision=revision, reason="start", actor=actor)
    _serving_set(host, True, actor)
    return op


@transaction.atomic
def stop_request(*, host: Host, actor: AbstractUser | None) -> Operation:
    """Stop the host's engine; it stays stopped, after restarts too, until Start or a switch."""
    ensure_role(actor, OPERATOR)
    op = operation_create(kind=OperationKind.STOP, host=host, enqueue=operation_dispatch, actor=actor)
    _serving_set(host, False, actor)
    return op


def serving_restore(*, host: Host, engine_state: Any) -> Operation | None:
    """An agent reports (at registration) what its engine runs. When nothing runs and the host
    should serve its active revision, queue one start of it, as the system; None otherwise.

    Not when someone pressed Stop, not while another operation holds the host lock (a queued
    switch decides what runs; two reports that race find the lock taken by the first one's
    start), and not after the last start of that revision failed (no loop of failures: the
    failure was notified, and Start tries again)."""
    state = engine_state if isinstance(engine_state, dict) else {}
    if state.get("running"):
        return None
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().filter(host=host).first()  # reports one at a time
        if deployment is None or deployment.active_revision_id is None or not deployment.serving:
            return None
        revision = DeploymentRevision.objects.get(pk=deployment.active_revision_id)
        last = Operation.objects.filter(host=host, kind__in=ENGINE_KINDS).order_by("-created_at").first()
        if (
            last is not None
            and last.kind == OperationKind.LAUNCH
            and last.state == OperationState.FAILED
            and last.revision_id == revision.pk
        ):
            log.info("%s: not restoring r%s, its last start failed", host.name, revision.number)
            return None
        try:
            with transaction.atomic():
                return _launch(host=host, revision=revision, reason=RESTORE_REASON, actor=None)
        except HostBusyError:
            return None
