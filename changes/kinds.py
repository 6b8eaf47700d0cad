"""What each kind of change request runs, and which two revisions its page compares.

A kind runs through the same service its author called (the one that opened the request), with
the author as the actor and the approval beside it. A new kind adds an entry here: its `params`
are whatever its service needs, stored as JSON on the request. A rollout compares no single pair:
its page shows each host's part (rollouts.preview).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError

from deployments.models import DeploymentRevision, ModelAlias, Operation, active_revision_of
from deployments.selectors import revision_kept
from deployments.services.aliases import alias_set
from deployments.services.gates import gate_from_params
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from hardware.models import Host
from hardware.review import Approval
from rollouts.models import Rollout
from rollouts.services import rollout_start_from
from tuning.models import TuningRun
from tuning.services import tuning_start_from

from .choices import ChangeKind


def target_revision(host: Host, params: dict[str, Any]) -> DeploymentRevision:
    """The revision a request names (by number: a host's numbers never change); a clear refusal."""
    return revision_kept(host, params)


Pair = tuple[DeploymentRevision | None, DeploymentRevision]


@dataclass(frozen=True)
class Kind:
    # The change through its service: the author acts; an approval passes the gate and is recorded
    # (None: the author proposing it, which opens the request).
    run: Callable[[Host, dict[str, Any], Any, Approval | None], Operation | Rollout | TuningRun | None]
    # What runs now (None: nothing) and what the change would run, for the diff and the exports
    # (None: a change of several hosts, shown host by host).
    pair: Callable[[Host, dict[str, Any]], Pair] | None


def _run_switch(host: Host, params: dict[str, Any], author: Any, approval: Approval | None) -> Operation:
    revision = target_revision(host, params)
    reason = str(params.get("override_reason") or "")
    gate = gate_from_params(params)  # the benchmark gate the author asked for runs with the approved switch
    return switch_request(revision=revision, override_reason=reason, gate=gate, actor=author, approval=approval)


def _run_alias(host: Host, params: dict[str, Any], author: Any, approval: Approval | None) -> None:
    revision = target_revision(host, params)
    alias_set(host=host, name=str(params.get("name", "")), revision=revision, actor=author, approval=approval)


def _run_serving(host: Host, params: dict[str, Any], author: Any, approval: Approval | None) -> None:
    ttl = params.get("idle_ttl_s")
    serving_mode_set(
        revision=target_revision(host, params),
        mode=str(params.get("mode", "")),
        idle_ttl_s=ttl if isinstance(ttl, int) else None,
        actor=author,
        approval=approval,
    )


def _run_rollout(host: Host, params: dict[str, Any], author: Any, approval: Approval | None) -> Rollout:
    return rollout_start_from(params, actor=author, approval=approval)


def _run_tuning(host: Host, params: dict[str, Any], author: Any, approval: Approval | None) -> TuningRun:
    return tuning_start_from(host=host, params=params, actor=author, approval=approval)


def _active_pair(host: Host, params: dict[str, Any]) -> Pair:
    return active_revision_of(host), target_revision(host, params)


def _alias_pair(host: Host, params: dict[str, Any]) -> Pair:
    alias = ModelAlias.objects.select_related("revision").filter(host=host, name=params.get("name")).first()
    return (alias.revision if alias else None), target_revision(host, params)


KINDS: dict[str, Kind] = {
    ChangeKind.SWITCH: Kind(run=_run_switch, pair=_active_pair),
    ChangeKind.ALIAS: Kind(run=_run_alias, pair=_alias_pair),
    ChangeKind.SERVING: Kind(run=_run_serving, pair=_active_pair),
    ChangeKind.ROLLOUT: Kind(run=_run_rollout, pair=None),
    ChangeKind.TUNING: Kind(run=_run_tuning, pair=_active_pair),  # what it serves now and the base it tunes
}


def kind_of(kind: str) -> Kind:
    if kind not in KINDS:
        raise ValidationError(f"This panel cannot run a change request of kind {kind!r}.")
    return KINDS[kind]
