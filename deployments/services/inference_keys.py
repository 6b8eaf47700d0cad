"""Inference keys: who may call the hosts' front doors, and for which models or aliases.

A key is `cpk_` + 256 random bits, shown once when it is made; the panel keeps its SHA-256 and
a short prefix to tell keys apart (hostagent.frontdoor.keys explains why a fast digest is
enough). Every host's front door gets the unrevoked keys' digests; with none, doors are open.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, ensure_role
from core.audit import audit_record, audited_save
from deployments.models import InferenceKey

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

KEY_PREFIX = "cpk_"
SHOWN_PREFIX = 12  # characters of the key kept to tell keys apart ("cpk_" + 8)
KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MODEL_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")
MAX_MODELS = 100


def key_models(value: str | list[str] | None) -> list[str] | None:
    """Allowed models from "a,b" or a list; None (every model) when empty."""
    items = value.split(",") if isinstance(value, str) else list(value or [])
    labels = sorted({str(m).strip() for m in items if str(m).strip()})
    if not labels:
        return None
    bad = [m for m in labels if not MODEL_LABEL.match(m)]
    if bad or len(labels) > MAX_MODELS:
        raise ValidationError({"models": f"Models are names or aliases (at most {MAX_MODELS}): {', '.join(bad)}"})
    return labels


@transaction.atomic
def key_create(
    *, name: str, models: str | list[str] | None = None, actor: AbstractUser | None
) -> tuple[InferenceKey, str]:
    """A new key and its secret (the only time the secret is seen)."""
    ensure_role(actor, ADMIN)
    name = (name or "").strip()
    if not KEY_NAME.match(name):
        raise ValidationError({"name": "A key's name is 1 to 63 lower-case letters, digits, '_' or '-'."})
    if InferenceKey.objects.filter(name=name).exists():
        raise ValidationError({"name": f"A key named {name} exists already (revoked keys keep their name)."})
    allowed = key_models(models)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = InferenceKey(
        name=name,
        sha256=hashlib.sha256(secret.encode()).hexdigest(),
        prefix=secret[:SHOWN_PREFIX],
        allowed_models=allowed,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    audited_save(
        key,
        action="key.create",
        summary=f"inference key {name} ({key.prefix}…) for " + (", ".join(allowed) if allowed else "every model"),
        data={"models": allowed},
        actor=actor,
    )
    return key, secret


@transaction.atomic
def key_models_set(*, key: InferenceKey, models: str | list[str] | None, actor: AbstractUser | None) -> InferenceKey:
    ensure_role(actor, ADMIN)
    allowed = key_models(models)
    before, key.allowed_models = key.allowed_models, allowed
    key.save(update_fields=["allowed_models"])
    audit_record(
        action="key.models",
        summary=f"inference key {key.name} now for " + (", ".join(allowed) if allowed else "every model"),
        obj=key,
        data={"before": before, "after": allowed},
        actor=actor,
    )
    return key


@transaction.atomic
def key_revoke(*, key: InferenceKey, actor: AbstractUser | None) -> InferenceKey:
    ensure_role(actor, ADMIN)
    if key.revoked_at is not None:
        raise ValidationError(f"The key {key.name} is revoked already.")
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit_record(action="key.revoke", summary=f"inference key {key.name} revoked", obj=key, actor=actor)
    return key


def key_table() -> dict[str, Any]:
    """What every front door gets: hostagent.frontdoor.keys.KeyTable's shape, unrevoked keys only."""
    live = InferenceKey.objects.filter(revoked_at__isnull=True).order_by("name")
    return {"keys": [{"name": k.name, "sha256": k.sha256, "models": k.allowed_models} for k in live]}
