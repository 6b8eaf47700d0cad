"""Inference keys: who may call the hosts' front doors, and for which models or aliases.

A key is `cpk_` + 256 random bits, shown once when it is made; the panel keeps its SHA-256 and
a short prefix to tell keys apart (hostagent.frontdoor.keys explains why a fast digest is
enough). Every host's front door and the lab router get the unrevoked keys' digests and the
lab's door mode:

- `open` on a fresh install: a request with no key is let in;
- `keys required` from the first key made on: a request needs a live key, so with every key
  revoked every request is refused (401), never let in.

Only an admin changes the mode (`door_mode_set`); each change, the first key's included, is in
the audit log.
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
from deployments.choices import DoorMode
from deployments.models import DoorPolicy, InferenceKey

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
    if not DoorPolicy.objects.exists():  # a fresh install's first key: keys are required from now on
        _mode_save(DoorMode.KEYS_REQUIRED, actor=actor, why=f"the first key, {name}, was made")
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


def door_mode() -> DoorMode:
    """The lab's door mode: open on a fresh install (no row yet)."""
    mode = DoorPolicy.objects.values_list("mode", flat=True).first()
    return DoorMode(mode) if mode else DoorMode.OPEN


def keys_required() -> bool:
    """Clients need an inference key (what client exports through a door or the router say)."""
    return door_mode() == DoorMode.KEYS_REQUIRED


def _mode_save(mode: DoorMode, *, actor: AbstractUser | None, why: str) -> None:
    before = door_mode()
    policy, _ = DoorPolicy.objects.select_for_update().get_or_create(pk=1, defaults={"mode": mode})
    policy.mode, policy.set_at = mode, timezone.now()
    policy.set_by = actor if getattr(actor, "pk", None) else None
    audited_save(
        policy,
        action="keys.mode",
        summary=f"front doors and the lab router: {mode.label.lower()} ({why})",
        data={"before": str(before), "after": str(mode)},
        actor=actor,
    )


@transaction.atomic
def door_mode_set(*, mode: str, actor: AbstractUser | None) -> DoorMode:
    """Open the doors to requests with no key, or close them to all but live keys (admins only)."""
    ensure_role(actor, ADMIN)
    if mode not in DoorMode.values:
        raise ValidationError({"mode": f"The door mode is one of {', '.join(DoorMode.values)}."})
    chosen = DoorMode(mode)
    if door_mode() == chosen:
        raise ValidationError({"mode": f"The door mode is {chosen.label.lower()} already."})
    _mode_save(chosen, actor=actor, why="set by an admin")
    return chosen


def key_table() -> dict[str, Any]:
    """What every front door and the lab router get: hostagent.frontdoor.keys.KeyTable's shape,
    the door mode and the unrevoked keys."""
    live = InferenceKey.objects.filter(revoked_at__isnull=True).order_by("name")
    keys = [{"name": k.name, "sha256": k.sha256, "models": k.allowed_models} for k in live]
    return {"mode": str(door_mode()), "keys": keys}
