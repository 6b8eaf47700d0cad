"""A host's secrets, for admins: names and marks only (a value is never shown), a form to create
or rotate one, and the mark that lets a secret be sent to a hub as a Hugging Face token."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from controlpanel.roles import ADMIN, role_required
from core.http import form_save
from deployments import presenters
from deployments.forms import SecretForm, SecretMarkForm
from deployments.services.secrets import secret_mark, secret_set
from hardware.models import Host


@never_cache
@role_required(ADMIN)
def host_secrets(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    form = SecretForm(request.POST if request.method == "POST" else None)
    stored = form_save(
        form,
        lambda data: secret_set(
            host=found, name=data["name"], value=data["value"], actor=request.user, hub_token=data["hub_token"]
        ),
        fallback="name",
    )
    if stored is not None:
        messages.success(request, f"Stored secret {stored.name} for {found.name}.")
        return redirect("deployments:host_secrets", host=found.name)
    context = {"host": found, "secrets": found.secrets.order_by("name"), "form": form}
    return render(request, "deployments/host_secrets.html", context)


@require_POST
@role_required(ADMIN)
def host_secret_mark(request: HttpRequest, host: str, secret: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    form = SecretMarkForm(request.POST)
    if form.is_valid():
        try:
            secret_mark(host=found, name=secret, hub_token=form.cleaned_data["hub_token"], actor=request.user)
        except ValidationError as exc:
            presenters.flash_refusal(request, exc)
    return redirect("deployments:host_secrets", host=found.name)


urlpatterns = [
    path("hosts/<slug:host>/secrets/", host_secrets, name="host_secrets"),
    path("hosts/<slug:host>/secrets/<slug:secret>/mark/", host_secret_mark, name="host_secret_mark"),
]
