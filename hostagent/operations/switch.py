"""Switch: preflight, stop, start, verify; on failure stop the new engine and bring the
previous revision back. The panel points the host at the new revision when it hears the
switch succeeded."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings

from hostagent.context import AgentContext
from hostagent.launch import launch_spec
from hostagent.preflight import host_preflight
from hostagent.runtime.errors import EngineStartError, HostRuntimeError
from hostagent.runtime.supervisor import Supervisor
from serving.engines.base import EngineConfigError, LaunchSpec

from .common import Reporter, report_state


def _start(sup: Supervisor, launch: dict[str, Any], report: Reporter, spec: LaunchSpec) -> dict[str, Any]:
    """Stop, start, wait until ready, verify; the answer carries where the seconds went."""
    result = sup.start(
        spec,
        revision_label=launch["label"],
        revision_id=str(launch["id"]),
        on_progress=report,
        ready_timeout=settings.ENGINE_READY_TIMEOUT_S,
    )
    stop_s = sum(s.seconds for s in result.stopped)
    verify_s = result.chat.seconds if result.chat is not None else 0.0
    return {
        "pid": result.pid,
        "seconds": round(result.seconds, 3),
        "served_name": result.served_name,
        "stopped": [{"pid": s.pid, "kind": s.kind, "revision": s.revision_label} for s in result.stopped],
        "timing": {
            "stop_s": round(stop_s, 3),
            "ready_s": round(result.ready.seconds, 3),  # launched -> health 200 and the name listed
            "verify_s": round(verify_s, 3),
            "start_other_s": round(result.seconds - stop_s - result.ready.seconds - verify_s, 3),
        },
    }


def _what(ctx: AgentContext, order: dict[str, Any]) -> str:
    number, previous = order["revision"]["number"], order.get("previous")
    if order["kind"] == "launch":  # a start of the active revision (after Stop, or restored after a restart)
        why = " again after a restart" if (order.get("params") or {}).get("reason") == "restore" else ""
        return f"starting r{number} on {ctx.host}{why}"
    if order["kind"] == "rollback":
        why = (order.get("params") or {}).get("reason") or ""
        return (
            f"rolling {ctx.host} back to r{number}"
            + (f" from r{previous['number']}" if previous else "")
            + (f": {why}" if why else "")
        )
    return f"switching {ctx.host} to r{number}" + (f" from r{previous['number']}" if previous else "")


def _gpus_now(sup: Supervisor) -> dict[str, Any]:
    """NVML's samples now and the pids of every engine the panel runs here (the GPU memory check)."""
    from hostagent.held import engine_supervisors, group_pids
    from hostagent.probes.nvml import sample_gpus

    ours = {pid for engine in engine_supervisors(sup).values() for pid in group_pids(engine)}
    return {"gpu_samples": sample_gpus() or None, "ours": ours}  # None: no NVML here, nothing to check


def run_switch(ctx: AgentContext, order: dict[str, Any]) -> None:
    """A switch to the order's revision, or (kind `launch`) a start of the active revision with
    nothing to roll back to: preflight, stop what runs, start, wait until healthy, verify. The
    front door first gives up its own engine of that revision, if it loaded one on demand."""
    with ctx.switching(str(order["revision"]["id"])):
        _switch(ctx, order)


def _switch(ctx: AgentContext, order: dict[str, Any]) -> None:
    op_id = order["id"]
    launch, previous = order["revision"], order.get("previous")
    installs = order["host"].get("engine_installs") or {}
    number = launch["number"]
    sup = ctx.supervisor
    began = time.monotonic()
    report = Reporter(ctx.panel, op_id)
    if report.cancelled():
        ctx.panel.finish(op_id, state="cancelled", error="Cancelled before the engine was touched.")
        return
    try:
        spec = launch_spec(launch, installs=installs)
    except (HostRuntimeError, EngineConfigError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        report.log(f"refused before anything was stopped: {reason}")
        ctx.panel.finish(
            op_id,
            state="failed",
            result={"revision": number, "reason": reason, "refused": True, "rolled_back": False},
            error=f"r{number} was refused on the host ({reason}); the engine was not touched.",
        )
        return
    cpu_only = bool(order["host"].get("cpu_only"))
    checks = host_preflight(
        launch, spec, sup, installs=installs, cpu_only=cpu_only, **({} if cpu_only else _gpus_now(sup))
    )
    said = "\n".join(f"preflight {check.name}: {check.status}: {check.message}" for check in checks)
    failed = [c for c in checks if c.failed]
    if failed:
        reason = " ".join(c.message for c in failed)
        report.log(f"{said}\nrefused before anything was stopped: {reason}")
        ctx.panel.finish(
            op_id,
            state="failed",
            result={
                "revision": number,
                "reason": reason,
                "refused": True,
                "rolled_back": False,
                "preflight": [c.to_dict() for c in checks],
            },
            error=f"r{number} was refused on the host before anything was stopped: {reason}",
        )
        return
    before_start = time.monotonic() - began
    try:
        # Nothing below waits for the panel's answer: the reports go from their own thread.
        with sup.watchdog_paused(f"switch to r{number}"), report.in_background() as background:
            background.log(f"{said}\n{_what(ctx, order)}")
            started = _start(sup, launch, background.scaled(0.0, 0.9), spec)
    except (EngineStartError, HostRuntimeError) as exc:
        tail = list(getattr(exc, "log_tail", []) or [])
        reason = getattr(exc, "reason", None) or str(exc)
        report.log(f"switch failed: {reason}")
        if tail:
            report.log("--- engine log tail ---\n" + "\n".join(tail))
        result: dict[str, Any] = {
            "revision": number,
            "previous": previous["number"] if previous else None,
            "reason": reason,
            "log_tail": tail,
            "rolled_back": False,
        }
        if previous is None:
            sup.stop()
            result["rollback_failed"] = False
            relaunch = order["kind"] == "launch"
            after = "nothing serves until it is started again." if relaunch else "there was no previous revision."
            _failed(ctx, op_id, result, f"r{number} did not come up ({reason}); {after}")
        else:
            _rollback(ctx, order, result, report, reason)
        return
    reported = time.monotonic()
    report_state(ctx)
    timing = {
        "preflight_s": round(before_start, 3),  # begun -> the supervisor's start: checks, reports
        **started["timing"],
        "state_report_s": round(time.monotonic() - reported, 3),
    }
    ctx.panel.finish(
        op_id,
        state="succeeded",
        result={"revision": number, "previous": previous["number"] if previous else None, **started, "timing": timing},
    )


def _rollback(ctx: AgentContext, order: dict[str, Any], result: dict[str, Any], report: Reporter, reason: str) -> None:
    op_id, number, previous = order["id"], order["revision"]["number"], order["previous"]
    sup = ctx.supervisor
    report("rollback", 0.9, f"starting the previous revision r{previous['number']} again")
    try:
        spec = launch_spec(previous, installs=order["host"].get("engine_installs") or {})
        with sup.watchdog_paused(f"rollback to r{previous['number']}"):
            _start(sup, previous, report.scaled(0.9, 0.1), spec)
    except (EngineStartError, HostRuntimeError, EngineConfigError) as exc:
        again = getattr(exc, "reason", None) or str(exc)
        result.update(rolled_back=False, rollback_failed=True, rollback_reason=again)
        report.log(f"ROLLBACK FAILED: r{previous['number']} did not come back either: {again}")
        sup.stop()
        error = (
            f"r{number} failed ({reason}) and the previous revision r{previous['number']} did not "
            f"come back either ({again}). The host serves nothing: act now."
        )
        _failed(ctx, op_id, result, error)
        return
    result.update(rolled_back=True, rollback_failed=False)
    error = f"r{number} failed ({reason}); rolled back to r{previous['number']}, which is serving again."
    _failed(ctx, op_id, result, error)


def _failed(ctx: AgentContext, op_id: str, result: dict[str, Any], error: str) -> None:
    """Report what the host runs now, then the switch as failed with `result` and `error`."""
    report_state(ctx)
    ctx.panel.finish(op_id, state="failed", result=result, error=error)
