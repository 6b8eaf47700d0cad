from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from controlpanel.roles import VIEWER, role_required
from hardware.models import Host

from . import selectors
from .models import DeploymentRevision, Operation
from .services.revisions import comment_create

FILTER_KEYS = ("model", "engine", "author", "tag")


@require_GET
@role_required(VIEWER)
def model_list(request: HttpRequest) -> HttpResponse:
    return render(request, "deployments/model_list.html", {"models": selectors.model_list()})


@require_GET
@role_required(VIEWER)
def audit_log(request: HttpRequest) -> HttpResponse:
    filters = {k: request.GET.get(k, "") for k in ("action", "actor", "host")}
    events = selectors.audit_list(filters=filters)[:200]
    return render(request, "deployments/audit_log.html", {"events": events, "filters": filters})


@require_GET
@role_required(VIEWER)
def revision_list(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = get_object_or_404(Host, name=host)
    filters = {k: request.GET.get(k, "") for k in FILTER_KEYS}
    revisions = selectors.revision_history(host=host_obj, filters=filters)
    return render(
        request,
        "deployments/revision_list.html",
        {"host": host_obj, "revisions": revisions, "filters": filters},
    )


def _revision_or_404(host: str, number: int) -> DeploymentRevision:
    try:
        return selectors.revision_get(host_name=host, number=number)
    except DeploymentRevision.DoesNotExist as exc:
        raise Http404("No such revision.") from exc


@require_GET
@role_required(VIEWER)
def revision_detail(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = _revision_or_404(host, number)
    return render(
        request,
        "deployments/revision_detail.html",
        {"revision": revision, "comments": revision.comments.select_related("author")},
    )


@require_POST
@role_required(VIEWER)
def revision_comment(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = _revision_or_404(host, number)
    try:
        comment_create(revision=revision, body=request.POST.get("body", ""), actor=request.user)
    except ValidationError as exc:
        return HttpResponse(f"<p class='error'>{'; '.join(exc.messages)}</p>", status=400)
    return redirect("deployments:revision_detail", host=host, number=number)


@require_GET
@role_required(VIEWER)
def operation_detail(request: HttpRequest, pk: str) -> HttpResponse:
    try:
        op = selectors.operation_get(pk=pk)
    except Operation.DoesNotExist as exc:
        raise Http404("No such operation.") from exc
    return render(request, "deployments/operation_detail.html", {"op": op})


@require_GET
@role_required(VIEWER)
def operation_status(request: HttpRequest, pk: str) -> HttpResponse:
    try:
        op = selectors.operation_get(pk=pk)
    except Operation.DoesNotExist as exc:
        raise Http404("No such operation.") from exc
    response = render(request, "deployments/_operation_status.html", {"op": op})
    if not op.is_active:
        stop = HttpResponseStopPolling(response.content)
        return stop
    return response
