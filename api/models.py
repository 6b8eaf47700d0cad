"""Personal API tokens: a token acts with its user's role. Only a hash is stored; the token is
shown once, when it is created."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, help_text="The token's first characters, to tell tokens apart.")
    digest = models.CharField(max_length=64, unique=True)  # sha256 hex of the whole token
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Why: "" when its owner or an admin revoked it; else what the account went through.
    revoked_reason = models.CharField(max_length=80, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None
