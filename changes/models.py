"""Protected hosts and change requests (docs/change-requests.md).

`HostReview` is the admin's setting that a host requires review; it lives here, keyed to the
host, so `hardware` keeps no column for it. A `ChangeRequest` is a change (a `kind` and its JSON
`params`) proposed by its author on one host, with the host's state when it was proposed (`base`)
and what an approval of it covers (`bound`: the exact hosts it reaches and the revision each gets):
when either differs now the request is stale and needs its author's re-confirmation.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from .choices import PENDING_STATES, ChangeKind, ChangeState, Verdict


class HostReview(models.Model):
    """Whether changes to a host need another person's approval (absent: they do not)."""

    host = models.OneToOneField("hardware.Host", primary_key=True, on_delete=models.CASCADE, related_name="review")
    required = models.BooleanField(default=False)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.host_id}: review {'required' if self.required else 'not required'}"


class ChangeRequest(models.Model):
    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="change_requests")
    kind = models.CharField(max_length=20, choices=ChangeKind.choices)
    params = models.JSONField(default=dict)  # what the kind's service gets (changes.kinds)
    summary = models.CharField(max_length=300)
    state = models.CharField(max_length=20, choices=ChangeState.choices, default=ChangeState.OPEN)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="change_requests"
    )
    # The host's state (active revision, aliases, serving set) when proposed or last re-confirmed.
    base = models.JSONField(default=dict)
    based_at = models.DateTimeField(default=timezone.now)
    # What an approval of it binds, resolved with `base` (changes.binding): the request's digest and
    # the exact hosts it reaches, each with its protection and the revision it gets.
    bound = models.JSONField(default=dict)
    # Why an approved request did not run when due (state STALE): what differed then.
    stale_reason = models.TextField(blank=True, default="")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    operation = models.ForeignKey(
        "deployments.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # What the approval made instead of an operation: the rollout it started (kind rollout), or the
    # scheduled change that runs it later (a request carrying a time: params["when"]).
    rollout = models.ForeignKey("rollouts.Rollout", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    scheduled = models.ForeignKey(
        "schedules.ScheduledChange", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["host", "state"], name="change_host_state")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.summary} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("changes:detail", args=[self.pk])

    @property
    def is_pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def when(self) -> dict[str, Any]:
        """When it runs once approved: {"at": ISO time} or {"window": True}; {} for at once."""
        params = self.params if isinstance(self.params, dict) else {}
        when = params.get("when")
        return when if isinstance(when, dict) else {}


class ChangeComment(models.Model):
    """One entry of a request's conversation, never edited."""

    request = models.ForeignKey(ChangeRequest, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    verdict = models.CharField(max_length=20, choices=Verdict.choices, default=Verdict.COMMENT)
    body = models.TextField(blank=True, max_length=5000)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.verdict} on #{self.request_id}"
