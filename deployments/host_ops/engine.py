"""Switch, stop and reconcile: the engine the host serves, with rollback on failure."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from deployments.choices import OperationState
from deployments.engines.base import EngineConfigError, LaunchSpec
from deployments.models import DeploymentRevision, Operation
from deployments.services.operations import operation_finish
from deployments.services.revisions import revision_mark_active
from hardware.runtime.errors import EngineStartError, HostRuntimeError
from hardware.runtime.supervisor import Supervisor
from hardware.services import host_heartbeat

from .common import Reporter, engine_state, launch_spec_for, supervisor_for
from .preflight import host_preflight


def _start(
    sup: Supervisor, revision: DeploymentRevision, report: Reporter, spec: LaunchSpec | None = None
) -> dict[str, Any]:
    spec = spec or launch_spec_for(revision)
    result = sup.start(
        spec,
        revision_label=f"r{revision.number}",
        revision_id=str(revision.pk),
        on_progress=report,
        ready_timeout=settings.ENGINE_READY_TIMEOUT_S,
    )
    return {
        "pid": result.pid,
        "seconds": round(result.seconds, 3),
        "served_name": result.served_name,
        "stopped": [{"pid": s.pid, "kind": s.kind, "revision": s.revision_label} for s in result.stopped],
    }


def run_switch(op: Operation) -> None:
    """Stop, start, verify; on failure stop the new engine and bring the previous one back."""
    host = op.host
    revision = op.revision
    assert revision is not None
    previous = host.active_revision
    sup = supervisor_for(host.name)
    report = Reporter(op)
    if report.cancel_requested or Operation.objects.filter(pk=op.pk, cancel_requested=True).exists():
        operation_finish(op_id=op.pk, state=OperationState.CANCELLED, error="Cancelled before the engine was touched.")
        return
    try:
        spec = launch_spec_for(revision)
    except (HostRuntimeError, EngineConfigError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        report.log(f"refused before anything was stopped: {reason}")
        operation_finish(
            op_id=op.pk,
            state=OperationState.FAILED,
            result={"revision": revision.number, "reason": reason, "refused": True, "rolled_back": False},
            error=f"r{revision.number} was refused on the host ({reason}); the engine was not touched.",
        )
        return
    checks = host_preflight(revision, spec, sup)
    for check in checks:
        report.log(f"preflight {check.name}: {check.status}: {check.message}")
    failed = [c for c in checks if c.failed]
    if failed:
        reason = " ".join(c.message for c in failed)
        report.log(f"refused before anything was stopped: {reason}")
        operation_finish(
            op_id=op.pk,
            state=OperationState.FAILED,
            result={
                "revision": revision.number,
                "reason": reason,
                "refused": True,
                "rolled_back": False,
                "preflight": [c.to_dict() for c in checks],
            },
            error=f"r{revision.number} was refused on the host before anything was stopped: {reason}",
        )
        return
    report.log(f"switching {host.name} to r{revision.number}" + (f" from r{previous.number}" if previous else ""))
    try:
        with sup.watchdog_paused(f"switch to r{revision.number}"):
            started = _start(sup, revision, report.scaled(0.0, 0.9), spec)
    except (EngineStartError, HostRuntimeError) as exc:
        tail = list(getattr(exc, "log_tail", []) or [])
        reason = getattr(exc, "reason", None) or str(exc)
        report.log(f"switch failed: {reason}")
        if tail:
            report.log("--- engine log tail ---\n" + "\n".join(tail))
        result: dict[str, Any] = {
            "revision": revision.number,
            "previous": previous.number if previous else None,
            "reason": reason,
            "log_tail": tail,
            "rolled_back": False,
        }
        if previous is None:
            sup.stop()
            result["rollback_failed"] = False
            operation_finish(
                op_id=op.pk,
                state=OperationState.FAILED,
                result=result,
                error=f"r{revision.number} did not come up ({reason}); there was no previous revision.",
            )
        else:
            _rollback(op, sup, previous, result, report, reason)
        host_heartbeat(host=host, engine_state=engine_state(sup))
        return
    revision_mark_active(revision=revision, actor=op.requested_by, reason=f"switch {op.pk}")
    host_heartbeat(host=host, engine_state=engine_state(sup))
    operation_finish(
        op_id=op.pk,
        state=OperationState.SUCCEEDED,
        result={"revision": revision.number, "previous": previous.number if previous else None, **started},
    )


def _rollback(
    op: Operation, sup: Supervisor, previous: DeploymentRevision, result: dict[str, Any], report: Reporter, reason: str
) -> None:
    report("rollback", 0.9, f"starting the previous revision r{previous.number} again")
    try:
        with sup.watchdog_paused(f"rollback to r{previous.number}"):
            _start(sup, previous, report.scaled(0.9, 0.1))
    except (EngineStartError, HostRuntimeError) as exc:
        again = getattr(exc, "reason", None) or str(exc)
        result.update(rolled_back=False, rollback_failed=True, rollback_reason=again)
        report.log(f"ROLLBACK FAILED: r{previous.number} did not come back either: {again}")
        sup.stop()
        operation_finish(
            op_id=op.pk,
            state=OperationState.FAILED,
            result=result,
            error=f"r{op.revision.number} failed ({reason}) and the previous revision r{previous.number} did not "
            f"come back either ({again}). The host serves nothing: act now.",
        )
        return
    result.update(rolled_back=True, rollback_failed=False)
    operation_finish(
        op_id=op.pk,
        state=OperationState.FAILED,
        result=result,
        error=f"r{op.revision.number} failed ({reason}); rolled back to r{previous.number}, which is serving again.",
    )


def run_stop(op: Operation) -> None:
    sup = supervisor_for(op.host.name)
    Reporter(op)("stopping", 0.1, "stopping the engine")
    stopped = sup.stop()
    host_heartbeat(host=op.host, engine_state=engine_state(sup))
    operation_finish(
        op_id=op.pk,
        state=OperationState.SUCCEEDED,
        result={"was_running": stopped.was_running, "revision": stopped.revision_label},
    )


def reconcile(host: Any) -> dict[str, Any]:
    """Read what the host really runs and record it; point the host at the revision that serves."""
    sup = supervisor_for(host.name)
    state = engine_state(sup)
    host_heartbeat(host=host, engine_state=state)
    rev_id = state.get("revision_id")
    if state["running"] and state.get("healthy") and rev_id and str(host.active_revision_id) != rev_id:
        revision = DeploymentRevision.objects.filter(pk=rev_id, host=host).first()
        if revision is not None:
            revision_mark_active(revision=revision, actor=None, reason="reconciled from the host")
    return state
