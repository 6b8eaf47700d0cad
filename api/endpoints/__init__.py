"""One module per resource; each endpoint checks the role, calls a service or a selector, and
returns plain data (api/serialize.py)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest

from controlpanel.roles import ensure_role
from deployments.models import DeploymentRevision
from deployments.selectors import revision_numbered
from hardware.models import Host


def actor(request: HttpRequest, role: str) -> Any:
    """The token's user, once it holds `role` (403 otherwise)."""
    user = getattr(request, "auth", None)
    if user is None:  # never: the token auth ran first; refuse rather than act as the system
        from django.core.exceptions import PermissionDenied

        raise PermissionDenied("No user behind this request.")
    ensure_role(user, role)
    return user


def host_or_404(name: str) -> Host:
    try:
        return Host.objects.select_related("deployment__active_revision").get(name=name)
    except (Host.DoesNotExist, ValueError):
        raise Http404(f"No host named {name[:80]!r}.") from None


def host_for(request: HttpRequest, name: str, role: str) -> tuple[Any, Host]:
    """The token's user once it holds `role` (403), then the host named `name` (404): how every
    endpoint on one host starts."""
    return actor(request, role), host_or_404(name)


def revision_or_404(host: Host, number: int) -> DeploymentRevision:
    """selectors.revision_numbered, its refusal a 404."""
    try:
        return revision_numbered(host, number)
    except ValidationError as exc:
        raise Http404(exc.message_dict["revision"][0]) from None
