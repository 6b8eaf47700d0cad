"""Reads for revisions, operations, models and the audit log; `hosts` holds the reads that put
hosts beside their revisions and operations (dashboard cards, serving status, what fits)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from core.models import AuditEvent
from deployments.choices import ACTIVE_STATES, OperationKind
from deployments.models import DeploymentRevision, ModelVariant, Operation, active_revision_id_of
from deployments.selectors.installs import install_time_left
from hardware.models import Host

# A list page's filter (its query parameter) -> the lookup it narrows the rows by.
REVISION_FILTERS = {
    "model": "model_variant__name__icontains",
    "engine": "engine",
    "author": "author__username",
    "tag": "tag__icontains",
}
AUDIT_FILTERS = {"action": "action__startswith", "actor": "actor__username", "host": "host__name"}


def _filtered(qs: QuerySet[Any], filters: dict[str, str] | None, lookups: dict[str, str]) -> QuerySet[Any]:
    """`qs` narrowed by each filter that has a value (blank ones are ignored)."""
    given = filters or {}
    for name, lookup in lookups.items():
        if given.get(name):
            qs = qs.filter(**{lookup: given[name]})
    return qs


def revision_history(*, host: Host, filters: dict[str, str] | None = None) -> QuerySet[DeploymentRevision]:
    qs = (
        DeploymentRevision.objects.filter(host=host)
        .select_related("model_variant", "author", "parent")
        .order_by("-number")
    )
    return _filtered(qs, filters, REVISION_FILTERS)


def revision_get(*, host_name: str, number: int) -> DeploymentRevision:
    return DeploymentRevision.objects.select_related("host__deployment", "model_variant", "author", "parent").get(
        host__name=host_name, number=number
    )


def revision_numbered(host: Host, number: int) -> DeploymentRevision:
    """Revision r`number` of `host`, with the rows its pages, answers and commands read;
    ValidationError on `revision` when the host has none by that number."""
    from django.core.exceptions import ValidationError

    found = (
        DeploymentRevision.objects.select_related(
            "host__deployment__active_revision", "model_variant", "author", "parent"
        )
        .filter(host=host, number=number)
        .first()
    )
    if found is None:
        raise ValidationError({"revision": f"{host.name} has no revision r{number}."})
    return found


def revision_kept(host: Host, params: dict[str, Any]) -> DeploymentRevision:
    """The revision a waiting change names by number in its kept `params` (a change request, a
    scheduled change: a host's numbers never change), read now; ValidationError on `revision`."""
    from django.core.exceptions import ValidationError

    number = params.get("revision")
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 2**31 - 1:
        raise ValidationError({"revision": "A revision number is a whole number from 1 (r5: 5)."})
    return revision_numbered(host, number)


def model_list() -> QuerySet[ModelVariant]:
    return ModelVariant.objects.order_by("is_demo", "family", "name")


def operation_get(*, pk: Any) -> Operation:
    return Operation.objects.select_related("host", "revision", "requested_by").get(pk=pk)


def audit_list(*, filters: dict[str, str] | None = None) -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor", "host").order_by("-created_at")
    return _filtered(qs, filters, AUDIT_FILTERS)


@dataclass(frozen=True)
class FirstStep:
    title: str
    done: bool
    detail: str
    url: str = ""


def _installing(op: Operation) -> str:
    """The first step while an install runs: what, where, how far and how long is left."""
    what = f"{op.params.get('engine', 'An engine')} {op.params.get('version') or ''}".strip()
    left = install_time_left(op)
    stage = f": {op.stage}" if op.stage else ""
    return (
        f"{what} is installing on {op.host.name} ({round(100 * float(op.progress or 0))} %{stage})"
        + (f", {left}" if left else "")
        + ". Import a model meanwhile."
    )


def first_steps() -> list[FirstStep]:
    """What a new user does between installing the panel and a served model, each step marked
    done from what is recorded; empty once a real (not demo) host serves an active revision."""
    from django.urls import reverse

    # Always the same four queries, whatever the answer (the dashboard's query count is pinned).
    hosts = list(Host.objects.filter(is_demo=False).select_related("deployment").order_by("name"))
    revisions = DeploymentRevision.objects.filter(host__is_demo=False).exists()
    imported = AuditEvent.objects.filter(action="model.import").exists() or revisions
    installing = (
        Operation.objects.filter(kind=OperationKind.INSTALL, host__is_demo=False, state__in=ACTIVE_STATES)
        .select_related("host")
        .order_by("created_at")
        .first()
    )
    if not hosts or any(active_revision_id_of(h) for h in hosts):
        return []
    host = hosts[0]
    folders = " or ".join(host.model_dirs[:2]) if host.model_dirs else "one of the host's model folders"
    install = FirstStep(
        "Install an engine",
        any(h.engine_installs for h in hosts),
        f"On {host.name}'s page, under Engines: llama.cpp installs with a build that works here.",
        reverse("hardware:host_detail", args=[host.name]) + "#host-engines",
    )
    if installing is not None and not install.done:
        install = FirstStep(
            "Install an engine",
            False,
            _installing(installing),
            reverse("deployments:operation_detail", args=[installing.pk]),
        )
    return [
        install,
        FirstStep(
            "Import a model",
            imported,
            f"Put a GGUF file in {folders} and import it by its path (the panel reads its header).",
            reverse("deployments:model_import"),
        ),
        FirstStep(
            "Record a revision",
            revisions,
            "Engine, model and settings, with the planner's report as you type.",
            reverse("deployments:revision_new", args=[host.name]),
        ),
        FirstStep("Switch to it", False, "From the revision's page: preflight, then progress until it serves."),
    ]
