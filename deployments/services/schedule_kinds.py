"""The switch and the alias move as kinds of scheduled change (schedules/kinds.py): registered when
deployments is ready (apps.py), each calls the same service as the change made now, as the person
who scheduled it, so its checks (role, planner, host lock, served set) run again when it is due.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from controlpanel.roles import OPERATOR
from deployments.selectors import revision_kept
from hardware.models import Host
from hardware.review import Approval
from schedules.choices import ChangeKind
from schedules.kinds import Checked, Kind, Outcome, kind_register

from .aliases import ALIAS_NAME, alias_set
from .gates import gate_from_params, gate_params
from .operations import HostBusyError
from .switch import switch_request

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


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


def _switch_words(params: dict[str, Any]) -> str:
    return f"switch to r{params.get('revision')}"


def _alias_words(params: dict[str, Any]) -> str:
    return f"move alias {params.get('name')} to r{params.get('revision')}"


def register() -> None:
    busy = (HostBusyError,)  # the host lock: tried again until the change's run_until
    kind_register(
        str(ChangeKind.SWITCH),
        Kind(role=OPERATOR, check=_switch_check, describe=_switch_words, run=_switch_run, busy=busy),
    )
    kind_register(
        str(ChangeKind.ALIAS), Kind(role=OPERATOR, check=_alias_check, describe=_alias_words, run=_alias_run, busy=busy)
    )
