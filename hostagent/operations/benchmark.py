"""A benchmark of what the host serves, measured on the host; the figures go to the panel with
the operation's end and are stored against the revision there."""

from __future__ import annotations

import time
from typing import Any

from hostagent.context import AgentContext
from hostagent.launch import launch_spec
from hostagent.probes.nvml import sample_gpus
from hostagent.runtime.energy import NullMeter, NvmlEnergyMeter
from hostagent.runtime.loadgen import Target, run_benchmark_sync
from hostagent.runtime.readiness import api_key_from_spec
from serving.benchmarking.profiles import BenchmarkProfile
from serving.wire import Order

from .common import Reporter
from .outcome import CANCELLED, FAILED, SUCCEEDED, Outcome, Refused


def run_benchmark(ctx: AgentContext, order: Order) -> Outcome:
    launch = order.revision
    if launch is None:
        raise Refused("The benchmark order names no revision to measure.")
    op_id, number = order.id, launch.number
    status = ctx.supervisor.status()
    if not status.running or status.revision_id != str(launch.id):
        raise Refused(f"{ctx.host} is not serving r{number} (engine: {status.revision_label or 'stopped'}).")
    profile = BenchmarkProfile.from_dict(order.params["profile"])
    spec = launch_spec(launch, installs=order.host.engine_installs)
    meter: Any = NullMeter()
    if order.host.nvml_available:
        meter = NvmlEnergyMeter(lambda: [(s.energy_mj, s.power_w or 0.0) for s in sample_gpus()])
    report = Reporter(ctx.panel, op_id)
    last_check = [0.0, False]

    def cancelled() -> bool:  # at most once a second: the load generator asks often
        now = time.monotonic()
        if now - last_check[0] > 1.0:
            last_check[0] = now
            last_check[1] = report.cancelled()
        return bool(last_check[1])

    def progress(done: int, total: int, level: str, message: str) -> None:
        # `level` carries the level's own count ("concurrency 4 (level 2 of 3): 5/32"); the bar, the run's.
        report(
            f"{level} · {done}/{total} in all" if level else f"{done}/{total}", done / total if total else 0.0, message
        )

    report("preparing", 0.0, f"benchmark '{profile.name}' of r{number} at {spec.chat_url}")
    result = run_benchmark_sync(
        Target.from_launch_spec(spec, api_key=api_key_from_spec(spec)),
        profile,
        progress=progress,
        cancel=cancelled,
        meter=meter,
        served_context=launch.served_context,
    )
    data = result.to_dict()
    summary = {"status": result.status, "revision": number}
    if result.status == "completed":
        state, error = SUCCEEDED, ""
    elif result.status == "cancelled":
        state, error = CANCELLED, "Cancelled; the results measured so far are kept."
    else:
        state, error = FAILED, f"{result.reason or result.status}; the partial results are kept."
    return Outcome(state, result=summary, benchmark=data, error=error)
