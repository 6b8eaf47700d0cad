"""Reads of change requests: the list, and what a request's page shows (the hosts and revisions
an approval binds, the diff against what runs now, the planner's report, the exports that would
change, why it is stale; a rollout's part on each host; when it runs once approved)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from deployments.models import DeploymentRevision
from deployments.presenters import report_for_revision
from deployments.selectors.revision_views import changes_between
from deployments.services.exports import TARGETS, revision_export
from deployments.services.gates import baseline_run, gate_from_params
from hardware.models import Host
from rollouts.preview import RolloutPreview, rollout_preview
from schedules.services import next_window, when_args
from serving.benchmarking.profiles import profile_label
from serving.diffing import RevisionDiff
from serving.engines.base import EngineConfigError
from serving.exports import NotExportable

from .binding import described, seen_token
from .choices import PENDING_STATES, ChangeKind
from .kinds import kind_of
from .models import ChangeRequest
from .services import host_state, stale_reasons


def change_list(*, host: Host | None = None, pending: bool = False) -> QuerySet[ChangeRequest]:
    qs = ChangeRequest.objects.select_related("host", "author", "decided_by")
    if host is not None:
        qs = qs.filter(host=host)
    if pending:
        qs = qs.filter(state__in=PENDING_STATES)
    return qs


def pending_for_host(host: Host) -> list[ChangeRequest]:
    return list(change_list(host=host, pending=True)[:20])


def timed_pending(*, host: Host | None = None) -> list[tuple[ChangeRequest, str]]:
    """Pending requests that carry a time, with it in words: the schedule list's "awaiting review"."""
    pending = change_list(host=host, pending=True).filter(params__has_key="when")[:100]
    return [(change, when_text(change)) for change in pending]


@dataclass(frozen=True)
class ExportChange:
    target: str
    status: str  # "changes", "same", "new", "not exportable"
    note: str = ""


@dataclass
class ChangePage:
    change: ChangeRequest
    stale: list[str]
    before: DeploymentRevision | None = None
    after: DeploymentRevision | None = None
    problem: str = ""  # why the page cannot show the change (its revision is gone)
    diff: RevisionDiff | None = None
    report: dict[str, Any] | None = None
    report_error: str = ""
    exports: list[ExportChange] = field(default_factory=list)
    gate: GatePlan | None = None  # the benchmark the switch must hold up under, when it carries a gate
    rollout: RolloutPreview | None = None  # a rollout's part on each host, while the request is pending
    when: str = ""  # when it runs once approved, in words ("" : at once)
    # What an approval binds: each host it reaches (changes.binding), with what it gets in words.
    bound: list[dict[str, Any]] = field(default_factory=list)
    seen: str = ""  # what the approve form posts back: the request as this page shows it


@dataclass
class GatePlan:
    """A gated switch's benchmark plan, as the reviewer reads it before approving."""

    profile: str  # serving.benchmarking.profiles.profile_label
    limits: dict[str, float]
    baseline: str  # which run of the revision serving now it is compared with, or that one is measured first


def _gate_plan(change: ChangeRequest, before: DeploymentRevision | None) -> GatePlan | None:
    gate = gate_from_params(change.params if isinstance(change.params, dict) else {})
    if gate is None:
        return None
    run = baseline_run(before, gate.profile) if before is not None else None
    baseline = (
        f"compared with r{before.number}'s run #{run.pk} of it"
        if run is not None and before is not None
        else "r{} has no run of it: the gate measures it first, before anything is switched".format(
            before.number if before is not None else "?"
        )
    )
    return GatePlan(profile=profile_label(gate.profile.to_dict()), limits=gate.limits, baseline=baseline)


def _export_text(revision: DeploymentRevision, target: str) -> tuple[str | None, str]:
    try:
        return revision_export(revision, target).content, ""
    except (NotExportable, EngineConfigError, ValidationError) as exc:
        return None, str(exc)[:300]


def exports_that_change(before: DeploymentRevision | None, after: DeploymentRevision) -> list[ExportChange]:
    """Each export target of what runs now beside the change's, as they read now."""
    out = []
    for target in TARGETS:
        new, why = _export_text(after, target)
        if new is None:
            out.append(ExportChange(target, "not exportable", why))
            continue
        old = _export_text(before, target)[0] if before is not None else None
        status = "new" if old is None else ("same" if old == new else "changes")
        out.append(ExportChange(target, status))
    return out


def when_text(change: ChangeRequest) -> str:
    """When a request runs once approved, in words; "" for at once."""
    try:
        later = when_args(change.when)
    except ValidationError as exc:
        return " ".join(exc.messages)
    if later is None:
        return ""
    if "at" in later:
        return f"at {later['at'].astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    if change.kind == ChangeKind.ROLLOUT:
        return "in its canary's next maintenance window"
    window = next_window(change.host)
    opens = f" (opens {window[0]:%Y-%m-%d %H:%M} UTC)" if window else " (it has none now: approval is refused)"
    return f"in {change.host.name}'s next maintenance window{opens}"


def change_page(change: ChangeRequest) -> ChangePage:
    page = ChangePage(change=change, stale=stale_reasons(change, host_state(change.host)) if change.is_pending else [])
    page.when = when_text(change)
    page.bound, page.seen = described(change.bound), seen_token(change)
    pair = kind_of(change.kind).pair
    if pair is None:  # a rollout: each host's part, while it can still be decided
        if change.is_pending:
            page.rollout = rollout_preview(params=change.params, actor=change.author)
        return page
    try:
        page.before, page.after = pair(change.host, change.params)
    except ValidationError as exc:
        page.problem = " ".join(exc.messages)
        return page
    if page.before is not None and page.before.pk != page.after.pk:
        page.diff = changes_between(page.before, page.after)
    page.report, page.report_error = report_for_revision(page.after)
    page.exports = exports_that_change(page.before, page.after)
    try:
        page.gate = _gate_plan(change, page.before)
    except ValidationError as exc:
        page.problem = " ".join(exc.messages)
    return page
