"""Host credentials: one bearer token per host, for its agent to talk to the panel's agent API.

Only the SHA-256 of a token is stored (a token is 256 random bits, so a fast hash is enough:
nothing to brute-force). `host_token_issue` returns the token once and revokes every earlier
one of the host; `host_token_revoke` revokes them all; `host_for_token` answers which host a
presented token belongs to, or None (unknown, revoked, malformed).

A host's broker credential (`host_broker_user_issue`) is a Redis user that reaches the host's
own queue only (controlpanel.broker): the panel keeps nothing of it; it is shown once, and
issuing it again gives a new password.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from controlpanel.broker import (
    acl_setuser_argv,
    broker_url_for,
    new_broker_password,
    users_acl_line,
    without_credentials,
)
from controlpanel.roles import ADMIN, ensure_role
from core.audit import audit_record, person_of

from .models import Host, HostCredential
from .queues import host_queue_name, host_slug

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

TOKEN_PREFIX = "cph_"  # noqa: S105 - control panel host: a marker, not a secret
USED_RESOLUTION = timedelta(seconds=60)  # last_used_at is written at most once a minute per token


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _revoke_all(host: Host) -> int:
    return HostCredential.objects.filter(host=host, revoked_at__isnull=True).update(revoked_at=timezone.now())


@transaction.atomic
def host_token_issue(*, name: str, actor: AbstractUser | None) -> tuple[Host, str]:
    """A new token for host `name` (created, not yet probed, when it does not exist), shown once;
    every earlier token of the host is revoked in the same transaction."""
    ensure_role(actor, ADMIN)
    slug = host_slug(name)
    host, created = Host.objects.select_for_update().get_or_create(name=slug, defaults={"queue": host_queue_name(slug)})
    if host.is_demo:
        raise ValidationError({"name": f"{slug} is a demo host: no agent runs it."})
    revoked = _revoke_all(host)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    credential = HostCredential(host=host, prefix=token[:12], digest=_digest(token), created_by=person_of(actor))
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
def host_token_revoke(*, host: Host, actor: AbstractUser | None) -> int:
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
    """The host whose active credential `token` is, or None.

    Every agent request asks this, so it is one plain query whose row becomes the Host through
    the backend's own converters (the ORM's compiling of the same join cost more CPU than the
    rest of a telemetry report; bench/bench_ingest.py)."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    sql, fields, converters = _token_query()
    with connection.cursor() as cursor:
        cursor.execute(sql, [_digest(token)])
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for i, expression, functions in converters:
        for convert in functions:
            values[i] = convert(values[i], expression, connection)
    credential_id, used = values[0], values[1]
    now = timezone.now()
    if used is None or now - used > USED_RESOLUTION:
        HostCredential.objects.filter(pk=credential_id).update(last_used_at=now)
    return Host.from_db(connection.alias, fields, values[2:])


@functools.cache
def _token_query() -> tuple[str, list[str], list[tuple[int, Any, list[Any]]]]:
    """The SELECT of a credential's id, its last use and every column of its host; the host's
    field names; and per column, the converters the ORM would apply (SQLite's datetimes)."""
    q = connection.ops.quote_name
    selected = [HostCredential._meta.pk.get_col("c"), HostCredential._meta.get_field("last_used_at").get_col("c")]
    selected += [f.get_col("h") for f in Host._meta.concrete_fields]
    converters = []
    for i, col in enumerate(selected):
        functions = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
        if functions:
            converters.append((i, col, functions))
    columns = ", ".join(f"{q(col.alias)}.{q(col.target.column)}" for col in selected)
    joined = f"{q(HostCredential._meta.db_table)} c JOIN {q(Host._meta.db_table)} h ON h.{q('id')} = c.{q('host_id')}"
    # Names come from the models; the digest is a parameter.
    sql = f"SELECT {columns} FROM {joined} WHERE c.{q('digest')} = %s AND c.{q('revoked_at')} IS NULL"  # noqa: S608
    return sql, [f.attname for f in Host._meta.concrete_fields], converters


@dataclass(frozen=True)
class BrokerUser:
    """A host's Redis user: its users.acl line and ACL SETUSER arguments (the password as its
    SHA-256), and the broker URL the host uses (the only place the password is)."""

    name: str
    acl_line: str
    setuser: list[str]
    url: str


def host_broker_user_issue(*, name: str, broker_url: str, actor: AbstractUser | None) -> tuple[Host, BrokerUser]:
    """A new Redis user for host `name`'s agent with a new password, shown once. `broker_url`
    is the broker as the host reaches it (redis:// or rediss://; its credentials are dropped)."""
    ensure_role(actor, ADMIN)
    host = Host.objects.filter(name=name).first()
    if host is None:
        raise ValidationError({"name": f"No host named {name[:80]!r}: declare it first (`host declare NAME`)."})
    if host.is_demo:
        raise ValidationError({"name": f"{host.name} is a demo host: no agent runs it."})
    password = new_broker_password()
    try:
        user = BrokerUser(
            name=host.queue,
            acl_line=users_acl_line(host.queue, password),
            setuser=acl_setuser_argv(host.queue, password),
            url=broker_url_for(broker_url, host.queue, password),
        )
    except ValueError as exc:
        raise ValidationError({"url": f"{exc} (not {without_credentials(broker_url)[:200]})."}) from None
    audit_record(
        action="host.broker_user.issue",
        summary=f"new broker user {host.queue} for {host.name}",
        obj=host,
        host=host,
        data={"user": host.queue},
        actor=actor,
    )
    return host, user
