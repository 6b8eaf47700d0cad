"""Switch: preflight, stop, start, verify; on failure stop the new engine and bring the
previous revision back. The panel points the host at the new revision when it hears the
switch succeeded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NotRequired, TypedDict

from django.conf import settings

from hostagent.context import AgentContext
from hostagent.held import engine_supervisors, group_pids
from hostagent.launch import launch_spec
from hostagent.preflight import host_preflight
from hostagent.probes.nvml import sample_gpus
from hostagent.runtime.errors import EngineStartError, HostRuntimeError
from hostagent.runtime.supervisor import Supervisor
from serving.engines.base import EngineConfigError, LaunchSpec
from serving.wire import Order, RevisionLaunch

from .common import Reporter, report_state
from .outcome import Cancelled, Outcome, Refused

if TYPE_CHECKING:
    from hostagent.probes.nvml import GpuSample


class StoppedEngine(TypedDict):
    pid: int
    kind: str
    revision: str | None


class Started(TypedDict):
    """A start that came up: its pid, where the seconds went, what it stopped first."""

    pid: int
    seconds: float
    served_name: str
    stopped: list[StoppedEngine]
    timing: dict[str, float]  # stop_s, ready_s, verify_s, start_other_s (and the switch's own)


class SwitchFailure(TypedDict):
    """The result of a switch whose revision did not come up (the panel shows it, rollouts read
    `rolled_back`)."""

    revision: int
    previous: int | None
    reason: str
    log_tail: list[str]
    rolled_back: bool
    rollback_failed: NotRequired[bool]
    rollback_reason: NotRequired[str]


class GpusNow(TypedDict):
    gpu_samples: list[GpuSample] | None  # None: no NVML here, nothing to check
    ours: set[int]


def _start(sup: Supervisor, launch: RevisionLaunch, report: Reporter, spec: LaunchSpec) -> Started:
    """Stop, start, wait until ready, verify; the answer carries where the seconds went."""
    result = sup.start(
        spec,
        revision_label=launch.label,
        revision_id=str(launch.id),
        on_progress=report,
        ready_timeout=settings.ENGINE_READY_TIMEOUT_S,
    )
    stop_s = sum(s.seconds for s in result.stopped)
    verify_s = result.chat.seconds if result.chat is not None else 0.0
    started: Started = {
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
    return started


def _what(ctx: AgentContext, order: Order, launch: RevisionLaunch) -> str:
    previous = order.previous
    reason = order.params.get("reason")
    if order.kind == "launch":  # a start of the active revision (after Stop, or restored after a restart)
        why = " again after a restart" if reason == "restore" else ""
        return f"starting {launch.label} on {ctx.host}{why}"
    if order.kind == "rollback":
        why = reason or ""
        return (
            f"rolling {ctx.host} back to {launch.label}"
            + (f" from {previous.label}" if previous else "")
            + (f": {why}" if why else "")
        )
    return f"switching {ctx.host} to {launch.label}" + (f" from {previous.label}" if previous else "")


def _gpus_now(sup: Supervisor) -> GpusNow:
    """NVML's samples now and the pids of every engine the panel runs here (the GPU memory check)."""
    ours = {pid for engine in engine_supervisors(sup).values() for pid in group_pids(engine)}
    return {"gpu_samples": sample_gpus() or None, "ours": ours}


def run_switch(ctx: AgentContext, order: Order) -> Outcome:
    """A switch to the order's revision, or (kind `launch`) a start of the active revision with
    nothing to roll back to: preflight, stop what runs, start, wait until healthy, verify. The
    front door first gives up its own engine of that revision, if it loaded one on demand."""
    if order.revision is None:
        raise Refused(f"The {order.kind} order names no revision to run.")
    with ctx.switching(str(order.revision.id)):
        return _switch(ctx, order, order.revision)


def _switch(ctx: AgentContext, order: Order, launch: RevisionLaunch) -> Outcome:
    previous, installs, number = order.previous, order.host.engine_installs, launch.number
    sup = ctx.supervisor
    began = time.monotonic()
    report = Reporter(ctx.panel, order.id)
    if report.cancelled():
        raise Cancelled("Cancelled before the engine was touched.")
    try:
        spec = launch_spec(launch, installs=installs)
    except (HostRuntimeError, EngineConfigError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        report.log(f"refused before anything was stopped: {reason}")
        raise Refused(
            f"r{number} was refused on the host ({reason}); the engine was not touched.",
            result={"revision": number, "reason": reason, "refused": True, "rolled_back": False},
        ) from exc
    cpu_only = order.host.cpu_only
    gpus: GpusNow = {"gpu_samples": None, "ours": set()} if cpu_only else _gpus_now(sup)
    checks = host_preflight(launch, spec, sup, installs=installs, cpu_only=cpu_only, **gpus)
    said = "\n".join(f"preflight {check.name}: {check.status}: {check.message}" for check in checks)
    failed = [c for c in checks if c.failed]
    if failed:
        reason = " ".join(c.message for c in failed)
        report.log(f"{said}\nrefused before anything was stopped: {reason}")
        raise Refused(
            f"r{number} was refused on the host before anything was stopped: {reason}",
            result={
                "revision": number,
                "reason": reason,
                "refused": True,
                "rolled_back": False,
                "preflight": [c.to_dict() for c in checks],
            },
        )
    before_start = time.monotonic() - began
    try:
        # Nothing below waits for the panel's answer: the reports go from their own thread.
        with sup.watchdog_paused(f"switch to r{number}"), report.in_background() as background:
            background.log(f"{said}\n{_what(ctx, order, launch)}")
            started = _start(sup, launch, background.scaled(0.0, 0.9), spec)
    except (EngineStartError, HostRuntimeError) as exc:
        tail = list(getattr(exc, "log_tail", []) or [])
        reason = getattr(exc, "reason", None) or str(exc)
        report.log(f"switch failed: {reason}")
        if tail:
            report.log("--- engine log tail ---\n" + "\n".join(tail))
        result: SwitchFailure = {
            "revision": number,
            "previous": previous.number if previous else None,
            "reason": reason,
            "log_tail": tail,
            "rolled_back": False,
        }
        if previous is None:
            sup.stop()
            result["rollback_failed"] = False
            relaunch = order.kind == "launch"
            after = "nothing serves until it is started again." if relaunch else "there was no previous revision."
            return _failed(ctx, result, f"r{number} did not come up ({reason}); {after}")
        return _rollback(ctx, order, launch, previous, result, report, reason)
    reported = time.monotonic()
    report_state(ctx)
    timing = {
        "preflight_s": round(before_start, 3),  # begun -> the supervisor's start: checks, reports
        **started["timing"],
        "state_report_s": round(time.monotonic() - reported, 3),
    }
    return Outcome.succeeded(
        {"revision": number, "previous": previous.number if previous else None, **started, "timing": timing}
    )


def _rollback(
    ctx: AgentContext,
    order: Order,
    launch: RevisionLaunch,
    previous: RevisionLaunch,
    result: SwitchFailure,
    report: Reporter,
    reason: str,
) -> Outcome:
    number, sup = launch.number, ctx.supervisor
    report("rollback", 0.9, f"starting the previous revision {previous.label} again")
    try:
        spec = launch_spec(previous, installs=order.host.engine_installs)
        with sup.watchdog_paused(f"rollback to {previous.label}"):
            _start(sup, previous, report.scaled(0.9, 0.1), spec)
    except (EngineStartError, HostRuntimeError, EngineConfigError) as exc:
        again = getattr(exc, "reason", None) or str(exc)
        result["rolled_back"], result["rollback_failed"], result["rollback_reason"] = False, True, again
        report.log(f"ROLLBACK FAILED: {previous.label} did not come back either: {again}")
        sup.stop()
        error = (
            f"r{number} failed ({reason}) and the previous revision {previous.label} did not "
            f"come back either ({again}). The host serves nothing: act now."
        )
        return _failed(ctx, result, error)
    result["rolled_back"], result["rollback_failed"] = True, False
    error = f"r{number} failed ({reason}); rolled back to {previous.label}, which is serving again."
    return _failed(ctx, result, error)


def _failed(ctx: AgentContext, result: SwitchFailure, error: str) -> Outcome:
    """Report what the host runs now; the switch ends failed with `result` and `error`."""
    report_state(ctx)
    return Outcome.failed(error, result)
