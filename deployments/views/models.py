"""Model catalog: browse it, import a variant from a Hugging Face repository (in the panel's
worker: the import's page follows it), a config.json or a GGUF header."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import apply_error, by_method, form_save, polled
from deployments import selectors
from deployments.choices import ModelPurpose
from deployments.forms import GgufImportForm, HfConfigImportForm, HubImportForm, ModelPurposeForm
from deployments.models import HubImport, ModelVariant
from deployments.services.catalog import model_variant_set_purpose
from deployments.services.hub_imports import hub_import_request
from deployments.services.imports import (
    gguf_files_available,
    model_variant_import_gguf,
    model_variant_import_hf_config,
    panel_model_dirs,
)


@require_GET
@role_required(VIEWER)
def model_list(request: HttpRequest) -> HttpResponse:
    context = {"models": selectors.model_list(), "purposes": ModelPurpose.choices}
    return render(request, "deployments/model_list.html", context)


@require_POST
@role_required(OPERATOR)
def model_purpose(request: HttpRequest, pk: int) -> HttpResponse:
    """Say what a catalog model is for: chat (the switch's gate fails a model that answers a chat with
    noise) or completions (a base model served on purpose)."""
    variant = get_object_or_404(ModelVariant, pk=pk)
    form = ModelPurposeForm(request.POST)
    changed = form_save(
        form, lambda data: model_variant_set_purpose(variant=variant, purpose=data["purpose"], actor=request.user)
    )
    if changed is None:
        messages.error(request, f"{variant.name}: " + " ".join(e for errors in form.errors.values() for e in errors))
    else:
        messages.success(request, f"{changed.name} is for {changed.get_purpose_display().lower()}.")
    return redirect("deployments:model_list")


def _import_page(
    request: HttpRequest, *, hf: HfConfigImportForm, gguf: GgufImportForm, hub: HubImportForm | None = None
) -> HttpResponse:
    context = {
        "hf_form": hf,
        "gguf_form": gguf,
        "hub_form": hub or HubImportForm(prefix="hub"),
        "gguf_files": gguf_files_available(),
        "model_dirs": panel_model_dirs(),
    }
    return render(request, "deployments/model_import.html", context)


def _import_hub(request: HttpRequest, form: HubImportForm) -> HubImport | None:
    """The import handed to the panel's worker, or None with the form's errors set (what can be
    refused without the hub)."""
    if not form.is_valid():
        return None
    data = form.cleaned_data
    try:
        return hub_import_request(
            repo_id=data["repo_id"],
            revision=data["revision"],
            gguf_file=data["file"],
            name=data["name"],
            token=data["token"],
            actor=request.user,
        )
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):  # the service names the secret; the form calls it the token
            exc = ValidationError({("token" if k == "token_secret" else k): v for k, v in exc.error_dict.items()})
        apply_error(form, exc, fallback="repo_id")
    return None


@require_GET
@role_required(VIEWER)
def model_import_page(request: HttpRequest) -> HttpResponse:
    return _import_page(request, hf=HfConfigImportForm(prefix="hf"), gguf=GgufImportForm(prefix="gguf"))


@require_POST
@role_required(OPERATOR)
def model_import_submit(request: HttpRequest) -> HttpResponse:
    hf = HfConfigImportForm(prefix="hf")
    gguf = GgufImportForm(prefix="gguf")
    source = request.POST.get("source")
    variant: Any = None
    hub = HubImportForm(prefix="hub")
    if source == "hub":
        hub = HubImportForm(request.POST, prefix="hub")
        job = _import_hub(request, hub)
        if job is None:
            return _import_page(request, hf=hf, gguf=gguf, hub=hub)
        return redirect("deployments:hub_import", pk=job.pk)  # at once: the worker reads the hub
    if source == "gguf":
        gguf = GgufImportForm(request.POST, prefix="gguf")
        variant = form_save(gguf, lambda data: model_variant_import_gguf(**data, actor=request.user), fallback="path")
    else:
        hf = HfConfigImportForm(request.POST, request.FILES, prefix="hf")
        variant = form_save(
            hf, lambda data: model_variant_import_hf_config(**data, actor=request.user), fallback="config"
        )
    if variant is None:
        return _import_page(request, hf=hf, gguf=gguf, hub=hub)
    messages.success(
        request,
        f"Imported {variant.name} into the catalog, for {variant.get_purpose_display().lower()}: "
        "change it there if that is wrong.",
    )
    if variant.chat_template_warning:
        messages.warning(request, variant.chat_template_warning)
    return redirect("deployments:model_list")


model_import = by_method(get=model_import_page, post=model_import_submit)


def _hub_import_or_404(pk: str) -> HubImport:
    job = HubImport.objects.select_related("requested_by", "variant").filter(pk=pk).first()
    if job is None:
        raise Http404("No such import.")
    return job


@require_GET
@role_required(VIEWER)
def hub_import_detail(request: HttpRequest, pk: str) -> HttpResponse:
    """One import from the hub: where it stands, then the new entry or why not (followed live)."""
    return render(request, "deployments/hub_import.html", {"job": _hub_import_or_404(pk)})


@require_GET
@role_required(VIEWER)
def hub_import_status(request: HttpRequest, pk: str) -> HttpResponse:
    job = _hub_import_or_404(pk)
    return polled(request, "deployments/_hub_import_status.html", {"job": job}, going=job.is_active)


urlpatterns = [
    path("models/", model_list, name="model_list"),
    path("models/import/", model_import, name="model_import"),
    path("models/<int:pk>/purpose/", model_purpose, name="model_purpose"),
    path("models/import/hub/<uuid:pk>/", hub_import_detail, name="hub_import"),
    path("models/import/hub/<uuid:pk>/status/", hub_import_status, name="hub_import_status"),
]
