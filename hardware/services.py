"""Hosts: declare by hand, record what a probe measured, heartbeat, telemetry."""

from __future__ import annotations

import math
import posixpath
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from controlpanel.roles import ADMIN, OPERATOR, ensure_role
from core.audit import audit_record
from core.limits import MAX_GPUS
from core.secrets_mask import mask_text
from serving.binds import address_refusal, canonical_address, literal_ip, system_resolve

from .models import GPU, EngineSample, GpuSample, GpuType, Host, HostEvent, HostSample, HostTag
from .queues import host_queue_name, host_slug
from .selectors import REPORTED_ADDRESS
from .telemetry_sql import Row, insert_gpu_samples

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

ENGINE_SAMPLE_FIELDS = (
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "generation_tokens_total",
    "prompt_tokens_total",
    "spec_acceptance_rate",
)
# HostSample column <- hostagent.probes.host_usage.HostUsage field
USAGE_FIELDS = {
    "cpu_pct": "cpu_percent",
    "load_1": "load_1",
    "load_5": "load_5",
    "load_15": "load_15",
    "mem_total_bytes": "memory_total_bytes",
    "mem_available_bytes": "memory_available_bytes",
    "swap_total_bytes": "swap_total_bytes",
    "swap_used_bytes": "swap_used_bytes",
}


MAX_GPUS_PER_HOST = MAX_GPUS  # the planner's bound too: one NVLink domain (NVL72) and then some


def clean_model_dirs(dirs: Any, *, field: str = "model_dirs") -> list[str]:
    """Absolute, normalised folder paths (no `..`, no NUL), at most 32 of them (model folders,
    or with field="install_dirs" the folders installs may read from)."""
    what = "An install folder" if field == "install_dirs" else "A model folder"
    if not isinstance(dirs, list | tuple) or len(dirs) > 32:
        raise ValidationError({field: "Folders are a list of at most 32 absolute paths."})
    clean: list[str] = []
    for item in dirs:
        text = str(item).strip() if isinstance(item, str) else ""
        if (
            not text.startswith("/")
            or ".." in text.split("/")
            or "\x00" in text
            or len(text) > 500
            or any(c in text for c in "\n\r")
        ):
            raise ValidationError({field: f"{what} must be an absolute path without '..', not {item!r}."})
        normal = posixpath.normpath(text)
        if normal not in clean:
            clean.append(normal)
    return clean


_BUILD = re.compile(r"^b\d{1,7}$")


def clean_cached_builds(reported: Any) -> dict[str, list[str]]:
    """The llama.cpp builds an agent reports in its pip cache ("b11434"), at most 50; anything
    else it reports is dropped (a host's report is input, not truth)."""
    builds = reported.get("llama.cpp") if isinstance(reported, dict) else None
    if not isinstance(builds, list):
        return {}
    clean = [b for b in builds if isinstance(b, str) and _BUILD.match(b)]
    return {"llama.cpp": list(dict.fromkeys(clean))[:50]} if clean else {}


@transaction.atomic
def host_declare(
    *,
    name: str,
    address: str,
    gpus: list[tuple[GpuType, int]],
    is_demo: bool = False,
    model_dirs: list[str] | None = None,
    actor: AbstractUser | None,
) -> Host:
    """Record a host and its GPUs by hand, before any agent has probed it."""
    ensure_role(actor, ADMIN)
    slug = host_slug(name)
    if Host.objects.filter(name=slug).exists():
        raise ValidationError({"name": f"A host named {slug} already exists."})
    total = 0
    for _gpu_type, count in gpus:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValidationError({"gpus": "A GPU count is a whole number, 0 or more."})
        total += count
    if total > MAX_GPUS_PER_HOST:
        raise ValidationError({"gpus": f"A host holds at most {MAX_GPUS_PER_HOST} GPUs; {total} were declared."})
    host = Host(
        name=slug,
        address=clean_host_address(address) if address and address != "127.0.0.1" else "127.0.0.1",
        queue=host_queue_name(slug),
        declared=True,
        is_demo=is_demo,
        model_dirs=clean_model_dirs(model_dirs or []),
    )
    host.full_clean()
    host.save()
    index = 0
    for gpu_type, count in gpus:
        for _ in range(count):
            GPU.objects.create(
                host=host,
                index=index,
                name=gpu_type.name,
                gpu_type=gpu_type,
                memory_bytes=gpu_type.memory_bytes,
                compute_capability=gpu_type.compute_capability,
                declared=True,
            )
            index += 1
    audit_record(
        action="host.declare",
        summary=f"declared {slug} with {index} GPU(s)",
        obj=host,
        host=host,
        data={"gpus": [[t.short_name, c] for t, c in gpus]},
        actor=actor,
    )
    return host


def _match_gpu_type(name: str) -> GpuType | None:
    exact = GpuType.objects.filter(name=name).first()
    if exact:
        return exact
    for gpu_type in GpuType.objects.all():
        if gpu_type.short_name.lower() in name.lower():
            return gpu_type
    return None


# A host name (RFC 1123 labels; `_` as some lab DNS has it) or an IP literal: nothing else (no port,
# no scheme, no user@) is an address.
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def clean_host_address(address: object) -> str:
    """An address an admin gives a host, as it is stored (serving.binds.canonical_address), or a
    ValidationError: a host name or an IP literal that the one loopback rule accepts
    (serving.binds.address_refusal, names judged by what they resolve to here)."""
    text = address.strip() if isinstance(address, str) else ""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    shaped = bool(text) and (literal_ip(text) is not None or bool(_HOST_NAME.match(text.lower().rstrip("."))))
    if not shaped:
        raise ValidationError(
            {"address": f"An address is a host name (gpu-box-1.lan) or an IP address (10.0.0.7), not {address!r}."}
        )
    why = address_refusal(text, resolve=system_resolve)
    if why:
        raise ValidationError({"address": f"Not an address other machines reach this host at: {why}."})
    return canonical_address(text)


@transaction.atomic
def host_address_set(*, host: Host, address: str, actor: AbstractUser | None) -> Host:
    """Set where the panel, the lab router and client exports reach `host` (admin only). An agent's
    probe only suggests an address (`REPORTED_ADDRESS` in its audit data); it never sets one."""
    ensure_role(actor, ADMIN)
    host = Host.objects.select_for_update().get(pk=host.pk)
    clean = clean_host_address(address)
    before = host.address
    if clean == before:
        return host
    host.address = clean
    host.full_clean()
    host.save(update_fields=["address"])
    audit_record(
        action="host.address",
        summary=f"{host.name}'s address: {before} -> {clean}",
        obj=host,
        host=host,
        data={"before": before, "after": clean},
        actor=actor,
    )
    return host


def host_address_follow_lan(host: Host) -> Host:
    """The panel's own machine's host takes CONTROLPANEL_LAN_ADDRESS as its address when the
    setting is given (its registration and each hello from its agent), audited as
    `host_address_set` is; an admin's own address for it is kept while the setting is unset."""

    lan = settings.LAN_ADDRESS
    if not lan or host.address == lan:
        return host
    return host_address_set(host=host, address=lan, actor=None)


def _probe_mismatches(declared: list[GPU], measured: list[dict[str, Any]]) -> list[str]:
    """How the GPUs an admin declared differ from those the probe found (none declared: none)."""
    mismatches: list[str] = []
    if not declared:
        return mismatches
    if len(declared) != len(measured):
        mismatches.append(f"declared {len(declared)} GPU(s), probe found {len(measured)}")
    for old, new in zip(declared, measured, strict=False):
        if old.name != new["name"]:
            mismatches.append(f"GPU {old.index}: declared {old.name}, probe found {new['name']}")
        elif abs(old.memory_bytes - int(new["memory_total_bytes"])) > 2 * 1024**3:
            mismatches.append(
                f"GPU {old.index}: declared {old.memory_bytes} bytes, probe found {new['memory_total_bytes']}"
            )
    return mismatches


def _record_gpus(host: Host, measured: list[dict[str, Any]], pairs: list[dict[str, Any]]) -> None:
    """The host's GPUs become the measured ones, each with its peers (P2P and topology)."""
    peers: dict[int, dict[str, Any]] = {g["index"]: {} for g in measured}
    for pair in pairs:
        info = {**(pair.get("p2p") or {}), "topology": pair.get("topology")}
        peers.setdefault(pair["a"], {})[str(pair["b"])] = info
        peers.setdefault(pair["b"], {})[str(pair["a"])] = info
    seen = []
    for gpu in measured:
        obj, _ = GPU.objects.update_or_create(
            host=host,
            index=gpu["index"],
            defaults={
                "uuid": gpu.get("uuid") or "",
                "name": gpu["name"],
                "gpu_type": _match_gpu_type(gpu["name"]),
                "memory_bytes": int(gpu["memory_total_bytes"]),
                "compute_capability": ".".join(map(str, gpu.get("compute_capability") or ())),
                "pcie_gen": (gpu.get("pcie") or {}).get("current_generation"),
                "pcie_width": (gpu.get("pcie") or {}).get("current_width"),
                "pcie_max_gen": (gpu.get("pcie") or {}).get("max_generation"),
                "power_limit_w": gpu.get("power_limit_w"),
                "nvlink_active_links": gpu.get("nvlink_active_links"),
                "peers": peers.get(gpu["index"], {}),
                "declared": False,
            },
        )
        seen.append(obj.pk)
    host.gpus.exclude(pk__in=seen).delete()


@transaction.atomic
def host_probe_record(
    *, name: str, facts: dict[str, Any], inventory: dict[str, Any], actor: AbstractUser | None = None
) -> Host:
    """Create or refresh a host from what its agent measured. Measured facts replace declared
    ones; differences from what was declared are kept in `probe_mismatches` and shown.

    `inventory` is `hostagent.probes.nvml.GpuInventory.to_dict()`; `facts` is
    `hostagent.probes.host.HostFacts.to_dict()` (plus an optional "address": a suggestion, kept in
    the audit event and shown to admins, never the host's address, which an admin sets:
    `host_address_set`; a host could otherwise point the lab router at the panel's loopback).
    """
    slug = slugify(name)
    host, created = Host.objects.select_for_update().get_or_create(name=slug, defaults={"queue": host_queue_name(slug)})
    reported = str(facts.get("address") or "").strip()[:255]
    measured = inventory.get("gpus", [])
    mismatches = _probe_mismatches(list(host.gpus.filter(declared=True).order_by("index")), measured)
    for field, key in (
        ("cpu_model", "cpu_model"),
        ("cpu_cores", "cpu_logical_cores"),
        ("ram_bytes", "memory_total_bytes"),
        ("os", "os_name"),
        ("kernel", "kernel"),
    ):
        if facts.get(key) not in (None, ""):
            setattr(host, field, facts[key])
    if "model_dirs" in facts:
        host.model_dirs = clean_model_dirs(facts["model_dirs"])
    # What the agent reports replaces what the panel knew: an agent that reports none allows none.
    host.install_dirs = clean_model_dirs(facts.get("install_dirs") or [], field="install_dirs")
    host.cached_builds = clean_cached_builds(facts.get("cached_builds"))
    host.driver_version = inventory.get("driver_version") or ""
    host.cuda_version = inventory.get("cuda_driver_version") or ""
    host.nvml_available = bool(inventory.get("available"))
    host.nvml_reason = (inventory.get("reason") or "")[:300]
    host.declared = False
    host.probe_mismatches = mismatches
    now = timezone.now()
    host.last_probe_at = now
    host.last_heartbeat = now
    host.save()

    _record_gpus(host, measured, inventory.get("pairs", []))
    audit_record(
        action="host.register" if created else "host.probe",
        summary=f"{slug}: {len(measured)} GPU(s)" + (f"; mismatches: {'; '.join(mismatches)}" if mismatches else ""),
        obj=host,
        host=host,
        data={"mismatches": mismatches, REPORTED_ADDRESS: reported},
        actor=actor,
    )
    return host


def host_heartbeat(
    *,
    host: Host,
    engine_state: dict[str, Any] | None = None,
    engine_metrics: dict[str, Any] | None = None,
    cached_builds: dict[str, Any] | None = None,
) -> None:
    """Mark the host's agent alive, with what its engine and its pip cache hold now; not audited
    (it is not a change anybody made)."""
    now = timezone.now()
    fields: dict[str, Any] = {"last_heartbeat": now}
    if cached_builds is not None:
        fields["cached_builds"] = clean_cached_builds(cached_builds)
    if engine_state is not None:
        fields["engine_state"] = engine_state
    if engine_metrics is not None:
        fields["engine_metrics"] = engine_metrics
    Host.objects.filter(pk=host.pk).update(**fields)
    if engine_metrics:
        EngineSample.objects.create(host_id=host.pk, ts=now, **{k: engine_metrics.get(k) for k in ENGINE_SAMPLE_FIELDS})


MAX_GPU_INDEX = 32767  # GPU.index is a PositiveSmallIntegerField


def telemetry_record(*, host: Host, samples: list[dict[str, Any]]) -> int:
    """Store one report of GPU samples (`GpuSample.to_dict()` from the NVML probe), matched to
    the host's own GPUs by index, in one INSERT (hardware.telemetry_sql); returns how many were
    stored. A value that is not a number raises ValueError or TypeError before anything is written."""
    now = timezone.now()
    rows: list[Row] = []
    for s in samples:
        index = s["index"]
        if not isinstance(index, int) or not 0 <= index <= MAX_GPU_INDEX:
            continue  # no GPU of any host has it
        rows.append(
            (
                index,
                datetime.fromtimestamp(s["timestamp"], tz=UTC) if s.get("timestamp") else now,
                _float(s.get("utilization_gpu_percent")),
                _bigint(s.get("memory_used_bytes")),
                _float(s.get("power_w")),
                _float(s.get("temperature_c")),
                _float(s.get("sm_clock_mhz")),
                _float(s.get("memory_clock_mhz")),
                _bigint(s.get("energy_mj")),
            )
        )
    return insert_gpu_samples(host_id=host.pk, rows=rows)


def usage_record(*, host: Host, samples: list[dict[str, Any]]) -> int:
    """Store one report of CPU and memory samples (`HostUsage.to_dict()` from the host's
    /proc), each at the time it was read, in one INSERT; returns how many were stored. A value
    that is not a number raises ValueError or TypeError before anything is written."""
    now = timezone.now()
    rows = [
        HostSample(
            host_id=host.pk,
            ts=datetime.fromtimestamp(s["timestamp"], tz=UTC) if s.get("timestamp") else now,
            **{
                column: (_bigint if column.endswith("_bytes") else _float)(s.get(field))
                for column, field in USAGE_FIELDS.items()
            },
        )
        for s in samples
    ]
    HostSample.objects.bulk_create(rows)
    return len(rows)


def _float(value: Any) -> float | None:
    """A reading as a float; NaN or infinity is no reading (None)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _bigint(value: Any) -> int | None:
    if value is None:
        return None
    number = int(value)
    if not -(2**63) <= number < 2**63:
        raise ValueError(f"{number} is out of range for a 64-bit counter.")
    return number


@transaction.atomic
def telemetry_rollup(*, now: datetime | None = None) -> dict[str, int]:
    """Retention: raw samples (GPUs', engines', CPU and memory) older than the raw window become
    one-minute averages (kept for the rollup window); then the raw rows and expired rollups are
    deleted."""
    from django.db.models import Avg, Max
    from django.db.models.functions import TruncMinute

    now = now or timezone.now()
    raw_cutoff = now - timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H)
    old = GpuSample.objects.filter(resolution_s=0, ts__lt=raw_cutoff)
    buckets = (
        old.annotate(minute=TruncMinute("ts"))
        .values("gpu_id", "minute")
        .annotate(
            util=Avg("util_pct"),
            mem=Avg("mem_used_bytes"),
            power=Avg("power_w"),
            temp=Avg("temp_c"),
            sm=Avg("sm_clock_mhz"),
            memclk=Avg("mem_clock_mhz"),
            energy=Max("energy_mj"),
        )
    )
    rows = [
        GpuSample(
            gpu_id=b["gpu_id"],
            ts=b["minute"],
            resolution_s=60,
            util_pct=b["util"],
            mem_used_bytes=int(b["mem"]) if b["mem"] is not None else None,
            power_w=b["power"],
            temp_c=b["temp"],
            sm_clock_mhz=b["sm"],
            mem_clock_mhz=b["memclk"],
            energy_mj=b["energy"],
        )
        for b in buckets
    ]
    GpuSample.objects.bulk_create(rows)
    deleted_raw, _ = old.delete()
    expire_before = now - timedelta(days=settings.TELEMETRY_ROLLUP_RETENTION_D)
    expired, _ = GpuSample.objects.filter(resolution_s=60, ts__lt=expire_before).delete()
    # Engine metrics: gauges averaged per minute, counters at their maximum.
    counters = {"generation_tokens_total", "prompt_tokens_total"}
    engine = _per_host_rollup(EngineSample, ENGINE_SAMPLE_FIELDS, counters, raw_cutoff, expire_before)
    # CPU and memory: averaged per minute, the totals at their maximum.
    usage = _per_host_rollup(
        HostSample, tuple(USAGE_FIELDS), {"mem_total_bytes", "swap_total_bytes"}, raw_cutoff, expire_before
    )
    return {
        "rolled_up": len(rows),
        "deleted_raw": deleted_raw,
        "expired": expired,
        **{f"engine_{k}": v for k, v in engine.items()},
        **{f"usage_{k}": v for k, v in usage.items()},
    }


def _per_host_rollup(
    model: type[EngineSample] | type[HostSample],
    fields: tuple[str, ...],
    maxima: set[str],
    raw_cutoff: datetime,
    expire_before: datetime,
) -> dict[str, int]:
    """The retention of a host's samples: raw rows older than `raw_cutoff` become one-minute rows
    (`maxima` at their maximum, the rest averaged; integer columns rounded), then the raw rows
    and the rollups older than `expire_before` are deleted."""
    from django.db.models import Avg, BigIntegerField, Max
    from django.db.models.functions import TruncMinute

    old = model.objects.filter(resolution_s=0, ts__lt=raw_cutoff)
    aggregates = {k: (Max(k) if k in maxima else Avg(k)) for k in fields}
    buckets = old.annotate(minute=TruncMinute("ts")).values("host_id", "minute").annotate(**aggregates)
    whole = {f.name for f in model._meta.concrete_fields if isinstance(f, BigIntegerField)}
    rows = [
        model(
            host_id=b["host_id"],
            ts=b["minute"],
            resolution_s=60,
            **{k: round(b[k]) if k in whole and b[k] is not None else b[k] for k in fields},
        )
        for b in buckets
    ]
    model.objects.bulk_create(rows)
    deleted, _ = old.delete()
    expired, _ = model.objects.filter(resolution_s=60, ts__lt=expire_before).delete()
    return {"rolled_up": len(rows), "deleted_raw": deleted, "expired": expired}


TAG_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
MAX_TAGS = 20


def clean_tags(tags: Any, *, field: str = "tags") -> list[str]:
    """Tags as typed (a list, or words split by commas or spaces): lower case, each checked."""
    items = re.split(r"[\s,]+", tags) if isinstance(tags, str) else tags
    if not isinstance(items, list | tuple):
        raise ValidationError({field: "Tags are a list of names."})
    names: list[str] = []
    for item in items:
        name = item.strip().lower() if isinstance(item, str) else item
        if name == "":
            continue
        if not isinstance(name, str) or not TAG_NAME.match(name):
            shown = str(name)[:50]
            raise ValidationError({field: f"{shown!r}: a tag is 1 to 40 lower-case letters, digits, _ or -."})
        if name not in names:
            names.append(name)
    if len(names) > MAX_TAGS:
        raise ValidationError({field: f"At most {MAX_TAGS} tags on one host."})
    return sorted(names)


def host_tag_names(host: Host) -> list[str]:
    return sorted(host.tags.values_list("name", flat=True))


@transaction.atomic
def host_tags_set(*, host: Host, tags: Any, actor: AbstractUser | None) -> list[str]:
    """Replace the host's tags (its groups) with `tags`; answers the tags it has now."""
    ensure_role(actor, OPERATOR)
    names = clean_tags(tags)
    before = host_tag_names(host)
    if names == before:
        return names
    host.tags.exclude(name__in=names).delete()
    HostTag.objects.bulk_create([HostTag(host=host, name=n) for n in names if n not in before])
    audit_record(
        action="host.tags",
        summary=f"{host.name}: tags {', '.join(names) or '(none)'}",
        obj=host,
        host=host,
        data={"before": before, "after": names},
        actor=actor,
    )
    return names


def hosts_tagged(tag: str) -> list[Host]:
    """The hosts carrying `tag`, by name."""
    return list(Host.objects.filter(tags__name=tag).order_by("name"))


REASON_CHARS = 2000  # of a host event's reason


def host_event_record(*, host: Host, kind: str, summary: str, reason: str = "", revision: str = "") -> HostEvent:
    """One host event (HostEvent.Kind), its summary and reason masked (core.secrets_mask): the
    host's words may quote an engine's command line. The host keeps its newest HOST_EVENTS_KEPT.
    ValidationError for a kind it does not know."""
    event = HostEvent(
        host=host,
        kind=kind,
        summary=mask_text(summary)[:300],
        reason=mask_text(reason or "")[:REASON_CHARS],
        revision=revision[:20],
    )
    event.full_clean()
    event.save()
    # The newest are the last written (as engine logs: a clock that stepped back keeps the new one).
    # One bounded statement: the oldest kept row's key is the cut (a host that piled up events
    # before they were trimmed has them all go at once, never as a list of keys SQLite refuses).
    kept = HostEvent.objects.filter(host=host).order_by("-pk").values_list("pk", flat=True)
    cut = kept[settings.HOST_EVENTS_KEPT - 1 : settings.HOST_EVENTS_KEPT]
    if cut:
        HostEvent.objects.filter(host=host, pk__lt=cut[0]).delete()
    return event
