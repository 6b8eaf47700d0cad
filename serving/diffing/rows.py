"""Diff rows and sections: what templates iterate over and the CLI prints."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from serving.diffing import fmt

ChangeKind = Literal["added", "removed", "changed", "same"]
ADDED: ChangeKind = "added"
REMOVED: ChangeKind = "removed"
CHANGED: ChangeKind = "changed"
SAME: ChangeKind = "same"

MARKERS = {ADDED: "+", REMOVED: "-", CHANGED: "~", SAME: " "}


@dataclass(frozen=True)
class DiffRow:
    key: str
    old: str
    new: str
    kind: ChangeKind
    note: str = ""  # relative change ("x3.2", "+45%") or a short remark
    better: bool | None = None  # for measured numbers: did it improve? None = not a measure
    # How the change reads, where "added"/"removed" would mislead: a new warning finding is not
    # good news ("warning", "error", "info"), a solved one is ("solved").
    tone: str = ""

    @property
    def changed(self) -> bool:
        return self.kind != SAME

    @property
    def marker(self) -> str:
        return MARKERS[self.kind]

    @property
    def css_class(self) -> str:
        return f"diff-{self.kind} diff-{self.tone}" if self.tone else f"diff-{self.kind}"

    def to_dict(self) -> dict[str, Any]:
        out = {"key": self.key, "old": self.old, "new": self.new, "kind": self.kind, "note": self.note,
               "better": self.better}  # fmt: skip
        if self.tone:
            out["tone"] = self.tone
        return out


@dataclass(frozen=True)
class DiffSection:
    key: str  # "general", "knobs", "env", "secrets", "model", "planner", "benchmark:<profile>", "argv"
    title: str
    rows: tuple[DiffRow, ...] = ()
    show_same: bool = False  # the model-generation table shows unchanged aspects too
    headers: tuple[str, str, str] = ("Key", "Old", "New")

    def __iter__(self) -> Iterator[DiffRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def changes(self) -> tuple[DiffRow, ...]:
        return tuple(r for r in self.rows if r.changed)

    @property
    def has_changes(self) -> bool:
        return any(r.changed for r in self.rows)

    @property
    def visible_rows(self) -> tuple[DiffRow, ...]:
        """The rows a page or the CLI shows by default."""
        return self.rows if self.show_same else self.changes

    def row(self, key: str) -> DiffRow | None:
        return next((r for r in self.rows if r.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "headers": list(self.headers),
                "rows": [r.to_dict() for r in self.rows]}  # fmt: skip


@dataclass(frozen=True)
class RevisionDiff:
    old_label: str
    new_label: str
    sections: tuple[DiffSection, ...] = field(default_factory=tuple)
    model_changed: bool = False

    def __iter__(self) -> Iterator[DiffSection]:
        return iter(self.sections)

    @property
    def has_changes(self) -> bool:
        return any(s.has_changes for s in self.sections)

    def section(self, key: str) -> DiffSection | None:
        return next((s for s in self.sections if s.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old_label, "new": self.new_label, "model_changed": self.model_changed,
                "sections": [s.to_dict() for s in self.sections]}  # fmt: skip


def kind_of(old_present: bool, new_present: bool, equal: bool) -> ChangeKind:
    if old_present and not new_present:
        return REMOVED
    if new_present and not old_present:
        return ADDED
    return SAME if equal else CHANGED


def compare_row(key: str, old: Any, new: Any, *, relative: bool = True) -> DiffRow:
    """A row for one key of two mappings (None = absent on that side)."""
    kind = kind_of(old is not None, new is not None, fmt.normalised(old) == fmt.normalised(new))
    note = fmt.relative(fmt.number(old), fmt.number(new)) if relative and kind == CHANGED else ""
    return DiffRow(key, fmt.value(old), fmt.value(new), kind, note)


def mapping_rows(
    old: Mapping[str, Any], new: Mapping[str, Any], *, drop: frozenset[str] = frozenset(), relative: bool = True
) -> tuple[DiffRow, ...]:
    """Rows for the union of keys, sorted; None values count as unset; `drop` keys are noise."""
    keys = sorted(
        k
        for k in {*old, *new}
        if k not in drop and not str(k).startswith("_") and (old.get(k) is not None or new.get(k) is not None)
    )
    return tuple(compare_row(k, old.get(k), new.get(k), relative=relative) for k in keys)
