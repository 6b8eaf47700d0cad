"""render_text: the CLI's `revision diff`, aligned columns, "~" changed, "+" added, "-" removed."""

from __future__ import annotations

from serving.diffing.rows import DiffRow, DiffSection, RevisionDiff

_MAX_COL = 64  # wider cells are printed whole, they just stop setting the column width


def _width(cells: list[str], floor: int) -> int:
    return max([floor, *(len(c) for c in cells if len(c) <= _MAX_COL)])


def render_section(section: DiffSection, *, show_same: bool = False) -> list[str]:
    rows: tuple[DiffRow, ...] = section.rows if show_same else section.visible_rows
    if not rows:
        return []
    key_w = _width([r.key for r in rows], len(section.headers[0]))
    old_w = _width([r.old for r in rows], len(section.headers[1]))
    new_w = _width([r.new for r in rows], len(section.headers[2]))
    head, old_head, new_head = section.headers
    lines = [f"== {section.title} ==", f"  {head:<{key_w}}  {old_head:<{old_w}}  {new_head:<{new_w}}".rstrip()]
    for row in rows:
        note = f"  {row.note}" if row.note else ""
        line = f"{row.marker} {row.key:<{key_w}}  {row.old:<{old_w}}  {row.new:<{new_w}}{note}"
        lines.append(line.rstrip())
    return lines


def render_text(diff: RevisionDiff, *, show_same: bool = False) -> str:
    """The whole diff as text. Unchanged rows are left out unless the section is a table
    (the model-generation table, benchmarks) or `show_same` is set."""
    lines = [f"diff {diff.old_label} -> {diff.new_label}"]
    if not diff.has_changes:
        lines.append("No changes.")
        return "\n".join(lines) + "\n"
    for section in diff.sections:
        if not section.has_changes:
            continue
        block = render_section(section, show_same=show_same)
        if block:
            lines.append("")
            lines.extend(block)
    return "\n".join(lines) + "\n"
