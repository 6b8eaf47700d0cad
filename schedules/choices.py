from django.db import models


class ChangeKind(models.TextChoices):
    """What a scheduled change does; the app that owns each kind registers it (schedules.kinds)."""

    SWITCH = "switch", "Switch"
    ALIAS = "alias", "Alias move"
    ROLLOUT = "rollout", "Rollout across hosts"  # kept on its canary host's row


class ChangeState(models.TextChoices):
    PENDING = "pending", "Pending"  # waiting for its time (or retrying while the host is busy)
    RAN = "ran", "Ran"  # went through its service: the operation it queued, or the change it made
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
