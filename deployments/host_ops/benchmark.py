"""A benchmark of what the host serves, measured on the host and stored against the revision."""

from __future__ import annotations

import time
from typing import Any

from django.db import close_old_connections

from deployments.choices import OperationState
from deployments.models import DeploymentRevision, Operation
from deployments.services.operations import operation_finish

from .common import Reporter, launch_spec_for, supervisor_for


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
