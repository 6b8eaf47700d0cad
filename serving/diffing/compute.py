"""diff_revisions: two revision views in, a RevisionDiff out. Pure; computed at read time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from core.secrets_mask import MASK, is_secret_name, mask_text
from serving.diffing import fmt
from serving.diffing.argv import argv_section
from serving.diffing.benchmarks import benchmark_sections
from serving.diffing.memory import memory_section
from serving.diffing.model_table import model_changed, model_section
from serving.diffing.planner_delta import planner_section
from serving.diffing.rows import CHANGED, DiffSection, RevisionDiff, compare_row, mapping_rows
from serving.diffing.view import RevisionView

# Knobs that change what the logs say, not what is served (cf. NetBox's ObjectChange.diff()
# leaving out `created` and `last_updated`).
NOISE_KNOBS: frozenset[str] = frozenset(
    {
        "log_verbosity",
        "log_level",
        "uvicorn_log_level",
        "disable_log_stats",
        "disable_log_requests",
        "enable_log_requests",
    }
)


def _view(value: RevisionView | Mapping[str, Any]) -> RevisionView:
    return value if isinstance(value, RevisionView) else RevisionView.from_dict(value)


def _text(value: object) -> str | None:
    return None if value in (None, "") else str(value)


def general_section(old: RevisionView, new: RevisionView) -> DiffSection:
    version_old = old.engine_version or "latest"
    version_new = new.engine_version or "latest"
    rows = (
        compare_row("engine", _text(old.engine), _text(new.engine)),
        compare_row("engine_version", version_old, version_new, relative=False),
        compare_row("model", _text(old.model_name), _text(new.model_name)),
        compare_row("served_name", _text(old.served_name), _text(new.served_name)),
        compare_row("port", old.port, new.port, relative=False),
    )
    return DiffSection("general", "Engine and endpoint", rows)


def env_section(old: RevisionView, new: RevisionView) -> DiffSection:
    """Env compared on the real values, shown masked where the name looks secret (and any value
    through the one masker: a proxy URL's password)."""
    rows = []
    for row in mapping_rows(old.env, new.env, relative=False):
        if is_secret_name(row.key):
            row = replace(
                row,
                old=MASK if row.old != fmt.ABSENT else row.old,
                new=MASK if row.new != fmt.ABSENT else row.new,
                note="value changed" if row.kind == CHANGED else "",
            )
        else:
            row = replace(row, old=_masked(row.old), new=_masked(row.new))
        rows.append(row)
    return DiffSection("env", "Environment", tuple(rows))


def _masked(value: object) -> Any:
    return mask_text(value) if isinstance(value, str) else value


def secrets_section(old: RevisionView, new: RevisionView) -> DiffSection:
    """Which secrets a revision names; a value never reaches a revision, so none can show."""
    rows = (
        compare_row("api_key_secret", _text(old.api_key_secret), _text(new.api_key_secret)),
        compare_row("hf_token_secret", _text(old.hf_token_secret), _text(new.hf_token_secret)),
    )
    return DiffSection("secrets", "Secrets referenced (names only)", rows, headers=("Secret", "Old", "New"))


def diff_revisions(
    old: RevisionView | Mapping[str, Any],
    new: RevisionView | Mapping[str, Any],
    *,
    noise_knobs: frozenset[str] = NOISE_KNOBS,
) -> RevisionDiff:
    """Every difference between two revisions, section by section (see RevisionDiff)."""
    a, b = _view(old), _view(new)
    sections: list[DiffSection] = [
        general_section(a, b),
        DiffSection("knobs", "Knobs", mapping_rows(a.knobs, b.knobs, drop=noise_knobs)),
        env_section(a, b),
        secrets_section(a, b),
    ]
    changed_model = model_changed(a, b)
    if changed_model:
        sections.append(model_section(a, b))
    planner = planner_section(a.planner, b.planner)
    if planner is not None:
        sections.append(planner)
    memory = memory_section(a.memory, b.memory)
    if memory is not None:
        sections.append(memory)
    sections.extend(benchmark_sections(a.benchmarks, b.benchmarks))
    argv = argv_section(a.argv, b.argv, noise=noise_knobs)
    if argv is not None:
        sections.append(argv)
    return RevisionDiff(a.label, b.label, tuple(sections), model_changed=changed_model)
