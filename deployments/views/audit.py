from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.views.decorators.http import require_GET

from controlpanel.roles import VIEWER, role_required
from deployments import selectors


@require_GET
@role_required(VIEWER)
def audit_log(request: HttpRequest) -> HttpResponse:
    filters = {k: request.GET.get(k, "") for k in ("action", "actor", "host")}
    events = selectors.audit_list(filters=filters)[:200]
    return render(request, "deployments/audit_log.html", {"events": events, "filters": filters})


urlpatterns = [
    path("audit/", audit_log, name="audit_log"),
]
