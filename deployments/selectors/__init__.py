"""Reads for revisions, operations, models and the audit log; `hosts` holds the reads that put
hosts beside their revisions and operations (dashboard cards, serving status, what fits)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ModelVariant, Operation, active_revision_id_of
from hardware.models import Host


def revision_history(*, host: Host, filters: dict[str, str] | None = None) -> QuerySet[DeploymentRevision]:
    qs = (
        DeploymentRevision.objects.filter(host=host)
        .select_related("model_variant", "author", "parent")
        .order_by("-number")
    )
    filters = filters or {}
    if filters.get("model"):
        qs = qs.filter(model_variant__name__icontains=filters["model"])
    if filters.get("engine"):
        qs = qs.filter(engine=filters["engine"])
    if filters.get("author"):
        qs = qs.filter(author__username=filters["author"])
    if filters.get("tag"):
        qs = qs.filter(tag__icontains=filters["tag"])
    return qs


def revision_get(*, host_name: str, number: int) -> DeploymentRevision:
    return DeploymentRevision.objects.select_related("host__deployment", "model_variant", "author", "parent").get(
        host__name=host_name, number=number
    )


def model_list() -> QuerySet[ModelVariant]:
    return ModelVariant.objects.order_by("is_demo", "family", "name")


def operation_get(*, pk: Any) -> Operation:
    return Operation.objects.select_related("host", "revision", "requested_by").get(pk=pk)


def audit_list(*, filters: dict[str, str] | None = None) -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("actor", "host").order_by("-created_at")
    filters = filters or {}
    if filters.get("action"):
        qs = qs.filter(action__startswith=filters["action"])
    if filters.get("actor"):
        qs = qs.filter(actor__username=filters["actor"])
    if filters.get("host"):
        qs = qs.filter(host__name=filters["host"])
    return qs


@dataclass(frozen=True)
class FirstStep:
    title: str
    done: bool
    detail: str
    url: str = ""


def first_steps() -> list[FirstStep]:
    """What a new user does between installing the panel and a served model, each step marked
    done from what is recorded; empty once a real (not demo) host serves an active revision."""
    from django.urls import reverse

    from hardware.models import Host

    # Always the same three queries, whatever the answer (the dashboard's query count is pinned).
    hosts = list(Host.objects.filter(is_demo=False).select_related("deployment").order_by("name"))
    revisions = DeploymentRevision.objects.filter(host__is_demo=False).exists()
    imported = AuditEvent.objects.filter(action="model.import").exists() or revisions
    if not hosts or any(active_revision_id_of(h) for h in hosts):
        return []
    host = hosts[0]
    folders = " or ".join(host.model_dirs[:2]) if host.model_dirs else "one of the host's model folders"
    return [
        FirstStep(
            "Install an engine",
            any(h.engine_installs for h in hosts),
            f"On {host.name}'s page, under Engines: llama.cpp installs with a build that works here.",
            reverse("hardware:host_detail", args=[host.name]) + "#host-engines",
        ),
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
