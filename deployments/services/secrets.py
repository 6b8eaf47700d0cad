"""Engine API keys and hub tokens: per host, encrypted at rest, referenced by name.

Rotating a secret changes only this row; revisions keep naming it, so history, diffs and
exports never hold a value.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, ensure_role
from core.audit import audit_record
from deployments.models import Secret
from hardware.models import Host


def _fernet() -> Fernet:
    key = getattr(settings, "SECRETS_ENCRYPTION_KEY", "") or settings.SECRET_KEY
    digest = hashlib.sha256(f"controlpanel-secrets:{key}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


@transaction.atomic
def secret_set(*, host: Host, name: str, value: str, actor: Any) -> Secret:
    ensure_role(actor, ADMIN)
    if not value:
        raise ValidationError({"value": "A secret needs a value."})
    ciphertext = _fernet().encrypt(value.encode())
    secret = Secret.objects.filter(host=host, name=name).first()
    if secret is None:
        secret = Secret(host=host, name=name, ciphertext=ciphertext)
        secret.full_clean()
        secret.save()
        action = "secret.create"
    else:
        Secret.objects.filter(pk=secret.pk).update(ciphertext=ciphertext, rotated_at=timezone.now())
        action = "secret.rotate"
    audit_record(action=action, summary=f"{action.split('.')[1]} secret {name}", obj=secret, host=host, actor=actor)
    return secret


def secret_reveal(*, host: Host, name: str) -> str:
    """The plain value, for the host agent building a launch. Never render or log it."""
    secret = Secret.objects.get(host=host, name=name)
    try:
        return _fernet().decrypt(bytes(secret.ciphertext)).decode()
    except InvalidToken as exc:
        raise ValidationError(f"Secret {name} cannot be decrypted with this installation's key.") from exc
