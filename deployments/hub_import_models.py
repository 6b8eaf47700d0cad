"""An import from a model hub, run by the panel's worker (deployments.services.hub_imports), never
in a web request: a hub that answers slowly holds a worker's task, not a web worker. Imported by
`deployments.models`."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from core.models import WorkRecord

from .choices import ACTIVE_STATES, OperationState


class HubImport(WorkRecord):
    """One import by repository id: what was asked (the token by its HOST/NAME reference, never
    a value), where it stands, and what came of it (the new catalog entry, or why not)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    repo_id = models.CharField(max_length=300)
    revision = models.CharField(max_length=200, blank=True)
    gguf_file = models.CharField(max_length=300, blank=True)
    name = models.CharField(max_length=200, blank=True)
    token_secret = models.CharField(max_length=300, blank=True, help_text="HOST/NAME of a hub token; never a value.")
    state = models.CharField(max_length=12, choices=OperationState.choices, default=OperationState.QUEUED)
    stage = models.CharField(max_length=120, blank=True)
    # Why it failed, by the import form's field (repo_id, revision, file, token, name): messages.
    errors = models.JSONField(default=dict, blank=True)
    variant = models.ForeignKey(
        "deployments.ModelVariant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    warning = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"hub import of {self.repo_id} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def error_lines(self) -> list[str]:
        """Every message of `errors`, each once, in order."""
        lines: list[str] = []
        for messages in (self.errors or {}).values():
            for line in messages if isinstance(messages, list) else [messages]:
                if str(line) not in lines:
                    lines.append(str(line))
        return lines
