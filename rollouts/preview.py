"""What a rollout would do on each host, without doing it: for a change request's page (a rollout
over a host that requires review) and anyone who reads it before approving.

Each host's part is made in a savepoint and undone, as the rollout's own trial does: the new
revision derived from what the host serves now (or the alias's target), its diff against what
runs now and the planner's report on it, in wave order. A host that would refuse the change says
why, and the others are still shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from deployments.models import DeploymentRevision
from deployments.presenters import report_for_revision
from deployments.selectors.revision_views import changes_between
from hardware.models import Host
from serving.diffing import RevisionDiff

from .services import TRIAL, _apply, _fresh, _reason, rollout_params_plan

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


@dataclass
class HostPreview:
    host: Host
    wave: int  # 0: the canary
    before: DeploymentRevision | None = None  # what runs there now (an alias move: the alias's target)
    after: DeploymentRevision | None = None  # what the rollout would run
    new: bool = False  # `after` is a revision the rollout would make at the host's wave (not kept here)
    diff: RevisionDiff | None = None
    report: dict[str, Any] | None = None
    report_error: str = ""
    problem: str = ""  # why this host would refuse the change now


@dataclass
class RolloutPreview:
    summary: str = ""
    batch_size: int = 0
    waves: list[list[HostPreview]] = field(default_factory=list)
    problem: str = ""  # why the rollout cannot be planned now (the group, the canary, the author's role)


class _Undo(Exception):
    pass


def _host_preview(planned: Any, host: Host, wave: int) -> HostPreview:
    part = HostPreview(host=host, wave=wave)
    try:
        with transaction.atomic():
            before, after, _ = _apply(planned.rollout, _fresh(host), switch=False, approval=TRIAL)
            part.before, part.after = before, after
            part.new = planned.rollout.kind == planned.rollout.Kind.REVISION
            if before is not None and before.pk != after.pk:
                part.diff = changes_between(before, after)
            part.report, part.report_error = report_for_revision(after)
            raise _Undo
    except _Undo:
        pass
    except (ValidationError, PermissionDenied) as exc:
        part.problem = _reason(exc)
    return part


def rollout_preview(*, params: dict[str, Any], actor: AbstractUser | None) -> RolloutPreview:
    """The rollout `params` describe (Planned.params), host by host in wave order, as `actor`
    (its author) would start it now."""
    try:
        planned = rollout_params_plan(params, actor=actor, trial=False)
    except (ValidationError, PermissionDenied) as exc:
        return RolloutPreview(problem=_reason(exc))
    by_name = {h.name: h for h in planned.hosts}
    waves = [[_host_preview(planned, by_name[name], i) for name in wave] for i, wave in enumerate(planned.waves)]
    summary = (
        f"{planned.rollout.describe_change()} over the {len(planned.hosts)} host(s) tagged {planned.rollout.group}"
    )
    return RolloutPreview(summary=summary, batch_size=planned.rollout.batch_size, waves=waves)
