"""Revision diffs computed at read time (STYLE point 7), pure: no Django, no I/O.

    diff = diff_revisions(old_view, new_view)
    render_text(diff)                       # the CLI's `revision diff`
    for section in diff: for row in section.visible_rows: row.css_class  # templates

Sections: engine and endpoint, knobs (noise dropped), env (secrets masked), secrets named,
the model-generation table (only when the model changed), planner deltas, benchmark
deltas per shared profile, and the command line flag by flag.
"""

from __future__ import annotations

from core.secrets_mask import MASK, is_secret_name, mask_env
from serving.diffing.argv import parse_argv
from serving.diffing.compute import NOISE_KNOBS, diff_revisions
from serving.diffing.context import ServedContext, revision_context, served_context, vision_state
from serving.diffing.rows import ADDED, CHANGED, REMOVED, SAME, DiffRow, DiffSection, RevisionDiff
from serving.diffing.text import render_text
from serving.diffing.view import RevisionView

__all__ = [
    "ADDED",
    "CHANGED",
    "MASK",
    "NOISE_KNOBS",
    "REMOVED",
    "SAME",
    "DiffRow",
    "DiffSection",
    "RevisionDiff",
    "RevisionView",
    "ServedContext",
    "diff_revisions",
    "is_secret_name",
    "mask_env",
    "parse_argv",
    "render_text",
    "revision_context",
    "served_context",
    "vision_state",
]
