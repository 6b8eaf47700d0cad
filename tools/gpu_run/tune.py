"""Issue 43 on a GPU: one tuning run through the real agent, recorded (`flow.py --tune`).

From a plain base (every layer on the GPU, four slots, flash attention off, f16 KV cache), the
panel's own tuning run (tuning.services.tuning_start, as the page's button calls it) over what a
lab tunes by hand on a GPU: layers on the GPU, parallel slots, micro-batch size, flash attention
and the V cache's type. The space is larger than EXHAUSTIVE_MAX, so Optuna's TPE sampler picks
the candidates; a quantized V cache without flash attention is refused by the planner (never
started). The objective is the output throughput at 8 streams with TTFT p95 at most 500 ms and
J per token at most the base's (the issue's own example); then the best is proposed (a switch)
when it beat the base beyond noise. NVML is read every 2 s for the whole run (for replay).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SPACE: dict[str, list[Any]] = {
    "n_gpu_layers": ["all", 12],
    "parallel": [4, 8, 16],
    "ubatch_size": [256, 1024],
    "flash_attn": ["on", "off"],
    "cache_type_v": ["f16", "q8_0"],
}
BASE_KNOBS: dict[str, Any] = {
    "ctx_size": 16384,
    "parallel": 4,
    "n_gpu_layers": "all",
    "flash_attn": "off",
    "metrics": True,
}
LIMITS = "ttft_p95<=500,j_per_token<=base"


def tuning_flow(
    figures: dict[str, Any],
    nvml: Any,
    *,
    make_revision: Callable[[dict[str, Any], str], Any],
    switch_to: Callable[[int, Any], bool],
    actor: Any,
    wait: Callable[..., Any],
    cpu: bool,
    series: Callable[..., Any],
    trials: int = 6,
    minutes: int = 3,
) -> None:
    """Switch to the base, run the tuning, propose its best; every figure into figures["tuning"]."""
    import threading

    from deployments.models import active_revision_of
    from hardware.models import Host
    from serving.benchmarking.profiles import BenchmarkProfile
    from tuning.models import TuningRun
    from tuning.selectors import tuning_points, tuning_trials
    from tuning.services import tuning_propose, tuning_start

    base_knobs = {**BASE_KNOBS, **({"n_gpu_layers": 0} if cpu else {})}
    space = dict(SPACE)
    if cpu:  # the rehearsal: no GPU layers to move, a load a CPU finishes in seconds
        space.pop("n_gpu_layers")
    profile = BenchmarkProfile(
        name="tune-gpu", concurrency=(8,), num_requests=32, input_tokens=512, output_tokens=128, warmup_requests=2
    )
    if cpu:
        profile = BenchmarkProfile(
            name="tune-cpu", concurrency=(8,), num_requests=8, input_tokens=96, output_tokens=8, warmup_requests=0
        )
    base = make_revision(base_knobs, "the tuning run's base: all layers on the GPU, 4 slots, flash attention off")
    if not switch_to(len(figures.get("switches", [])), base):
        figures["tuning"] = {"error": "the switch to the base failed"}
        return
    stop = threading.Event()
    sampler = series(nvml, "tuning", stop, interval=2.0, limit=400)
    t = time.monotonic()
    run = tuning_start(
        host=base.host,
        base=base,
        space=space,
        objective="throughput",
        level="concurrency 8",
        limits=LIMITS,
        profile=profile.to_dict(),
        max_trials=trials,
        max_minutes=minutes,
        repeats=2,
        repeat_best=2,
        seed=43,
        actor=actor,
    )
    progress = ""
    while run.is_open and time.monotonic() - t < 1200:
        time.sleep(1.0)
        run.refresh_from_db()
        now = f"{run.stage} trial {run.current_trial.number if run.current_trial else '-'}"
        if now != progress:
            progress = now
            print(f"[tune {time.monotonic() - t:6.1f}s] {now}", flush=True)
    took = time.monotonic() - t
    stop.set()
    sampler.join(30)
    trials = tuning_trials(run=run)
    points = {p.trial.number: p for p in tuning_points(run=run, trials=trials)}
    entry: dict[str, Any] = {
        "run": run.pk,
        "seconds": round(took, 1),
        "state": run.state,
        "reason": run.reason,
        "verdict": run.verdict,
        "best": run.best.number if run.best else None,
        "space": run.space,
        "objective": run.objective,
        "limits": run.limits,
        "profile": run.profile,
        "base_revision": base.number,
        "base_knobs": base.knobs,
        "trials": [
            {
                "number": trial.number,
                "engine": trial.engine,
                "knobs": trial.knobs,
                "revision": trial.revision.number if trial.revision else None,
                "parent": trial.revision.parent.number if trial.revision and trial.revision.parent else None,
                "state": trial.state,
                "reason": trial.reason,
                "findings": trial.findings,
                "rounds": trial.rounds,
                "value": trial.value,
                "passed": trial.passed,
                "planned_memory": trial.planned_memory,
                "measured_memory": trial.measured_memory,
                "seconds": (
                    (trial.finished_at - trial.created_at).total_seconds()
                    if trial.finished_at and trial.created_at
                    else None
                ),
                "front": points[trial.number].front if trial.number in points else None,
            }
            for trial in trials
        ],
    }
    print(f"[tune] {run.state} in {took:.1f} s: {run.reason[:300]}", flush=True)
    if run.state == TuningRun.State.SUCCEEDED and run.best is not None and run.verdict.get("beats_base"):
        t = time.monotonic()
        proposal = tuning_propose(run=run, actor=actor)
        op = wait(proposal.operation) if proposal.operation is not None else None
        entry["proposal"] = {
            "revision": proposal.revision.number,
            "state": op.state if op else None,
            "seconds": round(time.monotonic() - t, 1),
        }
    serving = active_revision_of(Host.objects.get(pk=base.host_id))
    entry["serving_at_end"] = serving.number if serving else None
    figures["tuning"] = entry
