"""A host's serving set: the revisions its front door serves and how (docs/front-door.md).

The host's active revision (what its last switch applied) is always served, pinned: today's
switch is the simplest serving set. Other revisions of the host join it `pinned` (kept loaded)
or `on-demand` (loaded when a request names them, unloaded when idle or when room is needed),
or leave it. A change is audited and refused, with nothing changed, when it breaks a rule:
two served revisions on one port, a served name that is an alias, a revision the planner
refuses, pinned revisions whose planned memory does not fit the host, a revision aliases still
point at.

The set's rules live in one place, `set_rule_breaks`, asked of the set a change would make: by
`serving_mode_set`, and by `switch_request` (a page, the API, the CLI, a rollout, a schedule)
through `switch_set_refusals`. `free_port` gives a revision derived from a served one a port of
its own; `door_set` is the set as the front door's document carries it, never one the agent
refuses (hostagent.door.tables).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record
from deployments.choices import ServeMode
from deployments.front_door_models import FrontDoor
from deployments.models import (
    DeploymentRevision,
    ModelAlias,
    ServedRevision,
    active_revision_id_of,
)
from hardware.models import Host
from serving.binds import FRONT_DOOR_DEFAULT_BIND, split_bind
from serving.diffing import fmt

from .planning import plan_for_revision, planned_or_refused
from .preflight import FAIL, panel_preflight
from .review import Approval, approval_stamp, review_check, reviewed

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

NOT_SERVED = "off"  # the mode a form or command gives to take a revision out of the set


@dataclass(frozen=True)
class Served:
    """One revision of the serving set as the front door gets it."""

    revision: DeploymentRevision
    mode: str
    idle_ttl_s: int | None
    active: bool

    @property
    def name(self) -> str:
        return model_name(self.revision)


def model_name(revision: DeploymentRevision) -> str:
    """The front door's name for a revision: `<served name, slugified>-r<number>`."""
    from deployments.revision_views import effective_served_name

    base = slugify(effective_served_name(revision).replace("/", "-").replace(".", "-")) or "model"
    return f"{base[:120]}-r{revision.number}"


def served_set(host: Host) -> list[Served]:
    """The host's serving set, its active revision first (pinned), then the others by number."""
    active_id = active_revision_id_of(host)
    served: list[Served] = []
    if active_id:
        active = DeploymentRevision.objects.select_related("host", "model_variant").get(pk=active_id)
        served.append(Served(active, ServeMode.PINNED, None, True))
    entries = ServedRevision.objects.filter(host=host).select_related("revision__model_variant", "revision__host")
    served += [Served(e.revision, e.mode, e.idle_ttl_s, False) for e in entries if e.revision_id != active_id]
    return served


@dataclass(frozen=True)
class LeftOut:
    """A revision of the set the front door's document leaves out, and why."""

    served: Served
    reason: str


def door_set(host: Host) -> tuple[list[Served], list[LeftOut]]:
    """The serving set as the front door's document carries it: the host's set, less any revision
    that would share a port or a name with one before it (the active revision first), which the
    host would refuse the whole table for. The services refuse such a set up front
    (set_rule_breaks); this keeps a set made before that rule, or by a race, from leaving the door
    on a stale table: the active revision serves, the host page says what was left out and why."""
    kept: list[Served] = []
    left: list[LeftOut] = []
    ports: dict[int, Served] = {}
    names: dict[str, Served] = {}
    for served in served_set(host):
        clash = ports.get(served.revision.port)
        named = names.get(served.name)
        if clash is not None:
            reason = f"r{clash.revision.number} listens on port {served.revision.port} too"
        elif named is not None:
            reason = f"r{named.revision.number} has the name {served.name} too"
        else:
            ports[served.revision.port], names[served.name] = served, served
            kept.append(served)
            continue
        left.append(LeftOut(served, reason + ": take it out of the set, or serve a revision of it on a free port"))
    return kept, left


def host_capacity(host: Host) -> dict[str, int]:
    """Each device's memory as the host reported it (what a pinned set must fit in)."""
    if host.cpu_only:
        return {"ram": host.ram_bytes} if host.ram_bytes else {}
    return {f"gpu{g.index}": g.memory_bytes for g in host.gpus.all() if g.memory_bytes}


def _fit(host: Host, pinned: Iterable[DeploymentRevision]) -> list[str]:
    """Why the pinned revisions' planned memory does not fit the host ([] when it does)."""
    capacity = host_capacity(host)
    total: dict[str, int] = {}
    refused = []
    for revision in pinned:
        planned, why = planned_or_refused(revision)
        refused += [why] if why else []
        for device, size in planned.items():
            total[device] = total.get(device, 0) + size
    return refused + [
        f"{device}: {fmt.size_bytes(need)} planned, {fmt.size_bytes(capacity[device])} present"
        for device, need in sorted(total.items())
        if device in capacity and need > capacity[device]
    ]


def set_rule_breaks(host: Host, members: list[Served]) -> list[str]:
    """Every rule of a serving set, checked on the whole set as the host would get it ([] when it
    keeps them all): one port per engine, each name once and none an alias, the pinned revisions
    fit the host's memory. The one check every path that changes the set asks (serving_mode_set,
    switch_request through switch_set_refusals); the agent refuses a table that breaks one."""
    reasons: list[str] = []
    on_port: dict[int, Served] = {}
    for served in members:
        first = on_port.setdefault(served.revision.port, served)
        if first is not served:
            port = served.revision.port
            reasons.append(f"r{first.revision.number} and r{served.revision.number} would both listen on port {port}")
    named: dict[str, Served] = {}
    for served in members:
        first = named.setdefault(served.name, served)
        if first is not served:
            reasons.append(f"r{first.revision.number} and r{served.revision.number} are both named {served.name}")
    aliases = set(ModelAlias.objects.filter(host=host, name__in=list(named)).values_list("name", flat=True))
    reasons += [f"{name} is an alias on {host.name}" for name in sorted(aliases)]
    pinned = [s.revision for s in members if s.mode == ServeMode.PINNED]
    short = _fit(host, pinned) if len(pinned) > 1 else []  # one alone: the planner's (an admin may override)
    if short:
        reasons.append("the pinned revisions do not fit: " + "; ".join(short))
    return reasons


def _refusals(host: Host, revision: DeploymentRevision, mode: str, current: list[Served]) -> list[str]:
    """Why `revision` cannot join the set `mode` (or change to it): the set's rules on the set it
    would make, then the revision's own planner and preflight."""
    after = [s for s in current if s.revision.pk != revision.pk] + [Served(revision, mode, None, False)]
    reasons = set_rule_breaks(host, after)
    try:
        report = plan_for_revision(revision)
    except Exception as exc:  # noqa: BLE001 - PlanInputError and the like: the planner cannot read it
        return [*reasons, f"the planner cannot read r{revision.number}: {exc}"]
    reasons += [f"planner: {f.code}: {f.message}" for f in report.findings if f.severity == "error"]
    reasons += [f"{c.name}: {c.message}" for c in panel_preflight(revision, report) if c.status == FAIL]
    return reasons


def served_set_after_switch(host: Host, revision: DeploymentRevision) -> list[Served]:
    """The serving set a switch to `revision` makes: it first, pinned; the other revisions of the
    set keep their rows (the revision it replaces leaves unless it has one)."""
    entries = ServedRevision.objects.filter(host=host).exclude(revision=revision)
    entries = entries.select_related("revision__model_variant", "revision__host")
    return [Served(revision, str(ServeMode.PINNED), None, True)] + [
        Served(e.revision, e.mode, e.idle_ttl_s, False) for e in entries
    ]


def switch_set_refusals(host: Host, revision: DeploymentRevision) -> list[str]:
    """Why the set a switch to `revision` would make breaks a rule ([] when it keeps them)."""
    return set_rule_breaks(host, served_set_after_switch(host, revision))


def free_port(host: Host, parent: DeploymentRevision) -> int:
    """The port a revision made from `parent` listens on: the parent's unless a revision that stays in
    the host's serving set through a switch (one with a row of its own, pinned or on-demand: the
    parent itself included) or the front door listens there; then the lowest port from the smaller
    of the parent's and its own parent's upward that neither uses. The active revision alone does
    not hold its port: a switch to the child replaces it, so a new generation keeps the port its
    clients and exports know. A line of revisions made one from another takes turns on two ports
    instead of creeping upward."""
    rows = ServedRevision.objects.filter(host=host).values_list("revision__port", flat=True)
    taken = {int(port) for port in rows} | {_door_port(host)}
    if parent.port not in taken:
        return int(parent.port)
    grand = parent.parent.port if parent.parent_id and parent.parent else parent.port
    port = min(parent.port, grand)
    while port in taken and port < 65535:
        port += 1
    return int(port)


def _door_port(host: Host) -> int:
    """The port the host's front door last said it listens on (its default before any report)."""
    try:
        return split_bind(str(FrontDoor.objects.filter(host=host).values_list("bind", flat=True).first() or ""))[1]
    except ValueError:
        return split_bind(FRONT_DOOR_DEFAULT_BIND)[1]


@reviewed
@transaction.atomic
def serving_mode_set(
    *,
    revision: DeploymentRevision,
    mode: str,
    idle_ttl_s: int | None = None,
    actor: AbstractUser | None,
    approval: Approval | None = None,
) -> ServedRevision | None:
    """Serve `revision` through its host's front door `pinned` or `on-demand`, or take it out of the
    set (`mode="off"`). Answers the set's row (None when taken out). On a host that requires review a
    person's change opens a change request instead (ChangeRequested, deployments.services.review)."""
    ensure_role(actor, OPERATOR)
    host = Host.objects.select_for_update().get(pk=revision.host_id)
    if mode not in (*ServeMode.values, NOT_SERVED):
        raise ValidationError({"mode": f"The mode is pinned, on-demand or off, not {mode!r}."})
    if idle_ttl_s is not None and (isinstance(idle_ttl_s, bool) or not isinstance(idle_ttl_s, int) or idle_ttl_s < 1):
        raise ValidationError({"idle_ttl_s": "The idle time is a whole number of seconds, at least 1 (empty: never)."})
    if revision.pk == active_revision_id_of(host):
        raise ValidationError(
            f"r{revision.number} is {host.name}'s active revision: always served, pinned. Switch to another first."
        )
    entry = ServedRevision.objects.filter(revision=revision).first()
    before = {"mode": entry.mode, "idle_ttl_s": entry.idle_ttl_s} if entry else {"mode": NOT_SERVED}
    if mode == NOT_SERVED:
        aliased = list(ModelAlias.objects.filter(host=host, revision=revision).values_list("name", flat=True))
        if aliased:
            raise ValidationError(f"Aliases point at r{revision.number}: {', '.join(aliased)}. Move them first.")
        if entry is not None:
            _review(host, revision, mode, idle_ttl_s, actor, approval)
            entry.delete()
            _audit(host, revision, before, {"mode": NOT_SERVED}, actor, approval)
        return None
    reasons = _refusals(host, revision, mode, served_set(host))
    if reasons:
        raise ValidationError(f"{host.name} cannot serve r{revision.number} {mode}: " + "; ".join(reasons))
    _review(host, revision, mode, idle_ttl_s, actor, approval)
    entry = entry or ServedRevision(host=host, revision=revision)
    entry.mode, entry.idle_ttl_s, entry.updated_at = mode, idle_ttl_s, timezone.now()
    entry.full_clean()
    entry.save()
    _audit(host, revision, before, {"mode": mode, "idle_ttl_s": idle_ttl_s}, actor, approval)
    return entry


def _review(
    host: Host,
    revision: DeploymentRevision,
    mode: str,
    idle_ttl_s: int | None,
    actor: AbstractUser | None,
    approval: Approval | None,
) -> None:
    idle = f", unloaded after {idle_ttl_s} s idle" if idle_ttl_s else ""
    review_check(
        host=host,
        kind="serving",
        params={"revision": revision.number, "mode": mode, "idle_ttl_s": idle_ttl_s},
        summary=f"{host.name} serves r{revision.number} {mode}{idle}",
        actor=actor,
        approval=approval,
    )


def _audit(
    host: Host,
    revision: DeploymentRevision,
    before: dict[str, Any],
    after: dict[str, Any],
    actor: AbstractUser | None,
    approval: Approval | None = None,
) -> None:
    ttl = after.get("idle_ttl_s")
    idle = f", unloaded after {ttl} s idle" if ttl else ""
    audit_record(
        action="serving.mode",
        summary=f"{host.name} serves r{revision.number} {after['mode']}{idle}",
        obj=revision,
        host=host,
        data={"before": before, "after": after, **approval_stamp(approval)},
        actor=actor,
    )
