"""Reads for hosts, GPUs and telemetry. They own select_related/prefetch_related, so pages
issue a fixed number of queries whatever the number of hosts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import OuterRef, Prefetch, QuerySet, Subquery
from django.utils import timezone

from deployments.choices import ACTIVE_STATES
from deployments.models import Operation

from .models import GPU, GpuSample, Host


@dataclass
class GpuCard:
    gpu: GPU
    sample: GpuSample | None

    @property
    def mem_pct(self) -> float | None:
        if self.sample is None or self.sample.mem_used_bytes is None or not self.gpu.memory_bytes:
            return None
        return 100.0 * self.sample.mem_used_bytes / self.gpu.memory_bytes

    @property
    def power_pct(self) -> float | None:
        if self.sample is None or self.sample.power_w is None or not self.gpu.power_limit_w:
            return None
        return min(100.0, 100.0 * self.sample.power_w / self.gpu.power_limit_w)


@dataclass
class HostCard:
    host: Host
    gpus: list[GpuCard] = field(default_factory=list)
    operation: Operation | None = None


def host_list() -> QuerySet[Host]:
    return Host.objects.select_related("active_revision__model_variant").order_by("is_demo", "name")


def host_cards(*, hosts: QuerySet[Host] | None = None) -> list[HostCard]:
    """Hosts with their GPUs, each GPU's latest raw sample, and the running operation: 4 queries."""
    latest = GpuSample.objects.filter(gpu=OuterRef("pk"), resolution_s=0).order_by("-ts").values("pk")[:1]
    gpu_qs = GPU.objects.annotate(latest_sample_id=Subquery(latest)).order_by("index")
    hosts_list = list((hosts if hosts is not None else host_list()).prefetch_related(Prefetch("gpus", queryset=gpu_qs)))
    sample_ids = [g.latest_sample_id for h in hosts_list for g in h.gpus.all() if g.latest_sample_id]
    samples = {s.pk: s for s in GpuSample.objects.filter(pk__in=sample_ids)} if sample_ids else {}
    ops: dict[int, Operation] = {}
    for op in Operation.objects.filter(host__in=[h.pk for h in hosts_list], state__in=ACTIVE_STATES).order_by(
        "created_at"
    ):
        ops.setdefault(op.host_id, op)
    return [
        HostCard(
            host=h,
            gpus=[GpuCard(gpu=g, sample=samples.get(g.latest_sample_id)) for g in h.gpus.all()],
            operation=ops.get(h.pk),
        )
        for h in hosts_list
    ]


def host_get(*, name: str) -> Host:
    return Host.objects.select_related("active_revision__model_variant").get(name=name)


def gpu_series(*, host: Host, hours: float = 1.0) -> dict[int, list[dict[str, Any]]]:
    """The last `hours` of telemetry per GPU index: raw samples, falling back to rollups."""
    since = timezone.now() - timedelta(hours=hours)
    rows = (
        GpuSample.objects.filter(gpu__host=host, ts__gte=since)
        .order_by("gpu__index", "ts")
        .values("gpu__index", "ts", "util_pct", "mem_used_bytes", "power_w", "temp_c", "resolution_s")
    )
    series: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        series.setdefault(row["gpu__index"], []).append(row)
    return series
