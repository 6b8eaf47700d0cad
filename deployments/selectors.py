"""Reads for revisions, operations, models and the audit log."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from .models import AuditEvent, DeploymentRevision, ModelVariant, Operation


def revision_history(*, host: Any, filters: dict[str, str] | None = None) -> QuerySet[DeploymentRevision]:
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
    return DeploymentRevision.objects.select_related("host", "model_variant", "author", "parent").get(
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
