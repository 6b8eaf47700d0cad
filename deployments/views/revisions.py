from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import VIEWER, role_required
from deployments import selectors
from deployments.models import DeploymentRevision
from deployments.services.revisions import comment_create
from hardware.models import Host

FILTER_KEYS = ("model", "engine", "author", "tag")


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


urlpatterns = [
    path("hosts/<slug:host>/revisions/", revision_list, name="revision_list"),
    path("hosts/<slug:host>/revisions/<int:number>/", revision_detail, name="revision_detail"),
    path("hosts/<slug:host>/revisions/<int:number>/comment/", revision_comment, name="revision_comment"),
]
