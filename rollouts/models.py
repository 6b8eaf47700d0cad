"""A rollout: one change applied to a group of hosts (a tag) in waves, and each host's part in it.

The waves' policy is pure (serving/rollouts.py); these rows are what the panel recorded of it.
Two rollouts never touch one host at once: a host's row is `claimed` while its rollout is open,
and a partial unique constraint allows one claim per host.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import WorkRecord
from hardware.models import ApprovedChange
from serving import rollouts as policy


class Rollout(WorkRecord, ApprovedChange):
    class Kind(models.TextChoices):
        REVISION = "revision", "New revision (derived on each host) and a switch to it"
        ALIAS = "alias", "Alias move (to the revision with a tag on each host)"

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        PAUSED = "paused", "Paused"
        ROLLING_BACK = "rolling_back", "Rolling back the failed wave"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Stopped by a failure"
        CANCELLED = "cancelled", "Cancelled"

    OPEN = (State.RUNNING, State.PAUSED, State.ROLLING_BACK)

    group = models.SlugField(max_length=40, help_text="The host tag it covers.")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    # REVISION: {"set": {knob: value}, "set_env": {...}, "model": name or None, "message": "..."}
    # ALIAS: {"alias": name, "tag": revision tag}
    change = models.JSONField(default=dict)
    batch_size = models.PositiveSmallIntegerField(default=1)
    # The benchmark gate each wave's switch carries (switch_request's `gate`), when one is set.
    gate = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=14, choices=State.choices, default=State.RUNNING)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # change_request, approved_by (ApprovedChange): every wave's switch (and roll-back) carries them.
    # created_at, finished_at (WorkRecord), newest first.

    def __str__(self) -> str:
        return f"rollout {self.pk} of {self.group}"

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN

    def describe_change(self) -> str:
        change = self.change if isinstance(self.change, dict) else {}
        if self.kind == self.Kind.ALIAS:
            return f"alias {change.get('alias', '?')} to the revision tagged {change.get('tag', '?')}"
        parts = [f"{k}={v}" for k, v in sorted((change.get("set") or {}).items())]
        parts += [f"env {k}={v}" for k, v in sorted((change.get("set_env") or {}).items())]
        if change.get("model"):
            parts.append(f"model {change['model']}")
        return ", ".join(parts) or "(no change)"


class RolloutHost(models.Model):
    class State(models.TextChoices):  # serving.rollouts' host states, in words
        PENDING = policy.PENDING, "Untouched"
        SWITCHING = policy.SWITCHING, "Switching"
        DONE = policy.DONE, "Done"
        FAILED = policy.FAILED, "Failed"
        ROLLING_BACK = policy.ROLLING_BACK, "Rolling back"
        ROLLED_BACK = policy.ROLLED_BACK, "Rolled back"
        ROLLBACK_FAILED = policy.ROLLBACK_FAILED, "Rollback failed"

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="hosts")
    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="rollout_parts")
    wave = models.PositiveSmallIntegerField()  # 0: the canary
    state = models.CharField(max_length=16, choices=State.choices, default=policy.PENDING)
    claimed = models.BooleanField(default=True)  # while the rollout is open: no other rollout may take the host
    # What the host served before its wave (a revision), and what the change made (the new revision).
    previous = models.ForeignKey(
        "deployments.DeploymentRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    target = models.ForeignKey(
        "deployments.DeploymentRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    operation = models.ForeignKey(
        "deployments.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="rollout_parts"
    )
    message = models.CharField(max_length=500, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["wave", "host__name"]
        constraints = [
            models.UniqueConstraint(fields=["rollout", "host"], name="rollouthost_unique_per_rollout"),
            models.UniqueConstraint(fields=["host"], condition=Q(claimed=True), name="rollouthost_one_open_per_host"),
        ]

    def __str__(self) -> str:
        return f"{self.host_id} in rollout {self.rollout_id}: {self.state}"
