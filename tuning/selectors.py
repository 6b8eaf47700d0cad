"""What the tuning page, the API and the CLI read of tuning runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from deployments.models import DeploymentRevision
from hardware.models import Host
from serving.benchmarking.gate import METRICS
from serving.tuning import Objective, pareto_front

from .models import TuningRun, TuningTrial

# The Pareto plot's axes: the run's objective against each of these (lower is better for all).
COST_AXES = ("ttft_p95", "memory", "j_per_token")


def tuning_run_list(*, host: Host | None = None, limit: int = 50) -> QuerySet[TuningRun]:
    runs = TuningRun.objects.select_related("host", "base", "best", "created_by", "approved_by")
    if host is not None:
        runs = runs.filter(host=host)
    return runs.order_by("-created_at")[:limit]


def tuning_run_get(*, pk: Any) -> TuningRun:
    """404 when there is none."""
    return get_object_or_404(
        TuningRun.objects.select_related("host", "base", "best__revision", "created_by", "approved_by", "current_op"),
        pk=pk,
    )


def tuning_run_open(*, host: Host) -> TuningRun | None:
    """The host's run under way, if any (at most one)."""
    return TuningRun.objects.filter(host=host, state__in=TuningRun.OPEN).first()


def tuning_trials(*, run: TuningRun) -> list[TuningTrial]:
    """Every trial in order (0: the base), with its revision."""
    return list(run.trials.select_related("revision").order_by("number"))


@dataclass(frozen=True)
class TrialPoint:
    """One measured trial as the Pareto plot draws it; `front`: no other trial beats it on the
    objective and the cost at once."""

    trial: TuningTrial
    objective: float | None
    costs: dict[str, float | None]
    front: dict[str, bool]


def _memory(trial: TuningTrial) -> float | None:
    """Bytes held at the peak, all devices together: measured, else planned."""
    for source in (trial.measured_memory, trial.planned_memory):
        if isinstance(source, dict) and source:
            return float(sum(v for v in source.values() if isinstance(v, int | float)))
    return None


def tuning_points(*, run: TuningRun, trials: list[TuningTrial] | None = None) -> list[TrialPoint]:
    """The measured trials (the base included) with their objective, their costs (COST_AXES: TTFT
    p95 at the objective's level, memory, J per token) and, per cost, whether they are on the
    Pareto front of objective against that cost."""
    objective = Objective(**run.objective)
    measured = [t for t in (trials if trials is not None else tuning_trials(run=run)) if t.rounds]
    rows = []
    for trial in measured:
        figures = trial.figures()
        costs = {
            "ttft_p95": (figures.get(objective.level) or {}).get("ttft_p95"),
            "memory": _memory(trial),
            "j_per_token": (figures.get("run") or {}).get("j_per_token"),
        }
        rows.append((trial, trial.value, costs))
    fronts: dict[str, set[int]] = {}
    for axis in COST_AXES:
        points = [{"objective": value, axis: costs[axis]} for _, value, costs in rows]
        fronts[axis] = set(pareto_front(points, {"objective": objective.higher_is_better, axis: False}))
    return [
        TrialPoint(trial, value, costs, {axis: i in fronts[axis] for axis in COST_AXES})
        for i, (trial, value, costs) in enumerate(rows)
    ]


def tuning_best_pair(*, run: TuningRun) -> tuple[DeploymentRevision, DeploymentRevision] | None:
    """(the base, the best trial's revision) for the diff (deployments:revision_diff), or None."""
    best = run.best
    if best is None or best.revision is None:
        return None
    return run.base, best.revision


def metric_label(key: str) -> str:
    """A metric's words and unit, for headings ("TTFT p95 (ms)"); memory is in bytes."""
    if key == "memory":
        return "memory (bytes)"
    metric = METRICS.get(key)
    return f"{metric.label} ({metric.unit})" if metric else key
