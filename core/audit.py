"""The audit trail's one writer: a row per state-changing action, in the caller's transaction."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, Unpack

from django.db import models

from core.context import current_context

from .models import AuditEvent


def person_of(actor: object) -> Any:
    """The signed-in person an actor stands for, or None for the panel itself (a task, the agent,
    a command run with no user): what a row's `created_by`/`requested_by` column holds."""
    return actor if getattr(actor, "pk", None) else None


def audit_record(
    *,
    action: str,
    summary: str,
    obj: models.Model | None = None,
    host: models.Model | None = None,
    data: dict[str, Any] | None = None,
    actor: object,
) -> AuditEvent:
    """`host` is a `hardware.Host` (typed as a model: core imports nothing above it)."""
    ctx = current_context()
    event = AuditEvent(
        actor=person_of(actor),
        action=action,
        object_type=type(obj).__name__ if obj is not None else "",
        object_id=str(getattr(obj, "pk", "") or ""),
        host=host,
        summary=summary[:300],
        data=data or {},
        source=ctx.source,
        remote_addr=ctx.remote_addr,
    )
    event.full_clean()
    event.save()
    return event


class Entry(TypedDict):
    """What an audited write records beside the object itself (audit_record's other arguments)."""

    action: str
    summary: str
    host: NotRequired[models.Model | None]
    data: NotRequired[dict[str, Any] | None]
    actor: object


def audited_save(obj: models.Model, **entry: Unpack[Entry]) -> None:
    """Check `obj` (full_clean: ValidationError, nothing written), save it, and record the change."""
    obj.full_clean()
    obj.save()
    audit_record(obj=obj, **entry)


def audited_delete(obj: models.Model, **entry: Unpack[Entry]) -> None:
    """Record the deletion of `obj` (while it still has its id), then delete it."""
    audit_record(obj=obj, **entry)
    obj.delete()
