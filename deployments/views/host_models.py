"""Models on a host's disk: what is there (size, which revisions use it), download one from the
hub (an operation on the host's queue, with progress), delete one (refused while in use)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method
from deployments import presenters
from deployments.choices import ACTIVE_STATES, OperationKind
from deployments.forms import ModelDownloadForm
from deployments.models import HostModel, ModelVariant, Operation
from deployments.services.host_models import (
    download_notes,
    download_request,
    host_model_delete_request,
    host_model_list,
)
from hardware.models import Host


def _page(request: HttpRequest, host: Host, form: ModelDownloadForm, errors: list[str]) -> HttpResponse:
    active = Operation.objects.filter(
        host=host, kind__in=(OperationKind.DOWNLOAD, OperationKind.MODEL_DELETE), state__in=ACTIVE_STATES
    ).order_by("created_at")
    context: dict[str, Any] = {
        "host": host,
        "rows": host_model_list(host=host),
        "form": form,
        "errors": errors,
        "active": active,
        "notes": download_notes(host=host),
    }
    return render(request, "deployments/host_models.html", context)


@require_GET
@role_required(VIEWER)
def host_models_page(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    initial: dict[str, Any] = {}
    wanted = request.GET.get("model", "")
    if wanted.isdigit() and len(wanted) < 12:
        initial["model"] = ModelVariant.objects.filter(pk=int(wanted)).first()
    return _page(request, found, ModelDownloadForm(host=found, initial=initial), [])


@require_POST
@role_required(OPERATOR)
def host_model_download(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    form = ModelDownloadForm(request.POST, host=found)
    errors: list[str] = []
    if form.is_valid():
        try:
            op = download_request(
                host=found,
                variant=form.cleaned_data["model"],
                token_secret=form.cleaned_data["token_secret"],
                actor=request.user,
            )
        except ValidationError as exc:
            errors.extend(presenters.validation_messages(exc))
        else:
            return redirect("deployments:operation_detail", pk=op.pk)
    return _page(request, found, form, errors)


@require_POST
@role_required(OPERATOR)
def host_model_delete(request: HttpRequest, host: str, pk: int) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    copy = get_object_or_404(HostModel.objects.select_related("host", "model_variant"), pk=pk, host=found)
    try:
        op = host_model_delete_request(copy=copy, actor=request.user)
    except ValidationError as exc:
        presenters.flash_refusal(request, exc)
        return redirect("deployments:host_models", host=found.name)
    return redirect("deployments:operation_detail", pk=op.pk)


host_models = by_method(get=host_models_page, post=host_model_download)

urlpatterns = [
    path("hosts/<slug:host>/models/", host_models, name="host_models"),
    path("hosts/<slug:host>/models/<int:pk>/delete/", host_model_delete, name="host_model_delete"),
]
