"""The diff's memory section: planned and measured (peak) per device for two revisions, pure."""

from __future__ import annotations

from serving.diffing import RevisionView, diff_revisions
from serving.diffing.memory import memory_section

GiB = 1 << 30


def test_both_revisions_planned_and_measured_side_by_side() -> None:
    old = {"gpu0": {"planned": 4 * GiB, "peak": 3 * GiB}}
    new = {"gpu0": {"planned": 8 * GiB, "peak": None}, "gpu1": {"planned": 8 * GiB, "peak": 9 * GiB}}
    section = memory_section(old, new)
    assert section is not None
    rows = {row.key: (row.old, row.new, row.kind) for row in section.rows}
    assert rows["GPU 0 planned"] == ("4 GiB", "8 GiB", "changed")
    assert rows["GPU 0 measured, peak"] == ("3 GiB (-25% of planned)", "unknown", "changed")
    assert rows["GPU 1 measured, peak"] == ("unknown", "9 GiB (+12% of planned)", "changed")


def test_no_section_when_neither_revision_has_a_figure_and_the_diff_carries_it_otherwise() -> None:
    assert memory_section({}, None) is None
    a = RevisionView(number=1, memory={"ram": {"planned": 300 << 20, "peak": 340 << 20}})
    b = RevisionView(number=2, memory={"ram": {"planned": 300 << 20, "peak": 340 << 20}})
    (section,) = [s for s in diff_revisions(a, b).sections if s.key == "memory"]
    assert [(r.key, r.kind) for r in section.rows] == [("RAM planned", "same"), ("RAM measured, peak", "same")]
    assert diff_revisions(RevisionView(number=1), RevisionView(number=2)).sections  # still diffs without memory
    assert not [s for s in diff_revisions(RevisionView(number=1), RevisionView(number=2)).sections if s.key == "memory"]
