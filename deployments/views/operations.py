from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseStopPolling

from controlpanel.roles import VIEWER, role_required
from deployments import selectors
from deployments.models import Operation


def _operation_or_404(pk: str) -> Operation:
    try:
        return selectors.operation_get(pk=pk)
    except Operation.DoesNotExist as exc:
        raise Http404("No such operation.") from exc


@require_GET
@role_required(VIEWER)
def operation_detail(request: HttpRequest, pk: str) -> HttpResponse:
    return render(request, "deployments/operation_detail.html", {"op": _operation_or_404(pk)})


@require_GET
@role_required(VIEWER)
def operation_status(request: HttpRequest, pk: str) -> HttpResponse:
    op = _operation_or_404(pk)
    response = render(request, "deployments/_operation_status.html", {"op": op})
    if not op.is_active:
        return HttpResponseStopPolling(response.content)
    return response


urlpatterns = [
    path("operations/<uuid:pk>/", operation_detail, name="operation_detail"),
    path("operations/<uuid:pk>/status/", operation_status, name="operation_status"),
]
