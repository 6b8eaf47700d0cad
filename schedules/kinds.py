"""What each kind of scheduled change checks when it is scheduled and does when it is due.

A kind calls the same service as the manual change (a switch: switch_request; an alias move:
alias_set; a rollout: rollout_start), as the person who scheduled it, so its checks (role,
planner, host lock, served set) run again at the due time. A new kind is one more `Kind` in KINDS
and one more ChangeKind value; the model, the beat task and the pages take it as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from controlpanel.roles import OPERATOR
from deployments.models import Operation
from deployments.selectors import revision_kept
from deployments.services.aliases import ALIAS_NAME, alias_set
from deployments.services.gates import gate_from_params, gate_params
from deployments.services.review import Approval
from deployments.services.switch import switch_request
from hardware.models import Host
from rollouts.models import Rollout
from rollouts.services import rollout_params_plan, rollout_start_from

from .choices import ChangeKind

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


@dataclass(frozen=True)
class Outcome:
    message: str  # what it did, one sentence
    operation: Operation | None = None  # the operation it queued, when it queued one


@dataclass(frozen=True)
class Checked:
    host: Host  # the host its row is kept on (a rollout: its canary, whose window it waits for)
    params: dict[str, Any]  # clean params
    reviewed: list[Host] = field(default_factory=list)  # hosts whose review it asks (default: `host`)


@dataclass(frozen=True)
class Kind:
    role: str  # the role its service needs (checked again when it runs)
    check: Callable[[Host | None, dict[str, Any], Any], Checked]  # host, params, actor -> or ValidationError
    describe: Callable[[dict[str, Any]], str]  # "switch to r5"
    run: Callable[[Host, dict[str, Any], Any, Approval | None], Outcome]  # host, params, actor, approval


def _host(host: Host | None) -> Host:
    if host is None:
        raise ValidationError({"host": "Name the host."})
    return host


def _switch_check(host: Host | None, params: dict[str, Any], actor: AbstractUser | None) -> Checked:
    revision = revision_kept(_host(host), params)
    reason = str(params.get("override_reason") or "").strip()[:1000]
    gate = gate_params(gate_from_params(params))  # a benchmark gate runs with the switch when it is due
    return Checked(
        revision.host, {"revision": revision.number, **({"override_reason": reason} if reason else {}), **gate}
    )


def _switch_run(host: Host, params: dict[str, Any], actor: AbstractUser | None, approval: Approval | None) -> Outcome:
    revision = revision_kept(host, params)
    reason, gate = params.get("override_reason", ""), gate_from_params(params)
    op = switch_request(revision=revision, override_reason=reason, gate=gate, actor=actor, approval=approval)
    return Outcome(f"Switch of {host.name} to r{revision.number} queued.", op)


def _alias_name(params: dict[str, Any]) -> str:
    name = str(params.get("name") or "").strip()
    if not ALIAS_NAME.match(name):
        raise ValidationError({"name": "An alias is 1 to 63 lower-case letters, digits, _ or -."})
    return name


def _alias_check(host: Host | None, params: dict[str, Any], actor: AbstractUser | None) -> Checked:
    host = _host(host)
    return Checked(host, {"name": _alias_name(params), "revision": revision_kept(host, params).number})


def _alias_run(host: Host, params: dict[str, Any], actor: AbstractUser | None, approval: Approval | None) -> Outcome:
    revision = revision_kept(host, params)
    alias = alias_set(host=host, name=_alias_name(params), revision=revision, actor=actor, approval=approval)
    return Outcome(f"{host.name}: {alias.name} points at r{params['revision']}.")


def _rollout_check(host: Host | None, params: dict[str, Any], actor: AbstractUser | None) -> Checked:
    """The rollout's own checks, its trial on every host included; kept on its canary's row."""
    planned = rollout_params_plan(params, actor=actor)
    order = planned.in_order()
    return Checked(order[0], planned.params(), order)


def _rollout_run(host: Host, params: dict[str, Any], actor: AbstractUser | None, approval: Approval | None) -> Outcome:
    rollout = rollout_start_from(params, actor=actor, approval=approval)
    return Outcome(f"Rollout #{rollout.pk} of {rollout.group} started, {host.name} first.")


def _rollout_words(params: dict[str, Any]) -> str:
    rollout = Rollout(kind=str(params.get("kind") or ""), change=params.get("change"))
    return f"rollout of {params.get('group')} ({rollout.describe_change()})"


KINDS: dict[str, Kind] = {
    ChangeKind.SWITCH: Kind(
        role=OPERATOR,
        check=_switch_check,
        describe=lambda p: f"switch to r{p.get('revision')}",
        run=_switch_run,
    ),
    ChangeKind.ALIAS: Kind(
        role=OPERATOR,
        check=_alias_check,
        describe=lambda p: f"move alias {p.get('name')} to r{p.get('revision')}",
        run=_alias_run,
    ),
    ChangeKind.ROLLOUT: Kind(role=OPERATOR, check=_rollout_check, describe=_rollout_words, run=_rollout_run),
}


def describe(kind: str, params: Any) -> str:
    """A change in words; survives any stored params."""
    found = KINDS.get(kind)
    if found is None or not isinstance(params, dict):
        return kind
    return found.describe(params)
