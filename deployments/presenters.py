"""What the revision pages show, computed from rows: launch command, planner report,
benchmark headline figures, history annotations, and `RevisionView`s for the diff.

Reads only; every figure that cannot be computed becomes an error message, never an
exception, so a bad stored value cannot break a page. Secrets are never resolved here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from deployments.choices import OperationKind, OperationState
from deployments.models import BenchmarkRun, DeploymentRevision, Operation
from deployments.planning import PlanValues, plan_for_values, revision_plan
from deployments.runtime_bridge import engine_bind_host as engine_bind_host  # re-exported for the pages
from deployments.runtime_bridge import engine_config_for_revision, revision_launch_spec
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.engines.scripts import render_start_script, render_systemd_unit
from serving.planner import FitReport, PlanInputError

if TYPE_CHECKING:
    from hardware.models import Host

# --- launch ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    start_script: str = ""
    systemd_unit: str = ""
    error: str = ""
    served_context: int | None = None
    served_name: str = ""

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


def launch_for_revision(revision: DeploymentRevision) -> Launch:
    """The exact argv and env the host runs for the revision (serving.launch.launch with the
    host's facts: its bind address, the executable it installed, its copy of downloaded
    weights), secrets masked (never resolved)."""
    try:
        spec = revision_launch_spec(revision)
    except EngineConfigError as exc:
        return Launch(error=f"{exc.field + ': ' if exc.field else ''}{exc}")
    return Launch(
        argv=spec.masked_argv(),
        env=spec.masked_env(),
        start_script=render_start_script(spec),
        systemd_unit=render_systemd_unit(spec),
        served_context=spec.served_context,
        served_name=spec.served_name,
    )


# --- what reaches beyond serving ---------------------------------------------------------------


@dataclass(frozen=True)
class ConcernRow:
    """One thing a revision does beyond serving, as the revision, diff and switch pages show it."""

    field: str
    kind: str  # "path" | "code" | "privileged"
    label: str  # "reads files", "runs code", ...
    message: str
    admin: bool  # only an admin may create a revision with it
    outside: bool = False  # a path outside the host's model folders as they are now


def concerns_for_revision(revision: DeploymentRevision) -> list[ConcernRow]:
    """Paths the engine opens, code it runs, admin-only variables; [] when unreadable."""
    try:
        concerns = get_adapter(revision.engine).concerns(engine_config_for_revision(revision, resolve_secrets=False))
    except (EngineConfigError, KeyError, TypeError, ValueError):
        return []
    roots = [r.rstrip("/") for r in (revision.host.model_dirs or []) if isinstance(r, str) and r.startswith("/")]
    rows = []
    for c in concerns:
        outside = c.kind == "path" and c.path.startswith("/") and not any(c.path.startswith(r + "/") for r in roots)
        rows.append(ConcernRow(c.field, c.kind, c.label, c.message, c.kind in ("code", "privileged"), outside))
    return rows


# --- planner -----------------------------------------------------------------------------------


def report_for_revision(revision: DeploymentRevision) -> tuple[dict[str, Any] | None, str]:
    """(FitReport.to_dict(), "") or (None, why the planner could not read it)."""
    return _report(lambda: revision_plan(revision).checked())


def report_for_values(*, host: Host, **values: Unpack[PlanValues]) -> tuple[dict[str, Any] | None, str]:
    """report_for_revision for values not recorded yet (a form's preview)."""
    return _report(lambda: plan_for_values(host=host, **values))


def _report(planned: Callable[[], FitReport]) -> tuple[dict[str, Any] | None, str]:
    try:
        return planned().to_dict(), ""
    except PlanInputError as exc:
        return None, f"{exc.field + ': ' if exc.field else ''}{exc}"


# --- benchmarks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Headline:
    """The few figures a person compares revisions by."""

    ttft_ms: float | None = None  # p50 at the lowest concurrency
    decode_tps: float | None = None  # p50 per-request decode tok/s at the lowest concurrency
    aggregate_tps: float | None = None  # best output tok/s over the levels
    aggregate_at: int | None = None  # the concurrency that reached it
    tokens_per_wh: float | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in dataclasses.astuple(self))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def headline(results: dict[str, Any] | None) -> Headline:
    """Headline figures from a BenchmarkRun.results (RunResult.to_dict()); missing = None."""
    results = results if isinstance(results, dict) else {}
    levels = [lv for lv in results.get("levels") or [] if isinstance(lv, dict)]
    if not levels:
        return Headline(tokens_per_wh=_num(results.get("tokens_per_wh")))
    first = min(levels, key=lambda lv: lv.get("concurrency") or 0)
    best = max(levels, key=lambda lv: _num(lv.get("output_tokens_per_s")) or -1.0)
    return Headline(
        ttft_ms=_num((first.get("ttft_ms") or {}).get("p50")),
        decode_tps=_num((first.get("decode_tokens_per_s") or {}).get("p50")),
        aggregate_tps=_num(best.get("output_tokens_per_s")),
        aggregate_at=best.get("concurrency") if _num(best.get("output_tokens_per_s")) is not None else None,
        tokens_per_wh=_num(results.get("tokens_per_wh")),
    )


def url_or_none(name: str, *args: Any) -> str | None:
    """A URL another area may not have built yet (e.g. deployments:benchmark_detail)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


@dataclass(frozen=True)
class BenchmarkRow:
    run: BenchmarkRun
    headline: Headline
    url: str | None


def benchmark_rows(runs: Iterable[BenchmarkRun]) -> list[BenchmarkRow]:
    return [
        BenchmarkRow(run=r, headline=headline(r.results), url=url_or_none("deployments:benchmark_detail", r.pk))
        for r in runs
    ]


def latest_headline(runs: Sequence[BenchmarkRun]) -> Headline | None:
    """The newest finished run with figures."""
    for run in sorted(runs, key=lambda r: r.created_at, reverse=True):
        h = headline(run.results)
        if not h.empty:
            return h
    return None


# --- history -----------------------------------------------------------------------------------


@dataclass
class HistoryEntry:
    revision: DeploymentRevision
    applied_at: Any = None
    applied_by: str = ""
    switches: int = 0
    rolled_back: bool = False
    failed_switch: bool = False
    rollback_note: str = ""
    headline: Headline | None = None
    benchmark_count: int = 0


def history_entries(revisions: Sequence[DeploymentRevision]) -> list[HistoryEntry]:
    """Annotate revisions with switch outcomes and benchmark figures in two queries."""
    ids = [r.pk for r in revisions]
    entries = {r.pk: HistoryEntry(revision=r) for r in revisions}
    if not ids:
        return []
    switches = (
        Operation.objects.filter(
            revision_id__in=ids,
            kind=OperationKind.SWITCH,
            state__in=(OperationState.SUCCEEDED, OperationState.FAILED),
        )
        .select_related("requested_by")
        .order_by("created_at")
    )
    for op in switches:
        entry = entries[op.revision_id]
        entry.switches += 1
        if op.state == OperationState.SUCCEEDED:
            entry.applied_at = op.finished_at or op.created_at
            entry.applied_by = op.requested_by.username if op.requested_by else "system"
            entry.rolled_back = False
            entry.failed_switch = False
        else:
            entry.failed_switch = True
            entry.rolled_back = bool((op.result or {}).get("rolled_back"))
            entry.rollback_note = op.error[:200]
    runs: dict[int, list[BenchmarkRun]] = {}
    for run in BenchmarkRun.objects.filter(revision_id__in=ids).only(
        "id", "revision_id", "results", "created_at", "status"
    ):
        runs.setdefault(run.revision_id, []).append(run)
    for pk, entry in entries.items():
        entry.benchmark_count = len(runs.get(pk, []))
        entry.headline = latest_headline(runs.get(pk, []))
    return [entries[r.pk] for r in revisions]


def switch_history(revision: DeploymentRevision) -> list[Operation]:
    return list(
        revision.operations.filter(kind__in=(OperationKind.SWITCH, OperationKind.ROLLBACK))
        .select_related("requested_by")
        .order_by("-created_at")[:20]
    )


def validation_messages(exc: ValidationError) -> list[str]:
    if hasattr(exc, "error_dict"):
        return [f"{k}: {m}" if k != "__all__" else m for k, ms in exc.message_dict.items() for m in ms]
    return list(exc.messages)


def flash_refusal(request: HttpRequest, exc: ValidationError, *, what: str = "") -> None:
    """Each message of a refusal as an error on the next page ("Could not WHAT: ..." with `what`)."""
    for message in validation_messages(exc):
        messages.error(request, f"Could not {what}: {message}" if what else message)


# --- operation logs ----------------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class LogLine:
    text: str
    count: int = 1  # consecutive lines of the same pattern folded into this one (the last shown)


def fold_log(text: str | None) -> list[LogLine]:
    """Consecutive lines that differ only in their numbers (`waiting for …/health: connection
    refused (1.2 s)`, then 2.3 s, …) become one line, the latest, with a count. Display only:
    the stored log keeps every line."""
    folded: list[LogLine] = []
    last_pattern: str | None = None
    for line in (text or "").splitlines():
        pattern = _NUMBER.sub("#", line)
        if folded and pattern == last_pattern and line.strip():
            folded[-1] = LogLine(text=line, count=folded[-1].count + 1)
        else:
            folded.append(LogLine(text=line))
        last_pattern = pattern
    return folded


@dataclass(frozen=True)
class OperationOutcome:
    """The headline of an ended operation, in words: a failed switch that rolled back says so."""

    label: str
    css: str
    note: str = ""


RESULT_SHOWN = 64 * 1024  # bytes of an operation's result a page or the API shows in full
RESULT_EXCERPT = 4096


def operation_result(op: Operation) -> dict[str, Any]:
    """The operation's result as shown: in full up to RESULT_SHOWN bytes encoded; past that (a
    host's agent stored 30 MB once, before reports were bounded) its size and the start of it."""
    result = op.result if isinstance(op.result, dict) else {}
    encoded = json.dumps(result, ensure_ascii=False, default=str)
    size = len(encoded.encode())
    if size <= RESULT_SHOWN:
        return result
    return {
        "truncated": True,
        "bytes": size,
        "excerpt": encoded[:RESULT_EXCERPT],
        "note": f"This result is {size:,} bytes; only its first {RESULT_EXCERPT:,} characters are shown.",
    }


def operation_outcome(op: Operation) -> OperationOutcome:
    result = op.result if isinstance(op.result, dict) else {}
    state = op.get_state_display()
    if op.state == OperationState.FAILED and result.get("rolled_back"):
        previous = result.get("previous")
        numbered = isinstance(previous, int) and not isinstance(previous, bool)
        back = f"r{previous}" if numbered else "the previous revision"
        return OperationOutcome(
            label="Failed, rolled back",
            css="failed rolled-back",
            note=f"The switch failed and {back} was started again: it is serving, as before.",
        )
    if op.state == OperationState.FAILED and op.kind == "switch" and result.get("refused"):
        params = op.params if isinstance(op.params, dict) else {}
        previous = params.get("previous")
        numbered = isinstance(previous, int) and not isinstance(previous, bool)
        serving = f"r{previous} is still serving" if numbered else "nothing was serving, and nothing changed"
        return OperationOutcome(
            label=f"Refused, r{previous} still serving" if numbered else "Refused",
            css="failed refused",
            note=f"The host refused the switch before it stopped anything: {serving}.",
        )
    if op.state == OperationState.FAILED and result.get("rollback_failed"):
        return OperationOutcome(
            label="Failed, rollback failed",
            css="failed",
            note="The switch failed and the previous revision did not come back: the host serves nothing.",
        )
    return OperationOutcome(label=str(state), css=str(op.state))
