"""Aliases: stable names (`coder`, `fast`) a host's front door answers for one of its served
revisions, so a client config survives every switch.

An alias points at a revision the host serves (its active one or one of its serving set). A
switch moves the aliases that pointed at the revision it replaces to the new active revision
(`aliases_follow_switch`, called where the switch points the host at it): `coder` stays on
whatever the host's main engine is. Aliases of other served revisions stay where they are.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record, audited_save
from deployments.host_serving import model_name, served_set
from deployments.models import DeploymentRevision, ModelAlias
from hardware.models import Host
from hardware.review import Approval, approval_stamp, review_check, reviewed

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

ALIAS_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def alias_list(host: Host) -> list[ModelAlias]:
    return list(ModelAlias.objects.filter(host=host).select_related("revision").order_by("name"))


@reviewed
@transaction.atomic
def alias_set(
    *, host: Host, name: str, revision: DeploymentRevision, actor: AbstractUser | None, approval: Approval | None = None
) -> ModelAlias:
    """Create the alias `name` on `host`, or move it, to `revision` (one the host serves). On a
    host that requires review a person's move opens a change request instead (ChangeRequested)."""
    ensure_role(actor, OPERATOR)
    host = Host.objects.select_for_update().get(pk=host.pk)
    name = (name or "").strip()
    if not ALIAS_NAME.match(name):
        raise ValidationError({"name": "An alias is 1 to 63 lower-case letters, digits, _ or -."})
    if revision.host_id != host.pk:
        raise ValidationError({"revision": f"r{revision.number} is not a revision of {host.name}."})
    served = served_set(host)
    if revision.pk not in {s.revision.pk for s in served}:
        raise ValidationError(
            {"revision": f"{host.name} does not serve r{revision.number}: add it to the serving set first."}
        )
    if name in {s.name for s in served} or re.fullmatch(r".*-r\d+", name) and _names_a_revision(host, name):
        raise ValidationError({"name": f"{name} is the name of a served revision on {host.name}."})
    alias = ModelAlias.objects.filter(host=host, name=name).first()
    before = alias.revision.number if alias else None
    if alias is not None and alias.revision_id == revision.pk:
        return alias
    moved = f"from r{before} " if before is not None else ""
    review_check(
        host=host,
        kind="alias",
        params={"name": name, "revision": revision.number, "before": before},
        summary=f"{host.name}: alias {name} {moved}to r{revision.number}",
        actor=actor,
        approval=approval,
    )
    alias = alias or ModelAlias(host=host, name=name)
    alias.revision, alias.updated_at = revision, timezone.now()
    audited_save(
        alias,
        action="alias.set",
        summary=f"{host.name}: alias {name} {moved}to r{revision.number}",
        host=host,
        data={"name": name, "before": before, "after": revision.number, **approval_stamp(approval)},
        actor=actor,
    )
    return alias


def _names_a_revision(host: Host, name: str) -> bool:
    """Whether `name` is the front-door name of any of the host's revisions (served later, maybe)."""
    number = int(name.rsplit("-r", 1)[1])
    revision = DeploymentRevision.objects.filter(host=host, number=number).select_related("host", "model_variant")
    found = revision.first()
    return found is not None and model_name(found) == name


@transaction.atomic
def alias_delete(*, host: Host, name: str, actor: AbstractUser | None) -> None:
    ensure_role(actor, OPERATOR)
    alias = ModelAlias.objects.select_related("revision").filter(host=host, name=name).first()
    if alias is None:
        raise ValidationError({"name": f"{host.name} has no alias {name}."})
    number = alias.revision.number
    alias.delete()
    audit_record(
        action="alias.delete",
        summary=f"{host.name}: alias {name} (was r{number}) deleted",
        host=host,
        data={"name": name, "before": number},
        actor=actor,
    )


def aliases_follow_switch(
    *, host: Host, previous_id: int | None, revision: DeploymentRevision, actor: AbstractUser | None
) -> int:
    """Move the aliases of the revision a switch replaced to the new active one; answers how many."""
    if not previous_id or previous_id == revision.pk:
        return 0
    names = list(ModelAlias.objects.filter(host=host, revision_id=previous_id).values_list("name", flat=True))
    if not names:
        return 0
    ModelAlias.objects.filter(host=host, revision_id=previous_id).update(revision=revision, updated_at=timezone.now())
    audit_record(
        action="alias.follow",
        summary=f"{host.name}: {', '.join(names)} follow the switch to r{revision.number}",
        host=host,
        data={"names": names, "after": revision.number},
        actor=actor,
    )
    return len(names)
