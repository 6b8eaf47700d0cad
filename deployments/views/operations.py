"""Operation pages: live status (polling stops when the operation ends) and cancel."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method, is_partial, polled
from deployments import presenters, selectors
from deployments.choices import GATE_ACTIVE_STATES
from deployments.models import Operation
from deployments.selectors.installs import install_time_left
from deployments.services.gates import gate_of
from deployments.services.operations import operation_cancel


def operation_or_404(pk: str) -> Operation:
    """The operation, with its host, revision and requester; 404 when there is none."""
    try:
        return selectors.operation_get(pk=pk)
    except Operation.DoesNotExist as exc:
        raise Http404("No such operation.") from exc


def _status_context(op: Operation, **extra: Any) -> dict[str, Any]:
    gate = gate_of(op)
    return {
        "op": op,
        "gate": gate,  # a switch's benchmark gate this operation is a step of
        "following": op.is_active or (gate is not None and gate.state in GATE_ACTIVE_STATES),
        "outcome": presenters.operation_outcome(op),
        "log_lines": presenters.fold_log(op.log),
        "time_left": install_time_left(op),  # an install that compiles
        **extra,
    }


@require_GET
@role_required(VIEWER)
def operation_detail(request: HttpRequest, pk: str) -> HttpResponse:
    return render(request, "deployments/operation_detail.html", _status_context(operation_or_404(pk)))


@require_GET
@role_required(VIEWER)
def operation_status(request: HttpRequest, pk: str) -> HttpResponse:
    op = operation_or_404(pk)
    # When it has ended, the fragment also empties the Cancel slot (out of band): no Cancel
    # button stays on a finished operation's page.
    context = _status_context(op, polled=True)
    # Not following: the operation ended, and the gate it is a step of too.
    return polled(request, "deployments/_operation_status.html", context, going=context["following"])


@require_GET
@role_required(VIEWER)
def operation_cancel_confirm(request: HttpRequest, pk: str) -> HttpResponse:
    op = operation_or_404(pk)
    template = "deployments/_operation_cancel.html" if is_partial(request) else "deployments/operation_cancel.html"
    return render(request, template, {"op": op, "errors": []})


@require_POST
@role_required(OPERATOR)
def operation_cancel_request(request: HttpRequest, pk: str) -> HttpResponse:
    op = operation_or_404(pk)
    try:
        operation_cancel(op=op, actor=request.user)
    except ValidationError as exc:
        template = "deployments/_operation_cancel.html" if is_partial(request) else "deployments/operation_cancel.html"
        return render(request, template, {"op": op, "errors": presenters.validation_messages(exc)})
    url = reverse("deployments:operation_detail", args=[op.pk])
    return HttpResponseClientRedirect(url) if is_partial(request) else redirect(url)


operation_cancel_view = by_method(get=operation_cancel_confirm, post=operation_cancel_request)

urlpatterns = [
    path("operations/<uuid:pk>/", operation_detail, name="operation_detail"),
    path("operations/<uuid:pk>/status/", operation_status, name="operation_status"),
    path("operations/<uuid:pk>/cancel/", operation_cancel_view, name="operation_cancel"),
]
