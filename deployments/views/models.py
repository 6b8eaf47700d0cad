from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from controlpanel.roles import VIEWER, role_required
from deployments import selectors


@require_GET
@role_required(VIEWER)
def model_list(request: HttpRequest) -> HttpResponse:
    return render(request, "deployments/model_list.html", {"models": selectors.model_list()})


urlpatterns = [
    path("models/", model_list, name="model_list"),
]
