"""A host's serving set: the revisions its front door serves and how (docs/front-door.md).

The host's active revision (what its last switch applied) is always served, pinned: today's
switch is the simplest serving set. Other revisions of the host join it `pinned` (kept loaded)
or `on-demand` (loaded when a request names them, unloaded when idle or when room is needed),
or leave it. A change is audited and refused, with nothing changed, when it breaks a rule:
two served revisions on one port, a served name that is an alias, a revision the planner
refuses, pinned revisions whose planned memory does not fit the host, a revision aliases still
point at.

The set's rules live in one place, deployments.host_serving's `set_rule_breaks`, asked of the set
a change would make: by `serving_mode_set`, and by `switch_request` (a page, the API, the CLI, a
rollout, a schedule) through `switch_set_refusals`. `free_port` gives a revision derived from a
served one a port of its own; host_serving's `door_set` is the set as the front door's document
carries it, never one the agent refuses (hostagent.door.tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record
from deployments.choices import ServeMode
from deployments.front_door_models import FrontDoor
from deployments.host_serving import Served, revision_plan, served_set, set_rule_breaks
from deployments.models import DeploymentRevision, ModelAlias, ServedRevision, active_revision_id_of
from hardware.models import Host
from hardware.review import Approval, approval_stamp, review_check, reviewed
from serving.binds import FRONT_DOOR_DEFAULT_BIND, split_bind

from .preflight import FAIL, panel_preflight

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

NOT_SERVED = "off"  # the mode a form or command gives to take a revision out of the set


def _refusals(host: Host, revision: DeploymentRevision, mode: str, current: list[Served]) -> list[str]:
    """Why `revision` cannot join the set `mode` (or change to it): the set's rules on the set it
    would make, then the revision's own planner and preflight."""
    after = [s for s in current if s.revision.pk != revision.pk] + [Served(revision, mode, None, False)]
    reasons = set_rule_breaks(host, after)
    plan_ = revision_plan(revision)  # planned once: set_rule_breaks' fit read the same report
    report = plan_.report
    if report is None:
        return [*reasons, plan_.refused]
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
    person's change opens a change request instead (ChangeRequested, hardware.review)."""
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
