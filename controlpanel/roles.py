"""Roles: viewer (read), operator (create revisions, switch, benchmark), admin (everything).

A user's role is the highest of: superuser -> admin; membership of the group named like
the role. Views and services both check roles through `ensure_role`; templates only use
the context flags to hide buttons.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

VIEWER = "viewer"
OPERATOR = "operator"
ADMIN = "admin"
RANK = {VIEWER: 1, OPERATOR: 2, ADMIN: 3}
ROLES = (VIEWER, OPERATOR, ADMIN)


def user_role(user: Any) -> str | None:
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


def has_role(user: Any, role: str) -> bool:
    current = user_role(user)
    return current is not None and RANK[current] >= RANK[role]


def ensure_role(user: Any, role: str) -> None:
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
