"""Hosts, their GPUs, the GPU catalog, telemetry samples (GPUs, engines, CPU and memory) and host
credentials. Nothing here knows of revisions or operations: what a host serves is
`deployments.Deployment`."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.models import WrittenOnce

from .queues import host_queue_name


class GpuType(models.Model):
    """A catalog GPU model (what people buy), used to declare and plan hosts."""

    name = models.CharField(max_length=100, unique=True)  # as NVML names it, e.g. "NVIDIA GeForce RTX 3090"
    short_name = models.CharField(max_length=40, unique=True)  # e.g. "RTX 3090"
    memory_bytes = models.BigIntegerField()
    compute_capability = models.CharField(max_length=8)  # "8.6"
    architecture = models.CharField(max_length=40, blank=True)  # "Ampere"
    is_geforce = models.BooleanField(default=False)
    pcie_p2p = models.BooleanField(null=True, help_text="Whether peer-to-peer over PCIe works.")
    nvlink = models.BooleanField(null=True, help_text="Whether NVLink is available between cards.")
    tdp_w = models.PositiveIntegerField(null=True, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["memory_bytes", "short_name"]

    def __str__(self) -> str:
        return self.short_name


def online_at(last_heartbeat: datetime | None, now: datetime) -> bool:
    """Whether a host whose agent last reported at `last_heartbeat` counts as online at `now`."""
    return last_heartbeat is not None and now - last_heartbeat < timedelta(seconds=settings.HOST_OFFLINE_AFTER_S)


class Host(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    address = models.CharField(max_length=255, default="127.0.0.1", help_text="Where the panel reaches engines.")
    queue = models.CharField(max_length=80, unique=True)
    cpu_model = models.CharField(max_length=200, blank=True)
    cpu_cores = models.PositiveIntegerField(null=True, blank=True)
    ram_bytes = models.BigIntegerField(null=True, blank=True)
    os = models.CharField(max_length=200, blank=True)
    kernel = models.CharField(max_length=100, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    cuda_version = models.CharField(max_length=20, blank=True)
    nvml_available = models.BooleanField(default=False)
    nvml_reason = models.CharField(max_length=300, blank=True)
    declared = models.BooleanField(default=False, help_text="Facts typed in, not yet measured by a probe.")
    probe_mismatches = models.JSONField(default=list, blank=True)
    last_probe_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    engine_state = models.JSONField(default=dict, blank=True)  # as last reported by the host itself
    engine_metrics = models.JSONField(default=dict, blank=True)
    # Engines the panel installed here: {engine: {version: {"path": ..., "installed_at": ...}}}
    engine_installs = models.JSONField(default=dict, blank=True)
    # Where engines on this host may open files: reported by its agent (CONTROLPANEL_MODEL_DIRS),
    # or declared by an admin. A revision's paths must lie under one of them.
    model_dirs = models.JSONField(default=list, blank=True)
    # Where an install may read a wheelhouse or a llama.cpp checkout: reported by its agent
    # (CONTROLPANEL_INSTALL_DIRS; none unless the host's administrator lists some).
    install_dirs = models.JSONField(default=list, blank=True)
    # Engine builds the host can install in seconds from its pip cache: {"llama.cpp": ["b11434"]},
    # as its agent last reported them (hostagent.pipcache).
    cached_builds = models.JSONField(default=dict, blank=True)
    is_demo = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: object, **kwargs: object) -> None:
        if not self.queue:
            self.queue = host_queue_name(self.name)
        super().save(*args, **kwargs)

    @property
    def is_online(self) -> bool:
        return online_at(self.last_heartbeat, timezone.now())

    @property
    def cpu_only(self) -> bool:
        return not self.declared and not self.nvml_available


class GPU(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80, blank=True)
    name = models.CharField(max_length=100)
    gpu_type = models.ForeignKey(GpuType, null=True, blank=True, on_delete=models.SET_NULL)
    memory_bytes = models.BigIntegerField()
    compute_capability = models.CharField(max_length=8, blank=True)
    pcie_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_width = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_max_gen = models.PositiveSmallIntegerField(null=True, blank=True)
    power_limit_w = models.FloatField(null=True, blank=True)
    nvlink_active_links = models.PositiveSmallIntegerField(null=True, blank=True)
    # {"<peer index>": {"read": "ok", "write": "ok", "nvlink": ..., "atomics": ..., "topology": "hostbridge"}}
    peers = models.JSONField(default=dict, blank=True)
    declared = models.BooleanField(default=False)

    class Meta:
        ordering = ["host", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_index_per_host")]

    def __str__(self) -> str:
        return f"{self.host.name}#{self.index} {self.name}"

    @property
    def pcie_p2p(self) -> bool | None:
        """True when every peer answers P2P read/write OK; None when there are no peers."""
        if not self.peers:
            return self.gpu_type.pcie_p2p if self.gpu_type else None
        peers = self.peers.values() if isinstance(self.peers, dict) else ()
        return all(isinstance(p, dict) and p.get("read") == "ok" and p.get("write") == "ok" for p in peers)


class GpuSample(models.Model):
    """One telemetry sample of one GPU. `resolution` is 0 for raw samples, 60 for rollups."""

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField()
    resolution_s = models.PositiveIntegerField(default=0)
    util_pct = models.FloatField(null=True)
    mem_used_bytes = models.BigIntegerField(null=True)
    power_w = models.FloatField(null=True)
    temp_c = models.FloatField(null=True)
    sm_clock_mhz = models.FloatField(null=True)
    mem_clock_mhz = models.FloatField(null=True)
    energy_mj = models.BigIntegerField(null=True)

    class Meta:
        ordering = ["gpu", "ts"]
        indexes = [models.Index(fields=["gpu", "resolution_s", "ts"], name="gpusample_gpu_res_ts")]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} at {self.ts:%H:%M:%S}"


class EngineSample(models.Model):
    """The engine's own metrics at one moment (what its /metrics said), for "last hour" plots.
    `resolution_s` is 0 for raw samples, 60 for one-minute rollups."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="engine_samples")
    ts = models.DateTimeField()
    resolution_s = models.PositiveIntegerField(default=0)
    requests_running = models.FloatField(null=True)
    requests_waiting = models.FloatField(null=True)
    kv_cache_usage = models.FloatField(null=True)  # 0..1
    prefix_cache_hit_rate = models.FloatField(null=True)
    generation_tokens_total = models.FloatField(null=True)  # a counter
    prompt_tokens_total = models.FloatField(null=True)  # a counter
    spec_acceptance_rate = models.FloatField(null=True)

    class Meta:
        ordering = ["host", "ts"]
        indexes = [models.Index(fields=["host", "resolution_s", "ts"], name="enginesample_host_res_ts")]

    def __str__(self) -> str:
        return f"{self.host_id} engine at {self.ts:%H:%M:%S}"


class HostSample(models.Model):
    """CPU and memory of one host at one moment, as its agent read them from /proc
    (hostagent.probes.host_usage). `resolution_s` is 0 for raw samples, 60 for one-minute rollups."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="usage_samples")
    ts = models.DateTimeField()
    resolution_s = models.PositiveIntegerField(default=0)
    cpu_pct = models.FloatField(null=True)  # busy share of all CPUs since the agent's previous reading
    load_1 = models.FloatField(null=True)
    load_5 = models.FloatField(null=True)
    load_15 = models.FloatField(null=True)
    mem_total_bytes = models.BigIntegerField(null=True)
    mem_available_bytes = models.BigIntegerField(null=True)  # MemAvailable
    swap_total_bytes = models.BigIntegerField(null=True)
    swap_used_bytes = models.BigIntegerField(null=True)

    class Meta:
        ordering = ["host", "ts"]
        indexes = [models.Index(fields=["host", "resolution_s", "ts"], name="hostsample_host_res_ts")]

    def __str__(self) -> str:
        return f"{self.host_id} CPU and memory at {self.ts:%H:%M:%S}"

    @property
    def mem_used_bytes(self) -> int | None:
        return used_memory(self.mem_total_bytes, self.mem_available_bytes)


def used_memory(total: int | None, available: int | None) -> int | None:
    """RAM in use: all of it but what is available without swapping (MemAvailable)."""
    return max(0, total - available) if total is not None and available is not None else None


class HostCredential(models.Model):
    """A host agent's credential: a bearer token issued per host, stored only as its SHA-256.

    The token itself is shown once when an admin issues it (`manage.py host token NAME`);
    issuing a new one revokes the old, and a revoked credential stops working at once.
    What it may do is the host's own business only (the agent API checks that).
    """

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="credentials")
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to tell tokens apart.")
    digest = models.CharField(max_length=64, unique=True)  # sha256 hex of the whole token
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["host", "-created_at"]

    def __str__(self) -> str:
        return f"{self.host.name} credential {self.prefix}…" + (" (revoked)" if self.revoked_at else "")

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class HostTag(models.Model):
    """A host's group (`gpu-a`, `edge`): what a rollout across hosts targets. A host has any
    number of tags; a tag names every host that carries it."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tags")
    name = models.SlugField(max_length=40)

    class Meta:
        ordering = ["name", "host"]
        constraints = [models.UniqueConstraint(fields=["host", "name"], name="hosttag_unique_per_host")]

    def __str__(self) -> str:
        return f"{self.host_id}:{self.name}"


class HostEvent(WrittenOnce, models.Model):
    """What happened on a host that nobody asked for, newest first on its events page: the agent
    found its previous run killed or crashed, the watchdog restarted the engine (or could not),
    the front door refused a serving table or went down, the host went offline. Written by
    `hardware.services.host_event_record` (the reason masked; the host keeps its newest
    HOST_EVENTS_KEPT), never edited; each kind is a notification event too
    (notifications.choices.EventKind), so a rule can watch it."""

    class Kind(models.TextChoices):
        AGENT_RESTARTED = "agent.restarted", "Agent restarted after it was killed or crashed"
        WATCHDOG_RESTARTED = "watchdog.restarted", "Watchdog restarted the engine"
        WATCHDOG_RESTART_FAILED = "watchdog.restart_failed", "Watchdog could not restart the engine"
        WATCHDOG_GAVE_UP = "watchdog.gave_up", "Watchdog gave up"
        TABLE_REFUSED = "door.table_refused", "Front door refused its serving table (kept the previous one)"
        DOOR_DOWN = "door.down", "Front door down"
        DOOR_UP = "door.up", "Front door back up"
        HOST_OFFLINE = "host.offline", "Host went offline"
        HOST_ONLINE = "host.online", "Host came back"

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=40, choices=Kind.choices)
    at = models.DateTimeField(default=timezone.now)
    summary = models.CharField(max_length=300)
    reason = models.TextField(blank=True)  # the host's own words (secrets masked)
    revision = models.CharField(max_length=20, blank=True)  # what served then: "r5"

    edit_refusal = "Host events are history: they are never edited."

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["host", "-at"], name="hostevent_host_at")]

    def __str__(self) -> str:
        return f"{self.host_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"


class ApprovedChange(models.Model):
    """A change that may run under an approved change request (hardware.review): over a host that
    requires review it starts once the request is approved, and carries the request's number and
    its approver (the author stays the actor)."""

    change_request = models.PositiveIntegerField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        abstract = True
