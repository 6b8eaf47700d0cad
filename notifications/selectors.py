"""Reads for the notifications page and for benchmark comparisons."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from deployments.models import BenchmarkRun

from .models import Channel, Delivery, Rule

RECENT = 50


def channel_list() -> QuerySet[Channel]:
    return Channel.objects.order_by("name")


def rule_list() -> QuerySet[Rule]:
    return Rule.objects.select_related("channel", "host").order_by("channel__name", "created_at")


def delivery_list(*, limit: int = RECENT) -> list[Delivery]:
    return list(Delivery.objects.order_by("-created_at")[:limit])


def previous_benchmark_run(run: Any) -> BenchmarkRun | None:
    """The run to hold a new one against: the latest completed run, with exactly the same
    profile, of the revision the host was benchmarked on before this one (whatever its number:
    after a switch back to an older revision, the one it replaced)."""
    revision = run.revision
    candidates = (
        BenchmarkRun.objects.filter(
            revision__host_id=revision.host_id,
            profile_name=run.profile_name,
            status="completed",
            created_at__lt=run.created_at,
        )
        .exclude(revision_id=revision.pk)
        .select_related("revision")
        .order_by("-created_at")[:20]
    )
    return next((c for c in candidates if c.profile == run.profile), None)
