"""How long a llama.cpp install compiles, from what the panel has on record: the host's own last
compile (Host.engine_installs), else a rough per-core figure; and the time an install that is
compiling has left, as its operation page and the dashboard's first steps say it. Reads only:
deployments.services.installs offers and starts installs."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from deployments.choices import OperationKind
from deployments.models import Operation
from hardware.models import Host
from serving.engines.registry import recorded_installs
from serving.operation_tasks import COMPILING_STAGE

# A rough figure for compiling llama-server (one job per core, llama-server alone) when the host
# has no compile of its own on record. Measured: from an empty pip cache on a 2-core machine the
# first install (venv, pip, the compile) took 4.5 minutes, about 10 minutes of one core; the CUDA
# build (sm_90 only) about 3.5 minutes on 16 cores, about 60 minutes of one core.
COMPILE_CORE_MINUTES = 10
COMPILE_CORE_MINUTES_CUDA = 60
COMPILE_MIN_SECONDS = 120  # a recorded install this long was a compile, not a cached wheel


def _last_compile_seconds(host: Host) -> int | None:
    """How long the host's last llama.cpp compile took (an install that ran COMPILE_MIN_SECONDS
    or more), or None when none is on record."""
    recorded = recorded_installs(host.engine_installs, "llama.cpp")
    compiles = sorted(
        (e.get("installed_at", ""), e["install_seconds"])
        for e in recorded.values()
        if isinstance(e, dict)
        and isinstance(e.get("install_seconds"), int)
        and e["install_seconds"] >= COMPILE_MIN_SECONDS
    )
    return compiles[-1][1] if compiles else None


def _core_minutes(host: Host) -> int:
    """The rough figure for `host`'s build: with CUDA where it has NVIDIA GPUs (NVML answered)."""
    return COMPILE_CORE_MINUTES_CUDA if host.nvml_available else COMPILE_CORE_MINUTES


def _rough_compile_seconds(host: Host) -> int | None:
    """The host's rough figure spread over its cores (None: it has not reported them)."""
    cores = host.cpu_cores or 0
    return max(2, round(_core_minutes(host) / cores)) * 60 if cores else None


def compile_estimate(host: Host) -> str:
    """How long compiling llama.cpp takes on `host`: from its own last compile when one is on
    record (an install that ran COMPILE_MIN_SECONDS or more), else the rough per-core figure."""
    cores = host.cpu_cores or 0
    on = f" on this host's {cores} cores" if cores else ""
    last = _last_compile_seconds(host)
    if last is not None:
        minutes = max(1, round(last / 60))
        return f"compiles for about {minutes} minutes{on} (its last compile here took that long)"
    rough = _rough_compile_seconds(host)
    if rough is None:
        return (
            f"compiles for many minutes (about {_core_minutes(host)} minutes of one core; "
            "this host has not reported its cores)"
        )
    figure = f"a rough figure: about {_core_minutes(host)} minutes of one core"
    return f"compiles for about {rough // 60} minutes{on} ({figure})"


RATE_FROM = 0.02  # below this share of a compile, its rate so far says too little


def install_time_left(op: Operation, *, now: datetime | None = None) -> str:
    """The time an install that is compiling has left, as the operation page says it ("" when
    it is not compiling). The agent reports the compile's fraction done as the progress
    (hostagent.install_progress). Two figures for the whole install's time: the time so far
    divided by the fraction done (the rate so far), and the host's own last compile (else the
    rough per-core figure); the rate counts for as much as the compile has done (at 10 % the
    past compile weighs 90 %, at 80 % 20 %), so the first minutes do not swing the figure. What
    is left is the share not done of that blend."""
    if op.kind != OperationKind.INSTALL or not op.is_active or op.started_at is None:
        return ""
    if not (op.stage or "").startswith(COMPILING_STAGE):
        return ""
    done = max(0.0, min(1.0, float(op.progress or 0.0)))
    elapsed = max(0.0, ((now or timezone.now()) - op.started_at).total_seconds())
    past = _last_compile_seconds(op.host)
    before = past if past is not None else _rough_compile_seconds(op.host)
    rate = elapsed / done if done >= RATE_FROM else None
    before_is = "this host's last compile" if past is not None else "a rough figure for this host's cores"
    if rate is not None and before is not None:
        total, basis = done * rate + (1 - done) * before, f"its rate so far and {before_is}"
    elif rate is not None:
        total, basis = rate, "its rate so far"
    elif before is not None:
        total, basis = before, before_is
    else:
        return ""
    left = (1.0 - done) * total
    if left < 60:
        return f"less than a minute left (from {basis})"
    return f"about {round(left / 60)} minute{'s' if round(left / 60) != 1 else ''} left (from {basis})"
