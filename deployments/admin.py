from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import AuditEvent, BenchmarkRun, DeploymentRevision, ModelVariant, Operation, RevisionComment


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is shown, never edited or deleted (as NetBox treats ObjectChange)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(DeploymentRevision)
class DeploymentRevisionAdmin(ReadOnlyAdmin):
    list_display = (
        "host",
        "number",
        "tag",
        "engine",
        "engine_version",
        "model_variant",
        "author",
        "created_at",
    )
    list_filter = ("host", "engine")
    search_fields = ("message", "tag", "model_variant__name")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor", "action", "summary", "source", "remote_addr")
    list_filter = ("action", "source")


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "kind", "host", "revision", "state", "stage", "progress")
    list_filter = ("kind", "state", "host")


@admin.register(BenchmarkRun)
class BenchmarkRunAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "revision", "profile_name", "status")


@admin.register(RevisionComment)
class RevisionCommentAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "revision", "author")


@admin.register(ModelVariant)
class ModelVariantAdmin(admin.ModelAdmin):
    list_display = ("name", "family", "format", "quantization", "weights_bytes")
    search_fields = ("name", "repo_id", "family")
