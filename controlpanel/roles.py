"""Roles: viewer (read), operator (create revisions, switch, benchmark), admin (everything).

A user's role is the highest of: superuser -> admin; membership of the group named like
the role. Views and services both check roles through `ensure_role`; templates only use
the context flags to hide buttons.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser, AnonymousUser

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}
ROLES = (VIEWER, OPERATOR, ADMIN)


def user_role(user: AbstractUser | AnonymousUser | None) -> str | None:
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    cached = getattr(user, "_cp_role", None)
    if cached is not None:
        return cached or None
    names = set(user.groups.values_list("name", flat=True))
    role = next((r for r in (ADMIN, OPERATOR, VIEWER) if r in names), "")
    user._cp_role = role
    return role or None


# A role map says which of the identity provider's groups give which role (single sign-on,
# docs/sso.md): `lab-admins=admin,lab-ops=operator,*=viewer`. `*` stands for everyone the
# provider signs in, whatever their groups.
EVERYONE = "*"
RoleMap = tuple[tuple[str, str], ...]


def parse_role_map(text: str) -> RoleMap:
    """`group=role` pairs, separated by commas or new lines; ValueError names a bad pair."""
    pairs: list[tuple[str, str]] = []
    for part in text.replace("\n", ",").split(","):
        part = part.strip()
        if not part:
            continue
        group, sep, role = part.rpartition("=")
        group, role = group.strip(), role.strip()
        if not sep or not group:
            raise ValueError(f"{part!r} is not group=role (e.g. lab-admins=admin)")
        if role not in ROLES:
            raise ValueError(f"{part!r}: the role must be one of {', '.join(ROLES)}, not {role!r}")
        pairs.append((group, role))
    return tuple(pairs)


def role_for_groups(groups: Iterable[str], role_map: RoleMap) -> str | None:
    """The highest role that any of `groups` (or `*`) maps to; None when none does.
    Group names match exactly, case included, as the provider spells them."""
    held = set(groups) | {EVERYONE}
    roles = [role for group, role in role_map if group in held]
    return max(roles, key=RANK.__getitem__) if roles else None


def has_role(user: AbstractUser | AnonymousUser | None, role: str) -> bool:
    current = user_role(user)
    return current is not None and RANK[current] >= RANK[role]


def ensure_role(user: AbstractUser | AnonymousUser | None, role: str) -> None:
    """Raise PermissionDenied unless `user` holds `role` or higher. Services call this."""
    if user is None:  # system actions (the agent, beat) run without a user
        return
    if not has_role(user, role):
        raise PermissionDenied(f"This needs the {role} role.")


def role_required(role: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            ensure_role(request.user, role)
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def role_context(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    return {
        "role": user_role(user),
        "can_operate": has_role(user, OPERATOR),
        "is_admin": has_role(user, ADMIN),
    }
