"""Services for personal API tokens: create (the token is returned once), revoke, authenticate.

A token is `cpat_` + 40 random URL-safe characters; the database keeps its SHA-256 only, so a
copy of the database gives no working token. Creating and revoking are audit events."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, VIEWER, ensure_role, has_role, user_role
from core.audit import audit_record

from .models import ApiToken

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

PREFIX = "cpat_"
MAX_ACTIVE_PER_USER = 20
LAST_USED_RESOLUTION = timedelta(minutes=1)  # write last_used_at at most once a minute per token


@dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str  # the whole token: shown once, never stored


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def token_create(*, user: AbstractUser, name: str, actor: AbstractUser | None) -> NewToken:
    """A new token for `user` (yourself, or anyone if you are an admin). It acts with the user's
    role at the time of each request, so a role taken away also takes the token's rights."""
    ensure_role(actor, VIEWER)
    if actor is not None and actor.pk != user.pk and not has_role(actor, ADMIN):
        raise PermissionDenied("Only an admin may create a token for another user.")
    if user_role(user) is None:
        raise ValidationError({"user": f"{user.username} has no role: a token would have no rights."})
    name = (name or "").strip() or "token"
    if len(name) > 80 or not name.isprintable():
        raise ValidationError({"name": "A token name is at most 80 printable characters."})
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_PER_USER:
        raise ValidationError({"name": f"{user.username} has {MAX_ACTIVE_PER_USER} active tokens: revoke one first."})
    secret = PREFIX + secrets.token_urlsafe(30)
    token = ApiToken.objects.create(user=user, name=name, prefix=secret[: len(PREFIX) + 6], digest=_digest(secret))
    audit_record(
        action="api_token.create",
        summary=f"API token '{name}' ({token.prefix}…) created for {user.username}",
        obj=token,
        data={"user": user.username, "name": name, "prefix": token.prefix},
        actor=actor,
    )
    return NewToken(token=token, secret=secret)


@transaction.atomic
def token_revoke(*, token: ApiToken, actor: AbstractUser | None) -> ApiToken:
    """Revoke a token at once (its owner, or an admin). Revoking twice changes nothing."""
    ensure_role(actor, VIEWER)
    if actor is not None and actor.pk != token.user_id and not has_role(actor, ADMIN):
        raise PermissionDenied("Only the token's owner or an admin may revoke it.")
    token = ApiToken.objects.select_for_update().get(pk=token.pk)
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(
            action="api_token.revoke",
            summary=f"API token '{token.name}' ({token.prefix}…) of {token.user.username} revoked",
            obj=token,
            data={"user": token.user.username, "prefix": token.prefix},
            actor=actor,
        )
    return token


def tokens_revoke_for_user(*, user: AbstractUser, reason: str) -> int:
    """Revoke every active token of `user` because its account changed (password, deactivation,
    role): whoever held the old password may have made them, and a token made under one role
    does not carry over to another. Returns how many were revoked; an audit event when any were.
    Called from the account signals (api.signals), so every path that changes an account counts:
    the People page, the password form, `manage.py changepassword`, the admin site."""
    active = ApiToken.objects.filter(user_id=user.pk, revoked_at__isnull=True)
    prefixes = list(active.values_list("prefix", flat=True))
    if not prefixes:
        return 0
    count = active.update(revoked_at=timezone.now(), revoked_reason=reason[:80])
    audit_record(
        action="api_token.revoke",
        summary=f"{count} API token{'s' if count != 1 else ''} of {user.username} revoked: {reason}",
        obj=user,
        data={"user": user.username, "prefixes": prefixes, "reason": reason},
        actor=None,
    )
    return count


def token_authenticate(secret: str) -> Any:
    """The active user behind an active token, or None."""
    if not secret.startswith(PREFIX) or len(secret) > 200:
        return None
    token = ApiToken.objects.select_related("user").filter(digest=_digest(secret), revoked_at__isnull=True).first()
    if token is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
