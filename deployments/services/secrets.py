"""Engine API keys and hub tokens: per host, encrypted at rest, referenced by name.

Rotating a secret changes only this row; revisions keep naming it, so history, diffs and
exports never hold a value.

Only a secret an admin marked as a hub token (`hub_token`) is ever sent to a hub, by an import
or a download (`hub_token_reveal`); any other name, existing or not, gets one refusal that names
no secret, so an operator can neither send a host's engine API key to a hub nor probe names.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, ensure_role
from core.audit import audit_record
from deployments.models import Secret
from hardware.models import Host

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


def _fernet() -> Fernet:
    key = getattr(settings, "SECRETS_ENCRYPTION_KEY", "") or settings.SECRET_KEY
    digest = hashlib.sha256(f"controlpanel-secrets:{key}".encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


# A refusal's wording (not a password): the same for a missing name and for any other secret.
HUB_REFUSAL = "That is not a hub token of this host: choose a secret an admin marked as a Hugging Face token."


def _hub_note(hub_token: bool) -> str:
    return " (a hub token)" if hub_token else " (not a hub token)"


@transaction.atomic
def secret_set(
    *, host: Host, name: str, value: str, actor: AbstractUser | None, hub_token: bool | None = None
) -> Secret:
    """Create or rotate a secret. `hub_token` marks it as a Hugging Face token (True), unmarks
    it (False) or keeps what it was (None; a new secret is not one)."""
    ensure_role(actor, ADMIN)
    if not value:
        raise ValidationError({"value": "A secret needs a value."})
    ciphertext = _fernet().encrypt(value.encode())
    secret = Secret.objects.select_for_update().filter(host=host, name=name).first()
    if secret is None:
        secret = Secret(host=host, name=name, ciphertext=ciphertext, hub_token=bool(hub_token))
        secret.full_clean()
        secret.save()
        action = "secret.create"
    else:
        marked = secret.hub_token if hub_token is None else hub_token
        Secret.objects.filter(pk=secret.pk).update(ciphertext=ciphertext, rotated_at=timezone.now(), hub_token=marked)
        secret.hub_token = marked
        action = "secret.rotate"
    summary = f"{action.split('.')[1]} secret {name}{_hub_note(secret.hub_token)}"
    audit_record(action=action, summary=summary, obj=secret, host=host, actor=actor)
    return secret


@transaction.atomic
def secret_mark(*, host: Host, name: str, hub_token: bool, actor: AbstractUser | None) -> Secret:
    """Mark (or unmark) an existing secret as a hub token, its value unchanged."""
    ensure_role(actor, ADMIN)
    secret = Secret.objects.select_for_update().filter(host=host, name=name).first()
    if secret is None:
        raise ValidationError({"name": f"{host.name} has no secret named {name[:63]!r}."})
    if secret.hub_token != hub_token:
        Secret.objects.filter(pk=secret.pk).update(hub_token=hub_token)
        secret.hub_token = hub_token
        audit_record(
            action="secret.mark",
            summary=f"mark secret {name}{_hub_note(hub_token)}",
            obj=secret,
            host=host,
            actor=actor,
        )
    return secret


def hub_token_check(*, host: Host | None, name: str) -> None:
    """Refuse (ValidationError on token_secret, one wording) unless `name` is a hub token of `host`."""
    if host is None or not Secret.objects.filter(host=host, name=name, hub_token=True).exists():
        raise ValidationError({"token_secret": HUB_REFUSAL})


def hub_token_reveal(*, host: Host | None, name: str) -> str:
    """The value of a hub token, to send to a hub; any other secret (or none) is refused alike."""
    hub_token_check(host=host, name=name)
    assert host is not None
    return secret_reveal(host=host, name=name)


def secret_reveal(*, host: Host, name: str) -> str:
    """The plain value, for the host agent building a launch. Never render or log it."""
    secret = Secret.objects.get(host=host, name=name)
    try:
        return _fernet().decrypt(bytes(secret.ciphertext)).decode()
    except InvalidToken as exc:
        raise ValidationError(f"Secret {name} cannot be decrypted with this installation's key.") from exc
