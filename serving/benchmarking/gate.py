"""A benchmark gate's verdict from two runs of one profile (pure: no Django, no I/O).

A gate is a profile and limits per metric, in percent: how far the candidate revision's run may
fall behind the baseline's (the revision it replaces) before the switch is rolled back.

- `decode`: per-request decode tokens/s (1000 / TPOT), mean of a level: at most X % below;
- `throughput`: output tokens/s of a level, all streams together: at most X % below;
- `ttft_p95`: time to first token, 95th percentile of a level: at most X % above;
- `j_per_token`: joules per output token of the run: at most X % above, judged only when both
  runs measured energy (a CPU host has no counter).

Levels are matched by label; a level the candidate finished without one successful request
fails every metric it carries (nothing measured is no proof).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from serving.benchmarking.stats import percentile


@dataclass(frozen=True)
class GateMetric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    per_level: bool = True


METRICS: dict[str, GateMetric] = {
    m.key: m
    for m in (
        GateMetric("decode", "decode tokens/s per stream", "tok/s", higher_is_better=True),
        GateMetric("throughput", "output tokens/s", "tok/s", higher_is_better=True),
        GateMetric("ttft_p95", "TTFT p95", "ms", higher_is_better=False),
        GateMetric("j_per_token", "J per output token", "J", higher_is_better=False, per_level=False),
    )
}
MAX_LIMIT_PCT = 1000.0


class GateInputError(ValueError):
    """A limit the gate cannot apply (unknown metric, negative, not a number)."""


def validate_limits(limits: Mapping[str, Any]) -> dict[str, float]:
    """{metric: percent} checked: known metrics, numbers from 0 to MAX_LIMIT_PCT, at least one."""
    if not isinstance(limits, Mapping) or not limits:
        raise GateInputError(f"a gate needs at least one limit, e.g. decode=5,ttft_p95=10 (metrics: {known()})")
    out: dict[str, float] = {}
    for key, value in limits.items():
        if key not in METRICS:
            raise GateInputError(f"unknown gate metric {key!r}; use one of {known()}")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise GateInputError(f"the limit for {key} must be a number of percent, got {value!r}")
        try:
            pct = float(value)
        except ValueError:
            raise GateInputError(f"the limit for {key} must be a number of percent, got {value!r}") from None
        if not math.isfinite(pct) or pct < 0:
            raise GateInputError(f"the limit for {key} must be 0 % or more, got {value}")
        if pct > MAX_LIMIT_PCT:
            raise GateInputError(f"the limit for {key} must be at most {MAX_LIMIT_PCT:g} %, got {value}")
        out[key] = pct
    return out


def parse_limits(text: str) -> dict[str, float]:
    """ "decode=5,ttft_p95=10" -> {"decode": 5.0, "ttft_p95": 10.0}, validated."""
    limits: dict[str, str] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise GateInputError(f"write each limit as METRIC=PERCENT, e.g. decode=5 (got {part!r})")
        if key.strip() in limits:
            raise GateInputError(f"{key.strip()} is given twice")
        limits[key.strip()] = value.strip()
    return validate_limits(limits)


def known() -> str:
    return ", ".join(METRICS)


# --- the figures a gate reads from one stored run ------------------------------------------------


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def run_figures(results: Mapping[str, Any], raw: Sequence[Any]) -> dict[str, dict[str, float | None]]:
    """{level label or "run": {metric: value}} from a run's stored results and raw requests."""
    ttfts: dict[Any, list[float]] = {}
    for record in raw:
        if isinstance(record, Mapping) and record.get("ok"):
            value = _num(record.get("ttft_ms"))
            if value is not None:
                ttfts.setdefault(record.get("level"), []).append(value)
    figures: dict[str, dict[str, float | None]] = {}
    for level in results.get("levels", []) if isinstance(results.get("levels"), list) else []:
        if not isinstance(level, Mapping):
            continue
        label = str(level.get("label"))
        decode = level.get("decode_tokens_per_s")
        completed = _num(level.get("completed")) or 0
        figures[label] = {
            "decode": _num(decode.get("mean")) if isinstance(decode, Mapping) and completed else None,
            "throughput": _num(level.get("output_tokens_per_s")) if completed else None,
            "ttft_p95": percentile(ttfts.get(level.get("label"), []), 95),
        }
    figures["run"] = {"j_per_token": _num(results.get("joules_per_output_token"))}
    return figures


# --- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateRow:
    metric: str
    label: str
    level: str
    baseline: float | None
    candidate: float | None
    change_pct: float | None  # + is more, - is less
    limit_pct: float
    passed: bool | None  # None: not judged (not measured on both sides, where that is allowed)
    note: str = ""


@dataclass(frozen=True)
class GateVerdict:
    passed: bool
    rows: tuple[GateRow, ...]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary, "rows": [asdict(r) for r in self.rows]}


def _judge(metric: GateMetric, level: str, base: float | None, cand: float | None, limit: float) -> GateRow:
    def row(change: float | None, passed: bool | None, note: str) -> GateRow:
        return GateRow(metric.key, metric.label, level, base, cand, change, limit, passed, note)

    if base is None or cand is None:
        if metric.per_level and base is not None:
            return row(None, False, "the new revision measured nothing here")
        return row(None, None, "not measured on both")
    change = (cand - base) / base * 100.0 if base else 0.0
    worse = -change if metric.higher_is_better else change
    note = f"{abs(change):.1f} % {'above' if change > 0 else 'below'}"
    if worse > limit:
        return row(change, False, f"{note}, beyond the {limit:g} % allowed")
    return row(change, True, note)


def gate_decide(
    baseline: Mapping[str, Mapping[str, float | None]],
    candidate: Mapping[str, Mapping[str, float | None]],
    limits: Mapping[str, float],
) -> GateVerdict:
    """Judge `candidate` against `baseline` (each from `run_figures`) under `limits` (validated)."""
    rows: list[GateRow] = []
    for key, limit in limits.items():
        metric = METRICS[key]
        if not metric.per_level:
            rows.append(
                _judge(metric, "run", baseline.get("run", {}).get(key), candidate.get("run", {}).get(key), limit)
            )
            continue
        for level, figures in baseline.items():
            if level == "run":
                continue
            rows.append(_judge(metric, level, figures.get(key), candidate.get(level, {}).get(key), limit))
    failed = [r for r in rows if r.passed is False]
    judged = [r for r in rows if r.passed is not None]
    if not judged:
        return GateVerdict(False, tuple(rows), "nothing the limits name was measured on both revisions")
    if failed:
        worst = failed[0]
        where = f" at {worst.level}" if worst.level != "run" else ""
        summary = f"{worst.label}{where}: {worst.note}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else "")
        return GateVerdict(False, tuple(rows), summary)
    return GateVerdict(
        True, tuple(rows), f"all {len(judged)} figure{'s' if len(judged) != 1 else ''} within the limits"
    )
