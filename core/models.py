"""The audit trail: one row per state-changing action, never edited.

The table is still `deployments_auditevent` (the model moved here from `deployments` with
`SeparateDatabaseAndState`, no data copied). `host` names the host an event concerns by a lazy
reference to `hardware.Host`, not an import: the audit page filters by host, and an event
outlives its host (SET_NULL). It is the one place `core` names a model of an app above it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from .errors import ImmutableError


class WrittenOnce:
    """A model mixin for rows that are history: saved once, then never edited (ImmutableError,
    saying `edit_refusal`)."""

    edit_refusal = "This row is history: it is never edited."

    def save(self, *args: object, **kwargs: object) -> None:
        if not self._state.adding:
            raise ImmutableError(self.edit_refusal)
        super().save(*args, **kwargs)


class WorkRecord(models.Model):
    """The row of a piece of work the panel follows (an operation, a benchmark run, a gate, a
    rollout, a tuning run or trial, a hub import): when it was asked for and when it ended (None
    while it goes on), listed newest first unless the model orders its rows otherwise."""

    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]


class AuditEvent(WrittenOnce, models.Model):
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=60)  # "revision.create", "switch.request", ...
    object_type = models.CharField(max_length=60, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    host = models.ForeignKey("hardware.Host", null=True, blank=True, on_delete=models.SET_NULL)
    summary = models.CharField(max_length=300, blank=True)
    data = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=20, default="web")  # web, api, cli, agent, system
    remote_addr = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        db_table = "deployments_auditevent"
        ordering = ["-created_at"]

    edit_refusal = "Audit events are never edited."

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.action}: {self.summary}"
