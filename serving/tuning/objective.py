"""What a tuning run's trials are judged by.

Figures are a run's, as the benchmark gate reads them (serving.benchmarking.gate.run_figures:
{level label: {metric: value}, "run": {"j_per_token": value}}), with the gate's metrics:
`decode` (per-stream decode tok/s), `throughput` (output tok/s of a level, all streams together),
`ttft_p95` (ms) and `j_per_token` (J per output token of the run; a CPU host measures none).

- `Objective`: one metric at one level, maximised or minimised as the metric says.
- `Limit`: a hard limit on one metric at one level: an absolute bound, or the base revision's own
  figure, or a multiple of it ("j_per_token<=base", "ttft_p95<=0.5*base"). A trial that breaks
  one is out; its first round breaking one is its early stop (it is not measured again). A limit on
  a figure the host does not measure (energy on a CPU host) is not judged, and says so.
- `verdict`: the best trial against the base, each measured in rounds, by the rule the benchmark
  comparison uses for two runs (serving.benchmarking.stats.within_noise: a rank-sum test on the
  rounds' figures with three rounds a side or more, else the rounds' own spread).
- `pareto_front`: the trials no other trial beats on every axis at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from serving.benchmarking import stats
from serving.benchmarking.gate import METRICS
from serving.tuning.space import TuningInputError

Figures = Mapping[str, Mapping[str, float | None]]
RUN = "run"  # the level of a figure of the whole run (energy)


def _level_of(metric: str, level: str) -> str:
    return RUN if not METRICS[metric].per_level else level


def _metric(key: str, field: str) -> str:
    if key not in METRICS:
        raise TuningInputError(f"unknown metric {key!r}; use one of {', '.join(METRICS)}", field=field)
    return key


@dataclass(frozen=True)
class Objective:
    """Maximise (or minimise, as the metric says) `metric` at the load level `level`."""

    metric: str
    level: str

    @property
    def higher_is_better(self) -> bool:
        return METRICS[self.metric].higher_is_better

    def describe(self) -> str:
        m = METRICS[self.metric]
        at = f" at {self.level}" if m.per_level else ""
        return f"{'maximise' if m.higher_is_better else 'minimise'} {m.label}{at}"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_input(cls, metric: str, level: str) -> Objective:
        metric = _metric(str(metric).strip(), "objective")
        level = str(level or "").strip()
        if METRICS[metric].per_level and not level:
            raise TuningInputError(
                f"say at which load level to judge {metric}, e.g. 'concurrency 8'", field="objective"
            )
        return cls(metric=metric, level=_level_of(metric, level))


@dataclass(frozen=True)
class Limit:
    """`metric` at `level` must be at most (a lower-is-better metric) or at least `bound`; with
    `of_base`, the bound is the base revision's own figure times `bound` (1 when None)."""

    metric: str
    level: str
    bound: float | None = None
    of_base: bool = False

    def limit_of(self, base: Figures | None) -> float | None:
        """The bound in the metric's unit (None: the base measured nothing here)."""
        if not self.of_base:
            return self.bound
        value = figure(base or {}, self.metric, self.level)
        return None if value is None else value * (1.0 if self.bound is None else self.bound)

    def describe(self) -> str:
        m = METRICS[self.metric]
        op = ">=" if m.higher_is_better else "<="
        at = f" at {self.level}" if m.per_level else ""
        if self.of_base:
            return f"{m.label}{at} {op} " + (
                "the base's" if self.bound in (None, 1.0) else f"{self.bound:g} x the base's"
            )
        return f"{m.label}{at} {op} {self.bound:g} {m.unit}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Limit:
        return cls(
            metric=str(data["metric"]),
            level=str(data.get("level", "")),
            bound=None if data.get("bound") is None else float(data["bound"]),
            of_base=bool(data.get("of_base")),
        )


_LIMIT = re.compile(r"^\s*([a-z_0-9]+)\s*(<=|>=)\s*(\S+?)\s*$")
_OF_BASE = re.compile(r"^(?:([0-9]*\.?[0-9]+)\s*\*\s*)?base$")


def limits_from_input(text: str | Sequence[Mapping[str, Any]], *, level: str) -> tuple[Limit, ...]:
    """Limits from "ttft_p95<=500,j_per_token<=base" (per-level metrics judged at `level`, the
    objective's) or from stored dicts; TuningInputError naming `limits` otherwise."""
    if not isinstance(text, str):
        try:
            return tuple(_checked(Limit.from_dict(item)) for item in text)
        except (KeyError, TypeError, ValueError) as exc:
            raise TuningInputError(f"unreadable limits: {exc}", field="limits") from None
    limits: list[Limit] = []
    for part in (p for p in text.split(",") if p.strip()):
        match = _LIMIT.match(part)
        if not match:
            raise TuningInputError(
                f"write each limit as METRIC<=NUMBER or METRIC>=base, not {part.strip()!r}", field="limits"
            )
        key, op, value = match.groups()
        metric = _metric(key, field="limits")
        want = ">=" if METRICS[metric].higher_is_better else "<="
        if op != want:
            raise TuningInputError(
                f"{metric} is limited with {want} (more is {'better' if want == '>=' else 'worse'})", field="limits"
            )
        of_base = _OF_BASE.match(value.replace(" ", ""))
        if of_base:
            factor = float(of_base.group(1)) if of_base.group(1) else None
            limits.append(_checked(Limit(metric, _level_of(metric, level), bound=factor, of_base=True)))
            continue
        try:
            bound = float(value)
        except ValueError:
            raise TuningInputError(
                f"the bound of {metric} must be a number, 'base' or a multiple of it (0.5*base), not {value!r}",
                field="limits",
            ) from None
        limits.append(_checked(Limit(metric, _level_of(metric, level), bound=bound)))
    return tuple(limits)


def _checked(limit: Limit) -> Limit:
    _metric(limit.metric, field="limits")
    if limit.of_base and limit.bound is not None and not 0 < limit.bound <= 1000:
        raise TuningInputError(f"a multiple of the base's {limit.metric} is above 0 and at most 1000", field="limits")
    if not limit.of_base and (limit.bound is None or not 0 <= limit.bound < 1e12):
        raise TuningInputError(
            f"the bound of {limit.metric} must be a number from 0, not {limit.bound!r}", field="limits"
        )
    return limit


# --- judging figures ---------------------------------------------------------------------------


def figure(figures: Figures, metric: str, level: str) -> float | None:
    value = (figures.get(level) or {}).get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def objective_value(figures: Figures, objective: Objective) -> float | None:
    return figure(figures, objective.metric, objective.level)


def limit_breaks(figures: Figures, limits: Sequence[Limit], base: Figures | None) -> list[str]:
    """The limits `figures` break, each in words ([]: none). A per-level figure not measured breaks
    its limit (nothing measured is no proof, as in the gate); a run figure not measured on both
    (energy on a CPU host) is not judged."""
    broken: list[str] = []
    for limit in limits:
        m = METRICS[limit.metric]
        value = figure(figures, limit.metric, limit.level)
        bound = limit.limit_of(base)
        if value is None:
            if m.per_level:
                broken.append(f"{limit.describe()}: nothing measured at {limit.level}")
            continue
        if bound is None:
            continue
        if (value < bound) if m.higher_is_better else (value > bound):
            base_note = f" (the bound: {bound:.4g})" if limit.of_base else ""
            broken.append(f"{limit.describe()}: measured {value:.4g} {m.unit}{base_note}")
    return broken


def limits_unjudged(figures: Figures, limits: Sequence[Limit], base: Figures | None) -> list[str]:
    """The limits nothing could judge (the figure measured on neither side), in words."""
    out = []
    for limit in limits:
        if METRICS[limit.metric].per_level:
            continue
        bound = limit.limit_of(base)
        if figure(figures, limit.metric, limit.level) is None or bound is None:
            out.append(f"{limit.describe()}: not measured on this host")
    return out


def mean_figures(rounds: Sequence[Figures]) -> dict[str, dict[str, float | None]]:
    """Each figure averaged over the rounds that measured it."""
    sums: dict[str, dict[str, list[float]]] = {}
    for one in rounds:
        for level, values in one.items():
            for metric in values:
                value = figure(one, metric, level)
                bucket = sums.setdefault(level, {}).setdefault(metric, [])
                if value is not None:
                    bucket.append(value)
    return {
        level: {metric: (sum(v) / len(v) if v else None) for metric, v in metrics.items()}
        for level, metrics in sums.items()
    }


@dataclass(frozen=True)
class Scored:
    """A trial as the ranking sees it: its key, its objective value (mean of its rounds) and
    whether it met every limit."""

    key: Any
    value: float | None
    passed: bool


def ranked(trials: Sequence[Scored], objective: Objective) -> list[Scored]:
    """The trials that met every limit and measured the objective, best first (ties: the earlier)."""
    ok = [t for t in trials if t.passed and t.value is not None]
    sign = -1.0 if objective.higher_is_better else 1.0
    return sorted(ok, key=lambda t: sign * (t.value or 0.0))


# --- the best against the base ---------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    beats_base: bool
    within_noise: bool | None  # None: too few rounds to tell
    base_value: float | None
    best_value: float | None
    change_pct: float | None
    basis: str
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def verdict(objective: Objective, base_rounds: Sequence[float], best_rounds: Sequence[float]) -> Verdict:
    """Whether the best trial beats the base beyond the rounds' own noise (each side's objective
    value per round): stats.within_noise on the rounds as samples, else their spread."""
    base, best = _mean(base_rounds), _mean(best_rounds)
    if base is None or best is None:
        return Verdict(False, None, base, best, None, "", "nothing to compare: a side measured no round")
    change = (best - base) / base * 100.0 if base else None
    spreads = [max(r) - min(r) for r in (base_rounds, best_rounds) if len(r) >= 2]
    spread = max(spreads) if len(spreads) == 2 else None
    noise = stats.within_noise(base, best, samples_a=base_rounds, samples_b=best_rounds, spread=spread)
    if stats.rank_sum_z(base_rounds, best_rounds) is not None:
        basis = f"rank-sum test on {len(base_rounds)} + {len(best_rounds)} rounds"
    else:
        basis = "the rounds' spread" if spread is not None else ""
    better = best > base if objective.higher_is_better else best < base
    pct = f"{change:+.1f} %" if change is not None else "a change"
    if noise is None:
        return Verdict(False, None, base, best, change, basis, f"{pct}: too few rounds to tell it from noise")
    if noise:
        return Verdict(False, True, base, best, change, basis, f"{pct}: within the runs' own noise ({basis})")
    if not better:
        return Verdict(False, False, base, best, change, basis, f"{pct}: the base is better ({basis})")
    return Verdict(True, False, base, best, change, basis, f"{pct} over the base, beyond noise ({basis})")


# --- the Pareto front ---------------------------------------------------------------------------


def pareto_front(points: Sequence[Mapping[str, float | None]], axes: Mapping[str, bool]) -> list[int]:
    """The indices of the points no other point dominates on `axes` ({axis: higher is better}):
    as good on every axis and better on one. A point missing an axis is left out."""
    full = [i for i, p in enumerate(points) if all(isinstance(p.get(a), int | float) for a in axes)]

    def at_least(a: Mapping[str, float | None], b: Mapping[str, float | None], axis: str) -> bool:
        x, y = float(a[axis] or 0.0), float(b[axis] or 0.0)
        return x >= y if axes[axis] else x <= y

    front = []
    for i in full:
        dominated = any(
            all(at_least(points[j], points[i], ax) for ax in axes)
            and any(not at_least(points[i], points[j], ax) for ax in axes)
            for j in full
            if j != i
        )
        if not dominated:
            front.append(i)
    return front
