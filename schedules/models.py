"""Scheduled changes and each host's maintenance window.

A scheduled change is a `kind` (schedules.kinds) with its `params`, for one host, due at `run_at`;
it may start until `run_until` (the end of its maintenance window, or the busy-host patience after
an exact time), then it fails. Beat runs it through the same service as a manual change, as the
person who scheduled it. Only schedules.services writes these rows.
"""

from __future__ import annotations

from datetime import time

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from core.maintenance import Window, WindowError
from hardware.models import ApprovedChange, Host

from .choices import ChangeKind, ChangeState


class MaintenanceWindow(models.Model):
    """When a host may be changed without warning anyone: weekdays, a start and an end in a time
    zone (core.maintenance computes the next opening)."""

    host = models.OneToOneField(Host, on_delete=models.CASCADE, related_name="maintenance_window")
    weekdays = models.JSONField(default=list)  # 0 = Monday .. 6 = Sunday
    start = models.TimeField()
    end = models.TimeField()  # not after start: the window closes the next day
    timezone = models.CharField(max_length=64, default="UTC")
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    def __str__(self) -> str:
        return f"{self.host.name}: {self.window().describe()}"

    def window(self) -> Window:
        days = self.weekdays if isinstance(self.weekdays, list) else []
        return Window(
            weekdays=frozenset(d for d in days if isinstance(d, int)),
            start=self.start if isinstance(self.start, time) else time.fromisoformat(str(self.start)),
            end=self.end if isinstance(self.end, time) else time.fromisoformat(str(self.end)),
            tz=self.timezone,
        )

    def clean(self) -> None:
        try:
            self.window()
        except (WindowError, ValueError) as exc:
            raise ValidationError(str(exc)) from exc


class ScheduledChange(ApprovedChange):
    kind = models.CharField(max_length=20, choices=ChangeKind.choices)
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="scheduled_changes")
    params = models.JSONField(default=dict)  # what the kind needs: {"revision": 5}, {"name": "coder", "revision": 5}
    run_at = models.DateTimeField()
    run_until = models.DateTimeField()  # the latest start: later (the host busy until then, or missed), it fails
    in_window = models.BooleanField(default=False)  # placed in the host's maintenance window
    state = models.CharField(max_length=10, choices=ChangeState.choices, default=ChangeState.PENDING)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who scheduled it, kept when that account is deleted ("" for the panel itself: a command with no user).
    created_by_name = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0)  # tries that found the host busy
    last_error = models.TextField(blank=True, default="")  # the latest busy refusal, while it retries
    operation = models.ForeignKey(
        "deployments.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    outcome = models.TextField(blank=True, default="")  # what it did, or why it failed or was cancelled
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # change_request, approved_by (ApprovedChange): on a host that requires review it is scheduled
    # when its request is approved, and carries them when it runs.

    class Meta:
        indexes = [models.Index(fields=["state", "run_at"], name="scheduled_due")]
        ordering = ["run_at", "pk"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} on {self.host.name} at {self.run_at:%Y-%m-%d %H:%M} UTC"
