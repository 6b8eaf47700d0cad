"""What the tuning pages show of a run: its trials as table rows (knobs, figures, planned against
measured memory, why one was refused or ruled out), its progress against the budget, the Pareto
plots (deployments.plots.pareto_chart) and the best trial's diff against the base. Reads only
(tuning.selectors); the views render it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from deployments.plots import pareto_chart
from deployments.selectors.revision_views import changes_between
from hardware.review import review_required
from serving.benchmarking.gate import METRICS
from serving.diffing import RevisionDiff
from serving.engines.registry import engine_label
from serving.tuning import Candidate, Limit, Objective, SearchSpace, TuningInputError, space_check

from . import selectors
from .models import TuningRun, TuningTrial

GiB = 1024**3
# The figures each trial's row shows, at the objective's load level (energy: the whole run's).
FIGURES = ("throughput", "decode", "ttft_p95", "j_per_token")
# Each cost of the Pareto plots: (TrialPoint.costs key, the x axis's words, its scale).
AXES = (("ttft_p95", "TTFT p95 (ms)", 1.0), ("memory", "memory (GiB)", 1.0 / GiB), ("j_per_token", "J per token", 1.0))
FINISHED = (TuningTrial.State.MEASURED, TuningTrial.State.RULED_OUT, TuningTrial.State.FAILED)


@dataclass(frozen=True)
class MemoryLine:
    """One device's memory for a trial: what the planner said, what the host held at the peak."""

    device: str
    planned: int | None
    measured: int | None

    @property
    def error_pct(self) -> float | None:
        if not self.planned or self.measured is None:
            return None
        return 100.0 * (self.measured - self.planned) / self.planned


@dataclass(frozen=True)
class TrialRow:
    trial: TuningTrial
    engine: str  # the engine it ran, as people write it
    knobs: str
    figures: list[tuple[str, float | None]]
    memory: list[MemoryLine]
    front: bool
    best: bool
    findings: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Progress:
    measured: int  # candidates finished (measured, ruled out or failed)
    budget: int  # candidates the run measures at most: its budget, or the whole space when smaller
    space: int
    refused: int
    minutes: float
    max_minutes: int

    @property
    def pct(self) -> int:
        return min(100, round(100 * self.measured / self.budget)) if self.budget else 100


def _words(run: TuningRun, trial: TuningTrial) -> str:
    """The trial's knobs in words, its engine first when it is not the base's."""
    return Candidate(trial.engine, trial.knobs).describe(run.base.engine)


def _knobs(run: TuningRun, trial: TuningTrial) -> str:
    """The knobs it set (its engine has a column of its own)."""
    other = trial.engine and trial.engine != run.base.engine
    return ", ".join(f"{k}={v}" for k, v in trial.knobs.items()) or ("its defaults" if other else "")


def _engine(run: TuningRun, trial: TuningTrial) -> str:
    return engine_label(trial.engine or run.base.engine)


def _memory(trial: TuningTrial) -> list[MemoryLine]:
    planned = trial.planned_memory if isinstance(trial.planned_memory, dict) else {}
    measured = trial.measured_memory if isinstance(trial.measured_memory, dict) else {}
    return [
        MemoryLine(str(device), planned.get(device), measured.get(device))
        for device in sorted(set(planned) | set(measured))
    ]


def trial_rows(run: TuningRun, trials: list[TuningTrial], points: list[selectors.TrialPoint]) -> list[TrialRow]:
    objective = Objective(**run.objective)
    fronts = {p.trial.pk: any(p.front.values()) for p in points}
    rows = []
    for trial in trials:
        figures = trial.figures()
        shown = []
        for key in FIGURES:
            level = objective.level if METRICS[key].per_level else "run"
            shown.append((key, (figures.get(level) or {}).get(key)))
        rows.append(
            TrialRow(
                trial=trial,
                engine=_engine(run, trial),
                knobs="the base revision" if trial.is_base else _knobs(run, trial),
                figures=shown,
                memory=_memory(trial),
                front=fronts.get(trial.pk, False),
                best=trial.pk == run.best_id,
                findings=[f for f in trial.findings if isinstance(f, dict)] if isinstance(trial.findings, list) else [],
            )
        )
    return rows


def progress(run: TuningRun, trials: list[TuningTrial]) -> Progress:
    candidates = [t for t in trials if not t.is_base]
    stored = _space(run)
    space = stored.size() if stored else 0
    end = run.finished_at or timezone.now()
    return Progress(
        measured=sum(1 for t in candidates if t.state in FINISHED),
        budget=min(run.max_trials, space) if space else run.max_trials,
        space=space,
        refused=sum(1 for t in candidates if t.state == TuningTrial.State.REFUSED),
        minutes=max(0.0, (end - run.created_at).total_seconds() / 60.0),
        max_minutes=run.max_minutes,
    )


def pareto_charts(run: TuningRun, points: list[selectors.TrialPoint]) -> list[tuple[str, str]]:
    """(cost key, SVG) per cost some trial measured: TTFT p95 always (empty until a trial is
    measured), memory and energy only where measured."""
    objective = Objective(**run.objective)
    y_label = selectors.metric_label(objective.metric)
    charts = []
    for key, x_label, scale in AXES:
        if key != "ttft_p95" and not any(p.costs.get(key) is not None for p in points):
            continue
        dots = [
            {
                "x": None if p.costs.get(key) is None else float(p.costs[key] or 0.0) * scale,
                "y": p.objective,
                "label": "base" if p.trial.is_base else f"trial {p.trial.number} ({_words(run, p.trial)})",
                "front": p.front.get(key, False),
                "base": p.trial.is_base,
            }
            for p in points
        ]
        title = f"{y_label} against {x_label}"
        charts.append((key, pareto_chart(dots, title=title, x_label=x_label, y_label=y_label)))
    return charts


def _space(run: TuningRun) -> SearchSpace | None:
    """The run's space as stored (its base engine's knobs, its other engines'); None when it no
    longer reads (a knob an adapter has since dropped)."""
    try:
        return space_check(run.base.engine, run.space, engines=run.engines or None)
    except TuningInputError:
        return None


def space_engines(run: TuningRun) -> list[tuple[str, str]]:
    """The other engines the run tries, each with its knobs and values in words."""
    space = _space(run)
    shown = []
    for arm in space.others if space else ():
        words = " · ".join(f"{k} in {', '.join(map(str, v))}" for k, v in arm.knobs) or "at its defaults"
        shown.append((engine_label(arm.engine), words))
    return shown


def limits_text(run: TuningRun) -> list[str]:
    out = []
    for data in run.limits if isinstance(run.limits, list) else []:
        try:
            out.append(Limit.from_dict(data).describe())
        except (KeyError, TypeError, ValueError):
            out.append(str(data))
    return out


def best_diff(run: TuningRun) -> RevisionDiff | None:
    pair = selectors.tuning_best_pair(run=run)
    return changes_between(*pair) if pair else None


def run_context(run: TuningRun) -> dict[str, Any]:
    """Everything the run's page and its polled fragment show."""
    trials = selectors.tuning_trials(run=run)
    points = selectors.tuning_points(run=run, trials=trials)
    objective = Objective(**run.objective)
    verdict = run.verdict if isinstance(run.verdict, dict) else {}
    return {
        "run": run,
        "objective": objective.describe(),
        "objective_label": selectors.metric_label(objective.metric),
        "figure_labels": [selectors.metric_label(k) for k in FIGURES],
        "limits": limits_text(run),
        "rows": trial_rows(run, trials, points),
        "progress": progress(run, trials),
        "charts": pareto_charts(run, points),
        "verdict": verdict,
        "beats_base": bool(verdict.get("beats_base")),
        "best_knobs": _words(run, run.best) if run.best else "",
        # A best of another engine is proposed as a switch of this host: a rollout only sets knobs.
        "best_other_engine": bool(run.best and run.best.engine and run.best.engine != run.base.engine),
        "engines": space_engines(run),
        "diff": best_diff(run) if not run.is_open else None,
        "review": review_required(run.host),
        # The groups the tuned host is in: where its best could be rolled out.
        "groups": list(run.host.tags.order_by("name").values_list("name", flat=True)),
    }
