"""People services: add a person, change a role, deactivate/reactivate, reset a password, unlock
after a login lockout. Each checks the admin role, validates fully, runs in one transaction and
writes an audit event. Views and commands call these; they never change users themselves.

Two rules hold on every change:
- the panel always keeps at least one active admin (nobody can demote or deactivate the last one,
  themselves included), and nobody deactivates themselves;
- only a superuser changes a superuser (a superuser also holds the Django admin site, so an admin
  by group cannot take one over through a password reset).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, Group
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlpanel.roles import ADMIN, OPERATOR, ROLES, VIEWER, ensure_role
from core.audit import audit_record

from .models import SsoAccount

GENERATED_PASSWORD_BYTES = 15  # 20 URL-safe characters


def generate_password() -> str:
    return secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)


def _users() -> Any:
    return get_user_model().objects


def _admin_q() -> Q:
    return Q(is_superuser=True) | Q(groups__name=ADMIN)


def _active_admin_ids(*, lock: bool) -> set[int]:
    """Ids of the active admins; with `lock`, their rows stay locked until the transaction ends,
    so two admins demoting each other at once cannot both succeed."""
    rows = _users().filter(_admin_q(), is_active=True).order_by("pk")
    if lock:
        rows = rows.select_for_update(of=("self",))
    return set(rows.values_list("pk", flat=True))


def _role_of(user: AbstractUser) -> str | None:
    """The role the person holds (whether or not they are active)."""
    if user.is_superuser:
        return ADMIN
    names = {g.name for g in user.groups.all()}
    return next((r for r in (ADMIN, OPERATOR, VIEWER) if r in names), None)


def _keeps_an_admin(user: AbstractUser, admins: set[int], *, still_admin: bool) -> None:
    if user.pk in admins and not still_admin and not (admins - {user.pk}):
        raise ValidationError(
            f"{user.username} is the last active admin: make someone else an admin first, "
            "or the panel would have nobody who can manage it."
        )


def _check_may_change(actor: AbstractUser | None, user: AbstractUser) -> None:
    ensure_role(actor, ADMIN)
    if user.is_superuser and actor is not None and not actor.is_superuser:
        raise PermissionDenied(f"{user.username} is a superuser: only a superuser can change them.")


def _clean_role(role: str) -> str:
    if role not in ROLES:
        raise ValidationError({"role": f"Choose one of: {', '.join(ROLES)}."})
    return role


def _apply_role(user: AbstractUser, role: str) -> None:
    role_groups = [Group.objects.get_or_create(name=name)[0] for name in ROLES]
    user.groups.remove(*role_groups)
    user.groups.add(next(g for g in role_groups if g.name == role))
    user._cp_role = None  # the cached role in controlpanel.roles


def _clean_new_person(username: str, email: str) -> tuple[str, str]:
    model = get_user_model()
    username = (username or "").strip()
    email = (email or "").strip()
    errors: dict[str, list[str]] = {}
    field = model._meta.get_field("username")
    if not username:
        errors["username"] = ["Give a user name."]
    elif len(username) > field.max_length:
        errors["username"] = [f"At most {field.max_length} characters."]
    else:
        try:
            model.username_validator(username)
        except ValidationError as exc:
            errors["username"] = list(exc.messages)
        else:
            if _users().filter(username__iexact=username).exists():
                errors["username"] = [f"Someone is already called {username} (names ignore case)."]
    if email:
        if len(email) > 254:
            errors["email"] = ["At most 254 characters."]
        else:
            try:
                validate_email(email)
            except ValidationError:
                errors["email"] = ["Enter a valid e-mail address."]
    if errors:
        raise ValidationError(errors)
    return username, email


@dataclass(frozen=True)
class NewPassword:
    """A person and the password generated for them: shown once, never stored in clear."""

    user: AbstractUser
    password: str


def _check_local_passwords() -> None:
    if not settings.CONTROLPANEL_LOCAL_PASSWORDS:
        raise ValidationError(
            "Local passwords are off (CONTROLPANEL_LOCAL_PASSWORDS): people sign in with single sign-on, "
            "and join the panel at their first sign-in."
        )


def person_create(*, username: str, email: str = "", role: str, actor: AbstractUser | None) -> NewPassword:
    ensure_role(actor, ADMIN)
    _check_local_passwords()
    username, email = _clean_new_person(username, email)
    role = _clean_role(role)
    password = generate_password()
    with transaction.atomic():
        user = _users().create_user(username=username, email=email, password=password)
        _apply_role(user, role)
        _audit(user, "create", f"added {username} as {role}", actor, {"role": role, "email": email})
    return NewPassword(user=user, password=password)


def person_set_role(*, user: AbstractUser, role: str, actor: AbstractUser | None) -> AbstractUser:
    _check_may_change(actor, user)
    role = _clean_role(role)
    with transaction.atomic():
        admins = _active_admin_ids(lock=True)  # always first: one lock order for every change
        user = _users().select_for_update().get(pk=user.pk)
        before = _role_of(user) or "none"
        if before == role:
            return user
        _keeps_an_admin(user, admins, still_admin=role == ADMIN)
        if user.is_superuser and role != ADMIN:
            # Superuser means admin; a superuser given a lower role stops being one.
            user.is_superuser = False
            user.is_staff = False
            user.save(update_fields=["is_superuser", "is_staff"])
        _apply_role(user, role)
        # A person who signs in with SSO keeps a role given by hand: their groups stop setting it.
        by_hand = SsoAccount.objects.filter(user=user).update(role_by_hand=True) > 0
        data = {"from": before, "to": role, **({"sso_role_by_hand": True} if by_hand else {})}
        _audit(user, "role", f"{user.username}: {before} -> {role}", actor, data)
    return user


def person_set_active(*, user: AbstractUser, active: bool, actor: AbstractUser | None) -> AbstractUser:
    _check_may_change(actor, user)
    if not active and actor is not None and actor.pk == user.pk:
        raise ValidationError("You cannot deactivate yourself; ask another admin.")
    with transaction.atomic():
        admins = _active_admin_ids(lock=True)
        user = _users().select_for_update().get(pk=user.pk)
        if user.is_active == active:
            return user
        if not active:
            _keeps_an_admin(user, admins, still_admin=False)
        user.is_active = active
        user.save(update_fields=["is_active"])
        verb = "reactivate" if active else "deactivate"
        _audit(user, verb, f"{verb}d {user.username}", actor)
    return user


def person_reset_password(*, user: AbstractUser, actor: AbstractUser | None) -> NewPassword:
    """A new generated password; the old one and every session of the person stop working."""
    _check_may_change(actor, user)
    _check_local_passwords()
    password = generate_password()
    with transaction.atomic():
        user = _users().select_for_update().get(pk=user.pk)
        user.set_password(password)
        user.save(update_fields=["password"])
        unlocked = _reset_lockout(user.username)
        _audit(user, "password_reset", f"reset the password of {user.username}", actor, {"lockouts_cleared": unlocked})
    return NewPassword(user=user, password=password)


def person_unlock(*, user: AbstractUser, actor: AbstractUser | None) -> int:
    """Clear the failed sign-ins recorded for this user name (from every address)."""
    ensure_role(actor, ADMIN)
    with transaction.atomic():
        count = _reset_lockout(user.username)
        where = f"{count} address{'es' if count != 1 else ''}"
        _audit(user, "unlock", f"unlocked {user.username} ({where})", actor, {"attempts_cleared": count})
    return count


def _audit(
    user: AbstractUser, action: str, summary: str, actor: AbstractUser | None, data: dict[str, object] | None = None
) -> None:
    """An audit event `person.<action>` about `user`; its data always names them."""
    audit_record(
        action=f"person.{action}",
        summary=summary,
        obj=user,
        data={"username": user.username, **(data or {})},
        actor=actor,
    )


def _reset_lockout(username: str) -> int:
    from axes.utils import reset

    return int(reset(username=username))


# --- reads -----------------------------------------------------------------------------------


def locked_usernames(usernames: list[str] | None = None) -> set[str]:
    """User names locked out right now from at least one address (django-axes records)."""
    from axes.models import AccessAttempt

    rows = AccessAttempt.objects.filter(failures_since_start__gte=settings.AXES_FAILURE_LIMIT)
    if usernames is not None:
        rows = rows.filter(username__in=usernames)
    cooloff = settings.AXES_COOLOFF_TIME
    if cooloff is not None:
        rows = rows.filter(attempt_time__gte=timezone.now() - cooloff)
    return {name for name in rows.values_list("username", flat=True) if name}


@dataclass(frozen=True)
class Person:
    user: AbstractUser
    role: str | None
    last_login: datetime | None
    locked: bool
    sso: SsoAccount | None  # how they sign in through the provider, if they do

    @property
    def username(self) -> str:
        return str(self.user.username)

    @property
    def signs_in_with(self) -> list[str]:
        """`password`, the provider's name, or both."""
        ways = ["password"] if self.user.has_usable_password() else []
        return ways + ([self.sso.provider] if self.sso is not None else [])


def people_list(*, actor: AbstractUser | None) -> list[Person]:
    ensure_role(actor, ADMIN)
    users = list(_users().select_related("sso_account").prefetch_related("groups").order_by("username"))
    locked = locked_usernames([u.username for u in users])
    return [_person(u, locked) for u in users]


def person_get(*, username: str, actor: AbstractUser | None) -> Person:
    ensure_role(actor, ADMIN)
    user = _users().select_related("sso_account").prefetch_related("groups").get(username=username)
    return _person(user, locked_usernames([user.username]))


def _person(user: AbstractUser, locked: set[str]) -> Person:
    sso = getattr(user, "sso_account", None)  # None when they have none (a reverse one-to-one)
    return Person(user=user, role=_role_of(user), last_login=user.last_login, locked=user.username in locked, sso=sso)
