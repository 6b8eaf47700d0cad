"""Memory deltas: each device's planned bytes and what the engine held there at its peak (as
its host measured it), for two revisions side by side. `RevisionView.memory` holds
{device: {"planned": bytes | None, "peak": bytes | None}}, device `gpu0`.. or `ram`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.diffing import fmt
from serving.diffing.rows import CHANGED, SAME, DiffRow, DiffSection


def _label(device: str) -> str:
    return f"GPU {device[3:]}" if device.startswith("gpu") else device.upper()


def _error(figures: Mapping[str, Any]) -> str:
    """The measured peak against the plan: "+4% of planned", or "" without both."""
    planned, peak = fmt.number(figures.get("planned")), fmt.number(figures.get("peak"))
    if not planned or peak is None:
        return ""
    return f"{100.0 * (peak - planned) / planned:+.0f}% of planned"


def memory_section(
    old: Mapping[str, Mapping[str, Any]] | None, new: Mapping[str, Mapping[str, Any]] | None
) -> DiffSection | None:
    """Planned and measured (peak) per device; None when neither revision has either."""
    a, b = old or {}, new or {}
    rows = []
    for device in sorted({*a, *b}):
        left, right = a.get(device) or {}, b.get(device) or {}
        for key, what in (("planned", "planned"), ("peak", "measured, peak")):
            x, y = left.get(key), right.get(key)
            if x is None and y is None:
                continue
            old_text, new_text = fmt.size_bytes(x), fmt.size_bytes(y)
            if key == "peak":
                old_text += f" ({e})" if (e := _error(left)) else ""
                new_text += f" ({e})" if (e := _error(right)) else ""
            same = fmt.normalised(x) == fmt.normalised(y)
            note = "" if same else fmt.relative(x, y)
            rows.append(DiffRow(f"{_label(device)} {what}", old_text, new_text, SAME if same else CHANGED, note))
    if not rows:
        return None
    return DiffSection(
        "memory", "Memory: planned and measured", tuple(rows), show_same=True, headers=("Device", "Old", "New")
    )
