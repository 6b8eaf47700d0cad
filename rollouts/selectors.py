"""Reads for the rollout pages, the API and the CLI."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet

from deployments.models import SwitchGate
from deployments.services.gates import gate_of

from .models import Rollout, RolloutHost


def rollout_list(*, limit: int = 100) -> QuerySet[Rollout]:
    return (
        Rollout.objects.select_related("created_by", "approved_by")
        .annotate(
            host_count=Count("hosts"),
            done_count=Count("hosts", filter=Q(hosts__state="done")),
        )
        .order_by("-created_at")[:limit]
    )


def rollout_get(*, pk: Any) -> Rollout:
    return Rollout.objects.select_related("created_by", "approved_by").get(pk=pk)


def rollout_hosts(*, rollout: Rollout) -> list[RolloutHost]:
    return list(
        RolloutHost.objects.filter(rollout=rollout)
        .select_related("host", "previous", "target", "operation")
        .order_by("wave", "host__name")
    )


def rollout_waves(*, rollout: Rollout) -> list[tuple[int, list[RolloutHost]]]:
    """The hosts by wave, in order (wave 0 is the canary)."""
    waves: dict[int, list[RolloutHost]] = {}
    for part in rollout_hosts(rollout=rollout):
        waves.setdefault(part.wave, []).append(part)
    return sorted(waves.items())


def rollout_canary_gate(*, rollout: Rollout) -> SwitchGate | None:
    """The benchmark gate the canary's switch carries (its state, and the comparison that decided
    it once measured); None without a gate or before the canary started."""
    if not rollout.gate:
        return None
    canary = RolloutHost.objects.filter(rollout=rollout, wave=0).select_related("operation").first()
    return gate_of(canary.operation) if canary is not None and canary.operation is not None else None
