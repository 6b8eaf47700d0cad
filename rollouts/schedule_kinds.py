"""A rollout as a kind of scheduled change (schedules/kinds.py), registered when rollouts is ready
(apps.py): its own checks, its trial on every host included, when it is scheduled and again when it
is due; kept on its canary's row, whose maintenance window it waits for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlpanel.roles import OPERATOR
from deployments.services.operations import HostBusyError
from hardware.models import Host
from hardware.review import Approval
from schedules.choices import ChangeKind
from schedules.kinds import Checked, Kind, Outcome, kind_register

from .models import Rollout
from .services import rollout_params_plan, rollout_start_from

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


def _rollout_check(host: Host | None, params: dict[str, Any], actor: AbstractUser | None) -> Checked:
    planned = rollout_params_plan(params, actor=actor)
    order = planned.in_order()
    return Checked(order[0], planned.params(), order)


def _rollout_run(host: Host, params: dict[str, Any], actor: AbstractUser | None, approval: Approval | None) -> Outcome:
    rollout = rollout_start_from(params, actor=actor, approval=approval)
    return Outcome(f"Rollout #{rollout.pk} of {rollout.group} started, {host.name} first.")


def _rollout_words(params: dict[str, Any]) -> str:
    rollout = Rollout(kind=str(params.get("kind") or ""), change=params.get("change"))
    return f"rollout of {params.get('group')} ({rollout.describe_change()})"


def register() -> None:
    kind_register(
        str(ChangeKind.ROLLOUT),
        # its canary's switch meets the host lock as a switch does: tried again until run_until
        Kind(role=OPERATOR, check=_rollout_check, describe=_rollout_words, run=_rollout_run, busy=(HostBusyError,)),
    )
