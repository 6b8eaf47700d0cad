"""Benchmark deltas: the latest run of each profile both revisions ran, level by level.

A benchmark item is a BenchmarkRun as plain data: `profile_name` plus the run's results,
either inline (RunResult.to_dict(): `levels`, `joules_per_output_token`, ...) or under
`results`. Levels are matched by label ("c=4"), else by concurrency or rate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from serving.benchmarking.profiles import profile_label
from serving.diffing import fmt
from serving.diffing.rows import CHANGED, SAME, DiffRow, DiffSection

# (label, getter on a level, formatter, higher is better)
_LEVEL_METRICS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any], Callable[[Any], str], bool], ...] = (
    ("output tok/s", lambda lv: lv.get("output_tokens_per_s"), fmt.measure, True),
    ("requests/s", lambda lv: lv.get("requests_per_s"), lambda v: fmt.fixed(v, 2), True),
    ("TTFT p50 ms", lambda lv: (lv.get("ttft_ms") or {}).get("p50"), fmt.measure, False),
    ("TTFT p99 ms", lambda lv: (lv.get("ttft_ms") or {}).get("p99"), fmt.measure, False),
    ("TPOT p50 ms", lambda lv: (lv.get("tpot_ms") or {}).get("p50"), lambda v: fmt.measure(v, 2), False),
)


def _run(item: Mapping[str, Any]) -> Mapping[str, Any]:
    results = item.get("results")
    if isinstance(results, Mapping) and results:
        return {**item, **results}
    return item


def _profile(item: Mapping[str, Any]) -> str:
    """The run's profile as profile_label says it: a run with custom numbers is not its named profile."""
    profile = item.get("profile")
    name = item.get("profile_name") or (profile.get("name") if isinstance(profile, Mapping) else None)
    if not name:
        return ""
    return profile_label(profile if isinstance(profile, Mapping) else None, str(name))


def latest_by_profile(runs: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The first (newest) completed run of each profile; an unfinished one only if nothing else."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for item in runs:
        run = _run(item)
        name = _profile(run)
        if not name:
            continue
        done = run.get("status") in (None, "completed")
        if name not in chosen or (done and chosen[name].get("status") not in (None, "completed")):
            chosen[name] = run
    return chosen


def _level_key(level: Mapping[str, Any]) -> str:
    if level.get("label"):
        return str(level["label"])
    if level.get("concurrency") is not None:
        return f"c={level['concurrency']}"
    if level.get("rate") is not None:
        return f"rate={level['rate']}"
    return "level"


def _levels(run: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    levels = run.get("levels")
    if isinstance(levels, Mapping):  # {"c=1": {...}, ...}
        return {str(k): v for k, v in levels.items() if isinstance(v, Mapping)}
    return {_level_key(lv): lv for lv in levels or () if isinstance(lv, Mapping)}


def _row(key: str, a: Any, b: Any, render: Callable[[Any], str], higher: bool) -> DiffRow:
    left, right = render(a), render(b)
    na, nb = fmt.number(a), fmt.number(b)
    if na is None or nb is None or na == nb:
        return DiffRow(key, left, right, SAME if left == right else CHANGED)
    return DiffRow(key, left, right, CHANGED, fmt.relative(na, nb), (nb > na) == higher)


def benchmark_sections(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> tuple[DiffSection, ...]:
    a, b = latest_by_profile(old), latest_by_profile(new)
    sections = []
    for profile in sorted(set(a) & set(b)):
        run_a, run_b = a[profile], b[profile]
        levels_a, levels_b = _levels(run_a), _levels(run_b)
        rows: list[DiffRow] = []
        for level in [k for k in levels_a if k in levels_b]:
            for label, get, render, higher in _LEVEL_METRICS:
                va, vb = get(levels_a[level]), get(levels_b[level])
                if va is None and vb is None:
                    continue
                rows.append(_row(f"{level} {label}", va, vb, render, higher))
        ja, jb = run_a.get("joules_per_output_token"), run_b.get("joules_per_output_token")
        if ja is not None or jb is not None:
            rows.append(_row("energy J/output token", ja, jb, fmt.fixed, False))
        sections.append(
            DiffSection(
                f"benchmark:{profile}",
                f"Benchmark {profile}",
                tuple(rows),
                show_same=True,
                headers=("Metric", "Old", "New"),
            )  # fmt: skip
        )
    return tuple(sections)
