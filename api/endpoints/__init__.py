"""One module per resource; each endpoint checks the role, calls a service or a selector, and
returns plain data (api/serialize.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest

from controlpanel.roles import OPERATOR, ensure_role
from deployments.models import DeploymentRevision
from deployments.selectors import revision_numbered
from hardware.models import Host

Row = TypeVar("Row")
ModelT = TypeVar("ModelT", bound=Model)


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


def row_or_404(rows: QuerySet[ModelT], pk: object, missing: str) -> ModelT:
    """Row `pk` of `rows` (their select_related and all), or Http404 saying `missing`."""
    found = rows.filter(pk=pk).first()
    if found is None:
        raise Http404(missing)
    return found


def host_filter(name: str | None) -> Host | None:
    """A list's `host` query: None when it names none, else the host (404 when there is none)."""
    return host_or_404(name) if name else None


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


def listed(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A list endpoint's answer: the items and how many."""
    items = list(items)
    return {"items": items, "count": len(items)}


def acted(request: HttpRequest, service: Callable[..., object], read: Callable[[], Row], field: str) -> Row:
    """An operator's action on one row (403 before 404): `service(<field>=row, actor=user)`, then
    the row read again, as the service left it (a cancel, a pause...)."""
    user = actor(request, OPERATOR)
    service(**{field: read()}, actor=user)
    return read()
