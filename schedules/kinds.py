"""The kinds of change that can be scheduled: what each checks when it is scheduled and does when
it is due. The apps that own a change register its kind (`kind_register`) when they are ready:
deployments the switch and the alias move (deployments/services/schedule_kinds.py), rollouts the rollout
(rollouts/schedule_kinds.py). So this app imports none of them; they sit on it, and their entry
points offer "later" through it.

A kind calls the same service as the manual change (a switch: switch_request; an alias move:
alias_set; a rollout: rollout_start), as the person who scheduled it, so its checks (role,
planner, host lock, served set) run again at the due time. A new kind is one more ChangeKind value
and one more `kind_register` in the app that owns the change; the model, the beat task and the
pages take it as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from hardware.models import Host

from .choices import ChangeKind


@dataclass(frozen=True)
class Outcome:
    message: str  # what it did, one sentence
    operation: models.Model | None = None  # the operation it queued (deployments.Operation), when it queued one


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
    # host, params, actor, approval (the review gate's Approval of an approved change, or None)
    run: Callable[[Host, dict[str, Any], Any, Any], Outcome]
    # What `run` raises while its host is busy (another operation holds it): the change is tried
    # again on each tick until its run_until, instead of failing.
    busy: tuple[type[ValidationError], ...] = ()


KINDS: dict[str, Kind] = {}


def kind_register(name: str, kind: Kind) -> None:
    """Make `name` (a ChangeKind value) schedulable; its owning app calls this from ready()."""
    if name not in ChangeKind.values:
        raise ValueError(f"{name!r} is not a ChangeKind: add it there first (and its migration).")
    found = KINDS.get(name)
    if found is not None and found != kind:
        raise ValueError(f"the kind {name!r} is registered already")
    KINDS[name] = kind


def describe(kind: str, params: Any) -> str:
    """A change in words; survives any stored params."""
    found = KINDS.get(kind)
    if found is None or not isinstance(params, dict):
        return kind
    return found.describe(params)
