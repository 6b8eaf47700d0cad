"""Notification channels (where to send, encrypted at rest), rules (what to send where) and
the record of every notification sent."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone

from .choices import DeliveryState, EventKind
from .regression import BY_KEY


class Channel(models.Model):
    """An Apprise URL (Slack, Discord, Matrix, ntfy, e-mail, a JSON webhook ...).

    The URL carries the channel's credentials (webhook tokens, passwords), so it is stored
    only encrypted (`url_ciphertext`, Fernet) and never shown again: pages show the service
    and the scheme."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=80, unique=True)
    scheme = models.CharField(max_length=20)  # "json", "slack", "mailto" ...
    service = models.CharField(max_length=60)  # Apprise's name of the service: "JSON", "Slack" ...
    url_ciphertext = models.BinaryField()
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.service})"


class Rule(models.Model):
    """Send these events, of one host or of every host, to one channel."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="rules")
    host = models.ForeignKey(
        "hardware.Host", null=True, blank=True, on_delete=models.CASCADE, related_name="notification_rules"
    )
    events = models.JSONField(default=list)  # EventKind values
    # Benchmark regressions: {metric key: percent worse that counts}, see notifications.regression.
    thresholds = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["channel__name", "created_at"]

    def __str__(self) -> str:
        return f"{', '.join(self.events)} on {self.host.name if self.host else 'every host'} -> {self.channel.name}"

    @property
    def threshold_labels(self) -> list[str]:
        """The benchmark limits as people read them: "TTFT p50 +20 %", "decode tok/s ... -10 %"."""
        limits = self.thresholds if isinstance(self.thresholds, dict) else {}
        out = []
        for key, value in limits.items():
            metric = BY_KEY.get(key)
            if metric is not None and isinstance(value, int | float):
                out.append(f"{metric.label} {'-' if metric.higher_is_better else '+'}{value:g} %")
        return out

    @property
    def event_labels(self) -> list[str]:
        labels = dict(EventKind.choices)
        return [labels.get(e, e) for e in self.events if isinstance(e, str)] if isinstance(self.events, list) else []


class Delivery(models.Model):
    """One notification sent (or tried) to one channel."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    channel = models.ForeignKey(Channel, null=True, on_delete=models.SET_NULL, related_name="deliveries")
    channel_name = models.CharField(max_length=80)  # kept when the channel is deleted
    rule = models.ForeignKey(Rule, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries")
    event = models.CharField(max_length=40, choices=EventKind.choices)
    host = models.ForeignKey("hardware.Host", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    host_name = models.CharField(max_length=63, blank=True)
    title = models.CharField(max_length=250)
    body = models.TextField()
    link = models.URLField(max_length=500, blank=True)
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)  # how long the channel took to answer (or fail)
    attempts = models.PositiveSmallIntegerField(default=0)  # sends tried so far
    # When a RETRY is sent again; while sending, when its worker counts as dead; while pending, when
    # it is queued again (services._deliveries_recover).
    retry_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.event} to {self.channel_name}: {self.state}"


class HostPresence(models.Model):
    """Whether a host was online when the presence check last looked, to notice it change."""

    host = models.OneToOneField("hardware.Host", primary_key=True, on_delete=models.CASCADE, related_name="+")
    online = models.BooleanField()
    changed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.host_id} {'online' if self.online else 'offline'}"
