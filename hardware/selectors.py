"""Reads of hosts alone: GPU, engine, CPU and memory telemetry, and why a host is offline.
(Reads that put hosts beside revisions and operations, the dashboard's cards among them, are
`deployments.selectors.hosts`.)"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, FloatField, Func, Max, OuterRef, Subquery
from django.utils import timezone
from django.utils.timesince import timesince

from core.models import AuditEvent

from .models import EngineSample, GpuSample, Host, HostEvent, HostSample, used_memory

REPORTED_ADDRESS = "reported_address"  # in a probe's audit data: the address its agent suggests


def reported_ago(last_heartbeat: datetime, now: datetime | None = None) -> str:
    """How long ago an agent last reported, in one unit ("3 hours", "5 minutes"): a host's card
    says it, and would change every minute with two."""
    return timesince(last_heartbeat, now, depth=1)


def host_reported_address(host: Host) -> str:
    """The address the host's agent suggested at its last probe ("" when none): shown to admins
    beside the Address form, never used (hardware.services.host_probe_record)."""
    event = (
        AuditEvent.objects.filter(host=host, action__in=("host.probe", "host.register"))
        .order_by("-created_at")
        .values_list("data", flat=True)
        .first()
    )
    reported = event.get(REPORTED_ADDRESS) if isinstance(event, dict) else None
    return reported if isinstance(reported, str) else ""


def offline_reason(host: Host) -> str:
    """Why a host offers no Switch, Benchmark or Probe now; "" while its agent reports."""
    if host.is_online:
        return ""
    if host.is_demo:
        return f"{host.name} is a demo host: no agent runs it, so Switch, Benchmark and Probe are not offered."
    if host.last_heartbeat is None:
        since = "has never reported"
    else:
        since = f"last reported {reported_ago(host.last_heartbeat)} ago"
    return (
        f"{host.name} is offline: its agent {since}. Switch, Benchmark and Probe need the agent "
        "running on the host; they come back when it reports again."
    )


def host_event_list(*, host: Host, kind: str = "") -> Any:
    """The host's events, newest first; only those of `kind` when it is one (HostEvent.Kind)."""
    events = HostEvent.objects.filter(host=host)
    return events.filter(kind=kind) if kind else events


# Raw samples and one-minute rollups (hardware.services.telemetry_rollup): naming both lets a
# window's read use the (gpu|host, resolution_s, ts) index for its time range.
RESOLUTIONS = (0, 60)


def window_start(hours: float, now: datetime | None = None) -> datetime:
    """Where a window of the last `hours` begins."""
    return (now or timezone.now()) - timedelta(hours=hours)


class Epoch(Func):
    """A timestamp as seconds since 1970, a float: the charts' own unit, and a plain number to
    read (Django reads a timestamp through a Python loader: a few µs a row, most of reading a
    window of samples)."""

    output_field = FloatField()
    template = "EXTRACT(EPOCH FROM %(expressions)s)::float8"

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # SQLite keeps UTC as text; julianday() reads it (to about 10 µs at today's dates).
        template = "((julianday(%(expressions)s) - 2440587.5) * 86400.0)"
        return self.as_sql(compiler, connection, template=template, **extra_context)


GPU_SERIES = ("util_pct", "mem_used_bytes", "power_w", "temp_c")


def gpu_series(*, host: Host, hours: float = 1.0, now: datetime | None = None) -> dict[int, list[dict[str, Any]]]:
    """The last `hours` of telemetry per GPU index, oldest first, in one query; each row's `ts`
    in epoch seconds.

    Raw samples where there are any; where the raw samples are gone (older than the raw
    retention, or never taken), the one-minute rollups fill in before the first raw sample.
    """
    rows = (
        GpuSample.objects.filter(gpu__host=host, resolution_s__in=RESOLUTIONS, ts__gte=window_start(hours, now))
        .order_by("gpu__index", "ts")
        .values_list("gpu__index", "resolution_s", Epoch("ts"), *GPU_SERIES)
    )
    raw: dict[int, list[dict[str, Any]]] = {}
    rollups: dict[int, list[dict[str, Any]]] = {}
    for index, resolution, *values in rows:
        row = dict(zip(("ts", *GPU_SERIES), values, strict=True), resolution_s=resolution)
        (raw if resolution == 0 else rollups).setdefault(index, []).append(row)
    series: dict[int, list[dict[str, Any]]] = {}
    for index in sorted(set(raw) | set(rollups)):
        fine = raw.get(index, [])
        first = fine[0]["ts"] if fine else None
        coarse = [r for r in rollups.get(index, []) if first is None or r["ts"] < first]
        series[index] = coarse + fine
    return series


ENGINE_SERIES = ("requests_running", "requests_waiting", "kv_cache_usage", "generation_tokens_total")


def engine_series(*, host: Host, hours: float = 1.0, now: datetime | None = None) -> list[dict[str, Any]]:
    """The last `hours` of the engine's own metrics (raw samples, and rollups where they are
    gone); each row's `ts` in epoch seconds."""
    rows = (
        EngineSample.objects.filter(host=host, resolution_s__in=RESOLUTIONS, ts__gte=window_start(hours, now))
        .order_by("ts")
        .values_list(Epoch("ts"), *ENGINE_SERIES)
    )
    return [dict(zip(("ts", *ENGINE_SERIES), row, strict=True)) for row in rows]


# What a host's card shows of its latest CPU and memory sample: Host attribute <- HostSample column.
LATEST_USAGE = {
    "usage_cpu_pct": "cpu_pct",
    "usage_mem_total": "mem_total_bytes",
    "usage_mem_available": "mem_available_bytes",
}


def latest_usage() -> dict[str, Subquery]:
    """`Host` annotations (LATEST_USAGE) with its latest raw CPU and memory sample's figures:
    read with the host's own row, no query more."""
    latest = HostSample.objects.filter(host=OuterRef("pk"), resolution_s=0).order_by("-ts")
    return {name: Subquery(latest.values(column)[:1]) for name, column in LATEST_USAGE.items()}


USAGE_BYTES = ("mem_total_bytes", "mem_available_bytes", "swap_total_bytes", "swap_used_bytes")


def usage_series(*, host: Host, hours: float = 1.0, now: datetime | None = None) -> list[dict[str, Any]]:
    """The last `hours` of the host's CPU and memory, oldest first (raw samples, and rollups
    where they are gone), each with the RAM in use (`mem_used_bytes`)."""
    rows = (
        HostSample.objects.filter(host=host, resolution_s__in=RESOLUTIONS, ts__gte=window_start(hours, now))
        .order_by("ts")
        .values("ts", "cpu_pct", "load_1", "load_5", "load_15", *USAGE_BYTES)
    )
    return [{**row, "mem_used_bytes": used_memory(row["mem_total_bytes"], row["mem_available_bytes"])} for row in rows]


def telemetry_stamp(*, host: Host, hours: float = 1.0, now: datetime | None = None) -> tuple[int, ...]:
    """Which samples the windows of `gpu_series`, `engine_series` and `usage_series` hold (3
    queries): how many and the newest id of each. Samples are never edited and ids only grow, so
    an equal stamp means the same rows: what is drawn from them can be kept under it."""
    since = window_start(hours, now)
    stamp: list[int] = []
    for rows in (
        GpuSample.objects.filter(gpu__host=host, resolution_s__in=RESOLUTIONS, ts__gte=since),
        EngineSample.objects.filter(host=host, resolution_s__in=RESOLUTIONS, ts__gte=since),
        HostSample.objects.filter(host=host, resolution_s__in=RESOLUTIONS, ts__gte=since),
    ):
        found = rows.aggregate(n=Count("id"), last=Max("id"))
        stamp += [found["n"], found["last"] or 0]
    return tuple(stamp)
