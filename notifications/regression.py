"""Benchmark regressions: which headline figures of a run got worse than the previous
revision's run on the same profile, and by how much (pure: no Django, no I/O).

`compare` pairs the two runs' figures (per concurrency level, matched by label, and the
run-wide energy figure); `regressions` keeps the pairs that got worse by at least a rule's
threshold for that metric, in percent: decode tok/s 10 means "10 % slower or worse".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    path: tuple[str, ...]  # where the figure sits in a level (or in the run, when not per_level)
    higher_is_better: bool
    unit: str = ""
    per_level: bool = True


METRICS: tuple[Metric, ...] = (
    Metric("decode_tok_s", "decode tok/s (median request)", ("decode_tokens_per_s", "p50"), True),
    Metric("output_tok_s", "output tok/s (all requests)", ("output_tokens_per_s",), True),
    Metric("requests_s", "requests/s", ("requests_per_s",), True),
    Metric("ttft_p50", "TTFT p50", ("ttft_ms", "p50"), False, " ms"),
    Metric("ttft_p99", "TTFT p99", ("ttft_ms", "p99"), False, " ms"),
    Metric("tpot_p50", "TPOT p50", ("tpot_ms", "p50"), False, " ms"),
    Metric("e2e_p90", "E2E p90", ("e2e_ms", "p90"), False, " ms"),
    Metric("joules_per_token", "J per output token", ("joules_per_output_token",), False, " J", per_level=False),
)
BY_KEY = {m.key: m for m in METRICS}
# What a new rule watches unless the admin says otherwise: 10 % slower decode, 20 % slower first token.
DEFAULT_THRESHOLDS: dict[str, float] = {"decode_tok_s": 10.0, "ttft_p50": 20.0}


@dataclass(frozen=True)
class Comparison:
    """One figure of the previous run (`before`) and the new one (`after`), both known."""

    metric: str
    level: str
    before: float
    after: float

    @property
    def worse_pct(self) -> float | None:
        """How much worse the new figure is, in percent (negative: better); None from a zero."""
        if self.before == 0:
            return None
        change = (self.after - self.before) / abs(self.before) * 100.0
        return -change if BY_KEY[self.metric].higher_is_better else change

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "level": self.level, "before": self.before, "after": self.after}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(str(data["metric"]), str(data["level"]), float(data["before"]), float(data["after"]))


@dataclass(frozen=True)
class Regression:
    comparison: Comparison
    threshold_pct: float

    @property
    def line(self) -> str:
        c, m = self.comparison, BY_KEY[self.comparison.metric]
        signed = (c.after - c.before) / abs(c.before) * 100.0
        limit = -self.threshold_pct if m.higher_is_better else self.threshold_pct
        where = "" if c.level == "run" else f" at {c.level}"
        return (
            f"{m.label}{where}: {_num(c.before)}{m.unit} -> {_num(c.after)}{m.unit} "
            f"({signed:+.1f} %, limit {limit:+g} %)"
        )


def _num(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1 else f"{value:,.1f}"


def _figure(container: Any, path: tuple[str, ...]) -> float | None:
    value = container
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Comparison]:
    """Every headline figure both runs have, level by level (matched by label)."""
    levels_before = {
        str(lvl.get("label")): lvl for lvl in before.get("levels") or [] if isinstance(lvl, dict) and lvl.get("label")
    }
    out: list[Comparison] = []
    for level in after.get("levels") or []:
        if not isinstance(level, dict) or str(level.get("label")) not in levels_before:
            continue
        label = str(level.get("label"))
        for metric in METRICS:
            if not metric.per_level:
                continue
            a, b = _figure(levels_before[label], metric.path), _figure(level, metric.path)
            if a is not None and b is not None:
                out.append(Comparison(metric.key, label, a, b))
    for metric in METRICS:
        if metric.per_level:
            continue
        a, b = _figure(before, metric.path), _figure(after, metric.path)
        if a is not None and b is not None:
            out.append(Comparison(metric.key, "run", a, b))
    return out


def regressions(comparisons: list[Comparison], thresholds: Mapping[str, float]) -> list[Regression]:
    """The comparisons worse by at least their metric's threshold (metrics without one: ignored)."""
    found = []
    for c in comparisons:
        limit = thresholds.get(c.metric)
        worse = c.worse_pct
        if limit is not None and worse is not None and worse >= float(limit):
            found.append(Regression(c, float(limit)))
    return found
