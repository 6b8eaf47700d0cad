from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from hardware.admin import HostAdmin as HardwareHostAdmin
from hardware.models import Host

from .models import (
    BenchmarkRun,
    DeploymentRevision,
    ModelVariant,
    Operation,
    RevisionComment,
    active_revision_of,
)


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


# Hosts with what they serve (a `Deployment` row, which hardware's own admin cannot know of).
admin.site.unregister(Host)


@admin.register(Host)
class HostAdmin(HardwareHostAdmin):
    list_display = ("name", "address", "queue", "last_heartbeat", "active_revision", "is_demo")
    readonly_fields = ("active_revision", *HardwareHostAdmin.readonly_fields)
    list_select_related = ("deployment__active_revision__host",)

    @admin.display(description="active revision")
    def active_revision(self, host: Host) -> DeploymentRevision | None:
        return active_revision_of(host)
