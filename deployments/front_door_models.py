"""The front door's facts in the panel (docs/front-door.md): which revisions a host serves besides
its active one and how, the aliases clients name, the inference keys, usage, and the front door's
last report. Imported by `deployments.models` (one app, one migration history)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .choices import DoorMode, ServeMode


class ServedRevision(models.Model):
    """A revision of a host that its front door serves, with its mode. The host's active revision
    is always served, pinned, whether it has a row or not; a row for it keeps its mode for when
    a switch makes another revision active."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="served_revisions")
    revision = models.OneToOneField(
        "deployments.DeploymentRevision", on_delete=models.CASCADE, related_name="serving_entry"
    )
    mode = models.CharField(max_length=12, choices=ServeMode.choices, default=ServeMode.ON_DEMAND)
    idle_ttl_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Unload after this long unused (empty: never).",
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host", "revision__number"]

    def __str__(self) -> str:
        return f"{self.host_id}: revision {self.revision_id} {self.mode}"


class ModelAlias(models.Model):
    """A stable name (`coder`, `fast`) a host's front door answers for one of its served revisions.
    A switch moves the aliases of the revision it replaces to the new one."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="aliases")
    name = models.SlugField(max_length=63)
    revision = models.ForeignKey("deployments.DeploymentRevision", on_delete=models.CASCADE, related_name="aliases")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host", "name"]
        constraints = [models.UniqueConstraint(fields=["host", "name"], name="alias_unique_name_per_host")]

    def __str__(self) -> str:
        return f"{self.host_id}/{self.name} -> {self.revision_id}"


class InferenceKey(models.Model):
    """A key for people or applications to call the front doors; only its SHA-256 is kept."""

    name = models.SlugField(max_length=63, unique=True)
    sha256 = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)  # shown to tell keys apart: "cpk_AbCd1234"
    allowed_models = models.JSONField(null=True, blank=True)  # names or aliases it may use; null: all
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class DoorPolicy(models.Model):
    """The lab's door mode, one row (services.inference_keys.door_mode). No row: a fresh install,
    open; the first key made sets keys required; then only an admin changes it. Revoking keys never
    does: with keys required and no live key, every request is refused."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    mode = models.CharField(max_length=16, choices=DoorMode.choices, default=DoorMode.KEYS_REQUIRED)
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    set_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(id=1), name="door_policy_one_row")]

    def __str__(self) -> str:
        return f"door mode {self.mode}"


class UsageDay(models.Model):
    """Running totals of one (host, UTC day, key, model) as the host's front door reported them."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="usage_days")
    day = models.DateField()
    key = models.CharField(max_length=63, blank=True)  # the key's name; "" while the door is open
    model = models.CharField(max_length=200)  # the served model's name (`<served>-r<number>`)
    revision = models.ForeignKey(
        "deployments.DeploymentRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-day", "host", "key", "model"]
        constraints = [
            models.UniqueConstraint(fields=["host", "day", "key", "model"], name="usage_once_per_host_day_key_model")
        ]
        indexes = [models.Index(fields=["day"], name="usage_day")]

    def __str__(self) -> str:
        return f"{self.host_id} {self.day} {self.key or '(open)'} {self.model}"


class FrontDoor(models.Model):
    """A host's front door: the bounds the panel wants, and what it last reported."""

    host = models.OneToOneField("hardware.Host", primary_key=True, on_delete=models.CASCADE, related_name="front_door")
    max_waiting = models.PositiveIntegerField(default=256, validators=[MaxValueValidator(100_000)])
    max_wait_s = models.FloatField(default=300.0, validators=[MinValueValidator(0.0), MaxValueValidator(86_400.0)])
    drain_timeout_s = models.FloatField(default=120.0, validators=[MinValueValidator(0.0), MaxValueValidator(86_400.0)])
    reported_version = models.CharField(max_length=64, blank=True)
    bind = models.CharField(max_length=100, blank=True)
    state = models.JSONField(default=list, blank=True)  # FrontDoor.state() rows of the last report
    # What the dashboard's card shows of the last report (services.front_door.door_card): counts by
    # phase, waiting, planned bytes of the loaded set, the alias table. Kept apart from `state` so
    # the card's fingerprint moves only when these do, not with every report's idle seconds.
    card = models.JSONField(default=dict, blank=True)
    reported_at = models.DateTimeField(null=True, blank=True)
    # The panel's table the door refused (it keeps serving its previous one), as its last report
    # said: the refused version, why, and since when; empty once it serves the panel's table.
    refused_version = models.CharField(max_length=64, blank=True)
    refused_reason = models.CharField(max_length=500, blank=True)
    refused_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"front door of {self.host_id}"
