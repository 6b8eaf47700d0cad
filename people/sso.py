"""Single sign-on's people: who signs in through the provider, and which role their groups give.

At each sign-in the provider's groups go through `CONTROLPANEL_OIDC_ROLE_MAP`
(controlpanel.roles.role_for_groups) and the person gets that role, with these exceptions:
- a role an admin changed by hand on the People page is kept (`SsoAccount.role_by_hand`) until
  an admin hands it back to the groups (`person_follow_groups`);
- a superuser keeps their role;
- the last active admin keeps the admin role (as on the People page).
Someone whose groups map to no role is refused with a page that says so: a newcomer gets no
account, a known person loses their role (and with it their API tokens, api.signals).

A person is who the ID token's issuer and subject (`iss`, `sub`) say, together: a `sub` is unique
only at its issuer. A sign-in whose subject belongs to an account linked to another issuer is
refused (and audited, `person.sso_refused`): another provider's user with the same `sub` never
gets that account. An account linked before issuers were kept (empty issuer: the configured
provider was unknown when they were filled in) takes the issuer of its next sign-in.

Every change is audited (`person.create`, `person.role`, `person.sso_groups`, `person.sso_issuer`)
in one transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, ROLES, ensure_role, parse_role_map, role_for_groups

from .models import SsoAccount
from .services import _active_admin_ids, _apply_role, _audit, _keeps_an_admin, _role_of

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")
USERNAME_MAX = 150
ISSUER_MAX, SUBJECT_MAX = 500, 255  # SsoAccount's columns


@dataclass(frozen=True)
class SsoClaims:
    """What the panel reads from the provider's claims."""

    issuer: str  # the ID token's `iss`, without a trailing slash
    subject: str
    username: str
    email: str
    groups: tuple[str, ...]


class SsoRefused(Exception):
    """The provider signed the person in, but the panel gives them no access (the page says why)."""

    def __init__(self, message: str, *, groups: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.groups = groups  # the provider's groups when they map to no role


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into nested claims (Keycloak's `realm_access.roles`)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def claims_read(claims: dict[str, Any]) -> SsoClaims:
    raw_groups = _claim(claims, settings.CONTROLPANEL_OIDC_GROUPS_CLAIM)
    if isinstance(raw_groups, str):
        raw_groups = [raw_groups]
    groups = tuple(sorted({g for g in raw_groups or () if isinstance(g, str) and g}))
    email = claims.get("email")
    issuer = claims.get("iss")
    return SsoClaims(
        issuer=issuer_normal(issuer) if isinstance(issuer, str) else "",
        subject=str(claims["sub"]),
        username=str(_claim(claims, settings.CONTROLPANEL_OIDC_USERNAME_CLAIM) or ""),
        email=email if isinstance(email, str) else "",
        groups=groups,
    )


def issuer_normal(issuer: str) -> str:
    """An issuer as accounts keep it: `https://sso.lab/realms/lab/` and `.../lab` are one."""
    return issuer.strip().rstrip("/")


def mapped_role(groups: tuple[str, ...] | list[str]) -> str | None:
    return role_for_groups(groups, parse_role_map(settings.CONTROLPANEL_OIDC_ROLE_MAP))


def _free_username(claims: SsoClaims) -> str:
    """The provider's user name made valid here; `-2`, `-3`... when a local account has it
    (an SSO sign-in never takes over an existing account)."""
    wanted = claims.username or claims.email.partition("@")[0] or f"sso-{claims.subject}"
    base = USERNAME_UNSAFE.sub("", wanted)[: USERNAME_MAX - 8] or "sso-user"
    users = get_user_model().objects
    name, n = base, 1
    while users.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _no_role(claims: SsoClaims) -> SsoRefused:
    provider = settings.CONTROLPANEL_OIDC_PROVIDER_NAME
    return SsoRefused(
        f"{provider} signed you in, but none of your groups there gives a role in this panel. "
        "Ask an admin to add you to one of the groups the panel maps to a role.",
        groups=claims.groups,
    )


def sso_sign_in(*, claims: SsoClaims) -> AbstractUser:
    """The person the provider vouches for, created at their first sign-in, with the role their
    groups map to. Raises SsoRefused (after saving what changed) when they get no access."""
    provider = settings.CONTROLPANEL_OIDC_PROVIDER_NAME
    claims = replace(claims, issuer=issuer_normal(claims.issuer))
    if not claims.issuer or len(claims.issuer) > ISSUER_MAX or not claims.subject or len(claims.subject) > SUBJECT_MAX:
        raise SsoRefused(
            f"{provider} sent an ID token without an issuer and subject (iss, sub) of at most {ISSUER_MAX} and "
            f"{SUBJECT_MAX} characters: the panel cannot tell who you are."
        )
    wanted = mapped_role(claims.groups)
    now = timezone.now()
    refused: SsoRefused | None
    with transaction.atomic():
        admins = _active_admin_ids(lock=True)  # first, as every People change: one lock order
        account = _linked_account(claims)
        if account is None:
            elsewhere = SsoAccount.objects.select_related("user").filter(subject=claims.subject).first()
            if elsewhere is None:
                if wanted is None:
                    raise _no_role(claims)
                return _create(claims, wanted, now)
            refused = _issuer_refused(claims, elsewhere)  # audited: the transaction commits it
        else:
            user = account.user
            if not user.is_active:
                raise SsoRefused(f"Your account {user.username} is deactivated in this panel. Ask an admin.")
            account.provider, account.groups, account.last_sign_in = provider, list(claims.groups), now
            account.save(update_fields=["provider", "groups", "last_sign_in"])
            if claims.email and claims.email != user.email:
                user.email = claims.email
                user.save(update_fields=["email"])
            role = _role_of(user) if account.role_by_hand else _follow_groups(account, admins, wanted, actor=user)
            refused = _no_role(claims) if role is None else None
    if refused is not None:
        raise refused
    return user


def _linked_account(claims: SsoClaims) -> SsoAccount | None:
    """The account of this issuer and subject (locked), or one of this subject linked before
    issuers were kept, which this issuer takes from now on."""
    accounts = SsoAccount.objects.select_for_update().select_related("user")
    account = accounts.filter(issuer=claims.issuer, subject=claims.subject).first()
    if account is None:
        account = accounts.filter(issuer="", subject=claims.subject).first()
        if account is not None:
            account.issuer = claims.issuer
            account.save(update_fields=["issuer"])
            who = account.user.username
            summary = f"{who} is linked to issuer {claims.issuer} (their first sign-in since issuers are kept)"
            _audit(account.user, "sso_issuer", summary, None, {"issuer": claims.issuer})
    return account


def _issuer_refused(claims: SsoClaims, elsewhere: SsoAccount) -> SsoRefused:
    """The refusal of a sign-in whose subject is an account's at another issuer, audited."""
    user = elsewhere.user
    summary = (
        f"refused a sign-in from issuer {claims.issuer} with the subject of {user.username}, "
        f"whose account is linked to issuer {elsewhere.issuer}"
    )
    data: dict[str, object] = {"issuer": claims.issuer, "linked_issuer": elsewhere.issuer, "subject": claims.subject}
    _audit(user, "sso_refused", summary, None, data)
    return SsoRefused(
        f"You signed in at {claims.issuer}, but the panel's account for your subject there is linked to another "
        "identity provider: a sign-in from another issuer never takes it over. Ask an admin."
    )


def _create(claims: SsoClaims, role: str, now: Any) -> AbstractUser:
    provider = settings.CONTROLPANEL_OIDC_PROVIDER_NAME
    username = _free_username(claims)
    user = get_user_model().objects.create_user(username=username, email=claims.email, password=None)
    SsoAccount.objects.create(
        user=user,
        issuer=claims.issuer,
        subject=claims.subject,
        provider=provider,
        groups=list(claims.groups),
        first_sign_in=now,
        last_sign_in=now,
    )
    _apply_role(user, role)
    summary = f"added {username} as {role} at their first sign-in with {provider}"
    data: dict[str, object] = {"role": role, "groups": list(claims.groups), "via": "sso", "issuer": claims.issuer}
    _audit(user, "create", summary, user, data)
    return user


def _follow_groups(
    account: SsoAccount, admins: set[int], wanted: str | None, *, actor: AbstractUser | None
) -> str | None:
    """Give the person the role their groups map to, unless they are a superuser or the last
    active admin; the role they hold afterwards."""
    user = account.user
    before = _role_of(user)
    if before == wanted or user.is_superuser:
        return before
    try:
        _keeps_an_admin(user, admins, still_admin=wanted == ADMIN)
    except ValidationError:
        return before
    if wanted is None:
        user.groups.remove(*Group.objects.filter(name__in=ROLES))
        user._cp_role = None
    else:
        _apply_role(user, wanted)
    provider = account.provider
    summary = f"{user.username}: {before or 'none'} -> {wanted or 'none'} (groups at {provider})"
    data = {"from": before or "none", "to": wanted or "none", "groups": list(account.groups), "via": "sso"}
    _audit(user, "role", summary, actor, data)
    return wanted


def person_follow_groups(*, user: AbstractUser, actor: AbstractUser | None) -> str | None:
    """Hand an SSO person's role back to their groups: the role their groups mapped to at their
    last sign-in applies now, and each sign-in from then on sets it again."""
    ensure_role(actor, ADMIN)
    with transaction.atomic():
        admins = _active_admin_ids(lock=True)
        account = SsoAccount.objects.select_for_update().select_related("user").filter(user=user).first()
        if account is None:
            raise ValidationError(f"{user.username} does not sign in with single sign-on.")
        if account.role_by_hand:
            account.role_by_hand = False
            account.save(update_fields=["role_by_hand"])
            summary = f"{user.username}'s role follows their groups at {account.provider} again"
            _audit(user, "sso_groups", summary, actor, {"groups": list(account.groups)})
        return _follow_groups(account, admins, mapped_role(account.groups), actor=actor)
