"""Planner deltas: how the fit of two revisions on their GPUs differs (FitReport.to_dict())."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from serving.diffing import fmt
from serving.diffing.rows import ADDED, CHANGED, REMOVED, SAME, DiffRow, DiffSection

# (label, FitReport key, formatter, is a bigger number better?)
_FIGURES: tuple[tuple[str, str, Callable[[Any], str], bool | None], ...] = (
    ("KV bytes per token per GPU", "kv_bytes_per_token_per_gpu", fmt.size_bytes, False),
    ("KV pool tokens", "kv_pool_tokens", fmt.count, True),
    ("KV cache memory", "kv_cache_bytes", fmt.size_bytes, None),
    ("Full-length sequences that fit", "max_concurrent_full_length", fmt.count, True),
    ("Max context for one sequence", "max_context_one_sequence", fmt.count, True),
    ("Context (max_model_len)", "max_model_len", fmt.count, None),
    ("Weights per GPU", "weights_bytes_per_gpu", fmt.size_bytes, False),
    ("GPUs used", "gpus_used", fmt.count, None),
)


def _better(old: Any, new: Any, higher: bool | None) -> bool | None:
    a, b = fmt.number(old), fmt.number(new)
    if higher is None or a is None or b is None or a == b:
        return None
    return (b > a) == higher


def figure_rows(old: Mapping[str, Any], new: Mapping[str, Any], *, on_gpus: bool = True) -> list[DiffRow]:
    """Each figure either side has; on a CPU-only host (`on_gpus` False) the per-GPU figures read
    as the host's own (the planner puts a CPU host's memory where a GPU's would be)."""
    rows = []
    for label, key, render, higher in _FIGURES:
        if not on_gpus:
            if key == "gpus_used":
                continue
            label = label.replace(" per GPU", "")
        a, b = old.get(key), new.get(key)
        if a is None and b is None:
            continue
        left, right = render(a), render(b)
        kind = SAME if fmt.normalised(a) == fmt.normalised(b) else CHANGED
        note = fmt.relative(a, b) if kind == CHANGED else ""
        rows.append(DiffRow(label, left, right, kind, note, _better(a, b, higher) if kind == CHANGED else None))
    return rows


def _finding(item: Mapping[str, Any]) -> str:
    return f"{item.get('severity', '?')}: {item.get('message', '')}".strip()


def finding_rows(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[DiffRow]:
    """Findings compared by code: new problems are "added", solved ones "removed"."""
    a = {str(f.get("code")): f for f in old.get("findings") or () if isinstance(f, Mapping)}
    b = {str(f.get("code")): f for f in new.get("findings") or () if isinstance(f, Mapping)}
    rows = []
    for code in sorted({*a, *b}):
        if code not in b:
            tone = "solved" if _rank(a[code]) > 0 else ""
            rows.append(DiffRow(f"finding {code}", _finding(a[code]), fmt.ABSENT, REMOVED, tone=tone))
        elif code not in a:  # a new problem is not good news: it reads as its severity, not green
            tone = str(b[code].get("severity")) if _rank(b[code]) >= 0 else "warning"
            rows.append(DiffRow(f"finding {code}", fmt.ABSENT, _finding(b[code]), ADDED, tone=tone))
        else:
            same = a[code].get("severity") == b[code].get("severity")
            tone = "" if same else ("solved" if _rank(b[code]) < _rank(a[code]) else "worse")
            rows.append(
                DiffRow(f"finding {code}", _finding(a[code]), _finding(b[code]), SAME if same else CHANGED, tone=tone)
            )
    return rows


_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def _rank(item: Mapping[str, Any]) -> int:
    return _SEVERITY_RANK.get(str(item.get("severity")), -1)


def planner_section(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> DiffSection | None:
    """None when neither side has a fit report; one missing side reads "unknown"."""
    if not old and not new:
        return None
    # A CPU-only host's reports say it has no GPUs; an old report that does not say reads as a GPU's.
    on_gpus = not all(side.get("gpus_present") == 0 for side in (old, new) if side)
    rows = figure_rows(old or {}, new or {}, on_gpus=on_gpus) + finding_rows(old or {}, new or {})
    title = "Planner: fit on the GPUs" if on_gpus else "Planner: fit in the host's memory (CPU only)"
    return DiffSection("planner", title, tuple(rows), headers=("Figure", "Old", "New"))
