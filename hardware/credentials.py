"""Host credentials: one bearer token per host, for its agent to talk to the panel's agent API.

Only the SHA-256 of a token is stored (a token is 256 random bits, so a fast hash is enough:
nothing to brute-force). `host_token_issue` returns the token once and revokes every earlier
one of the host; `host_token_revoke` revokes them all; `host_for_token` answers which host a
presented token belongs to, or None (unknown, revoked, malformed).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from controlpanel.roles import ADMIN, ensure_role
from core.audit import audit_record

from .models import Host, HostCredential
from .queues import host_queue_name

TOKEN_PREFIX = "cph_"  # noqa: S105 - control panel host: a marker, not a secret
USED_RESOLUTION = timedelta(seconds=60)  # last_used_at is written at most once a minute per token


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _revoke_all(host: Host) -> int:
    return HostCredential.objects.filter(host=host, revoked_at__isnull=True).update(revoked_at=timezone.now())


@transaction.atomic
def host_token_issue(*, name: str, actor: Any) -> tuple[Host, str]:
    """A new token for host `name` (created, not yet probed, when it does not exist), shown once;
    every earlier token of the host is revoked in the same transaction."""
    ensure_role(actor, ADMIN)
    slug = slugify(name)
    if not slug:
        raise ValidationError({"name": "A host needs a name made of letters, digits or dashes."})
    host, created = Host.objects.select_for_update().get_or_create(name=slug, defaults={"queue": host_queue_name(slug)})
    if host.is_demo:
        raise ValidationError({"name": f"{slug} is a demo host: no agent runs it."})
    revoked = _revoke_all(host)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    credential = HostCredential(host=host, prefix=token[:12], digest=_digest(token), created_by=_user(actor))
    credential.full_clean()
    credential.save()
    audit_record(
        action="host.token.issue",
        summary=f"new agent token {credential.prefix}… for {slug}"
        + (f"; {revoked} earlier revoked" if revoked else ""),
        obj=host,
        host=host,
        data={"prefix": credential.prefix, "revoked": revoked, "host_created": created},
        actor=actor,
    )
    return host, token


@transaction.atomic
def host_token_revoke(*, host: Host, actor: Any) -> int:
    """Revoke every token of `host`: its agent is refused from the next request on."""
    ensure_role(actor, ADMIN)
    revoked = _revoke_all(host)
    audit_record(
        action="host.token.revoke",
        summary=f"revoked {revoked} agent token(s) of {host.name}",
        obj=host,
        host=host,
        data={"revoked": revoked},
        actor=actor,
    )
    return revoked


def host_for_token(token: str) -> Host | None:
    """The host whose active credential `token` is, or None."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    credential = (
        HostCredential.objects.select_related("host").filter(digest=_digest(token), revoked_at__isnull=True).first()
    )
    if credential is None:
        return None
    now = timezone.now()
    if credential.last_used_at is None or now - credential.last_used_at > USED_RESOLUTION:
        HostCredential.objects.filter(pk=credential.pk).update(last_used_at=now)
    return credential.host


def host_credentials(*, host: Host) -> list[HostCredential]:
    return list(HostCredential.objects.filter(host=host))


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "pk", None) else None
