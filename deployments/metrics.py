"""The panel's own Prometheus metrics, read from the database when scraped (every web worker
answers the same): operations by kind and state, hosts online, telemetry ingest, front-door
usage, each GPU's latest telemetry. Names and labels: docs/metrics.md. Labels come from the
panel's own tables only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deployments.models import Operation, UsageDay
from hardware.models import GPU, EngineSample, GpuSample, Host, HostSample

INGEST_WINDOW_S = 300  # telemetry samples counted over the last five minutes


class PanelCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        ops = GaugeMetricFamily(
            "controlpanel_operations", "Operations recorded, by kind and state.", labels=["kind", "state"]
        )
        for row in Operation.objects.values("kind", "state").annotate(n=Count("pk")).order_by("kind", "state"):
            ops.add_metric([row["kind"], row["state"]], row["n"])
        yield ops
        online_after = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER_S)
        hosts = GaugeMetricFamily(
            "controlpanel_hosts", "Hosts known to the panel, by whether online.", labels=["state"]
        )
        total = Host.objects.count()
        online = Host.objects.filter(last_heartbeat__gte=online_after).count()
        hosts.add_metric(["online"], online)
        hosts.add_metric(["offline"], total - online)
        yield hosts
        seen = GaugeMetricFamily(
            "controlpanel_host_heartbeat_age_seconds", "Seconds since each host's agent last reported.", labels=["host"]
        )
        for name, last in Host.objects.exclude(last_heartbeat=None).values_list("name", "last_heartbeat"):
            seen.add_metric([name], max((now - last).total_seconds(), 0.0))
        yield seen
        since = now - timedelta(seconds=INGEST_WINDOW_S)
        ingest = GaugeMetricFamily(
            "controlpanel_telemetry_samples_recent",
            f"Raw telemetry samples stored with a time in the last {INGEST_WINDOW_S} s, by kind.",
            labels=["kind"],
        )
        for kind, model in (("gpu", GpuSample), ("engine", EngineSample), ("host", HostSample)):
            ingest.add_metric([kind], model.objects.filter(resolution_s=0, ts__gte=since).count())
        yield ingest
        yield from _usage(now.date())
        yield from _gpus(now)


def _usage(today: object) -> Iterator[Metric]:
    """Today's front-door usage (UTC) per host, key and model, as the hosts last reported it."""
    families = {
        name: GaugeMetricFamily(
            f"controlpanel_usage_{name}_today",
            f"Front-door {name.replace('_', ' ')} today (UTC), as reported.",
            labels=["host", "key", "model"],
        )
        for name in ("requests", "prompt_tokens", "completion_tokens", "errors")
    }
    rows = (
        UsageDay.objects.filter(day=today)
        .values("host__name", "key", "model")
        .annotate(**{name: Sum(name) for name in families})
        .order_by("host__name", "key", "model")
    )
    for row in rows:
        for name, family in families.items():
            family.add_metric([row["host__name"], row["key"], row["model"]], row[name] or 0)
    yield from families.values()


GPU_LABELS = ["host", "gpu", "gpu_name"]
# Family <- (GpuSample column, help); a GPU whose sample lacks the column is left out of it.
GPU_GAUGES = {
    "controlpanel_gpu_utilization_percent": ("util_pct", "GPU busy share (NVML utilisation), percent."),
    "controlpanel_gpu_memory_used_bytes": ("mem_used_bytes", "GPU memory in use, bytes."),
    "controlpanel_gpu_power_watts": ("power_w", "GPU power draw, watts."),
    "controlpanel_gpu_temperature_celsius": ("temp_c", "GPU temperature, degrees Celsius."),
}


def _gpus(now: datetime) -> Iterator[Metric]:
    """Each GPU's latest raw telemetry sample of the last INGEST_WINDOW_S (a GPU whose host stopped
    reporting drops out rather than showing its last figures for ever). Two queries, whatever the
    number of GPUs and samples: the GPUs with their latest sample's id (the (gpu, resolution, ts)
    index), then those samples."""
    latest = GpuSample.objects.filter(
        gpu=OuterRef("pk"), resolution_s=0, ts__gte=now - timedelta(seconds=INGEST_WINDOW_S)
    ).order_by("-ts")
    gpus = list(
        GPU.objects.annotate(sample_id=Subquery(latest.values("pk")[:1]))
        .order_by("host__name", "index")
        .values_list("host__name", "index", "name", "memory_bytes", "sample_id")
    )
    columns = [column for column, _ in GPU_GAUGES.values()]
    samples = {
        row[0]: row[1:]
        for row in GpuSample.objects.filter(
            pk__in=[sample_id for *_, sample_id in gpus if sample_id is not None]
        ).values_list("pk", "ts", "energy_mj", *columns)
    }
    total = GaugeMetricFamily(
        "controlpanel_gpu_memory_total_bytes", "GPU memory in all, bytes (as the host reported it).", labels=GPU_LABELS
    )
    gauges = {name: GaugeMetricFamily(name, doc, labels=GPU_LABELS) for name, (_, doc) in GPU_GAUGES.items()}
    energy = CounterMetricFamily(
        "controlpanel_gpu_energy_joules", "GPU energy used since its driver loaded (NVML), joules.", labels=GPU_LABELS
    )
    age = GaugeMetricFamily(
        "controlpanel_gpu_sample_age_seconds", "Seconds since the GPU's latest telemetry sample.", labels=GPU_LABELS
    )
    for host, index, name, memory_bytes, sample_id in gpus:
        labels = [host, str(index), name]
        total.add_metric(labels, memory_bytes)
        sample = samples.get(sample_id) if sample_id is not None else None
        if sample is None:
            continue
        ts, energy_mj, *values = sample
        for family, value in zip(gauges.values(), values, strict=True):
            if value is not None:
                family.add_metric(labels, value)
        if energy_mj is not None:
            energy.add_metric(labels, energy_mj / 1000)
        age.add_metric(labels, max((now - ts).total_seconds(), 0.0))
    yield total
    yield from gauges.values()
    yield energy
    yield age


def panel_metrics() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PanelCollector())
    return generate_latest(registry)
