"""The panel's own Prometheus metrics, read from the database when scraped (every web worker
answers the same): operations by kind and state, hosts online, telemetry ingest, front-door
usage. Names and labels: docs/metrics.md. Labels come from the panel's own tables only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from deployments.models import Operation, UsageDay
from hardware.models import EngineSample, GpuSample, Host, HostSample

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


def panel_metrics() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PanelCollector())
    return generate_latest(registry)
