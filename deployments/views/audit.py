"""The audit log: who did what, when; filterable by action, user, host and date range."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_GET

from controlpanel.params import int_param
from controlpanel.roles import VIEWER, role_required
from core.models import AuditEvent
from deployments import selectors
from hardware.models import Host

PER_PAGE = 50


class AuditFilterForm(forms.Form):
    action = forms.CharField(
        required=False, max_length=60, widget=forms.TextInput(attrs={"placeholder": "e.g. revision", "list": "actions"})
    )
    actor = forms.CharField(required=False, max_length=150, label="User")
    host = forms.CharField(required=False, max_length=63)
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end date is before the start date.")
        return data


def _day_start(day: Any) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


@require_GET
@role_required(VIEWER)
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    events = selectors.audit_list(filters={})
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        events = selectors.audit_list(
            filters={"action": data["action"].strip(), "actor": data["actor"].strip(), "host": data["host"].strip()}
        )
        if data["since"]:
            events = events.filter(created_at__gte=_day_start(data["since"]))
        if data["until"]:
            events = events.filter(created_at__lt=_day_start(data["until"]) + timedelta(days=1))
    elif form.is_bound:
        events = events.none()  # a bad filter shows its error, not everything
    page = Paginator(events, PER_PAGE).get_page(int_param(request.GET, "page", default=1, minimum=1))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "deployments/audit_log.html",
        {
            "form": form,
            "page": page,
            "events": page.object_list,
            "query": query.urlencode(),
            "actions": AuditEvent.objects.order_by("action").values_list("action", flat=True).distinct(),
            "users": get_user_model().objects.order_by("username").values_list("username", flat=True),
            "hosts": Host.objects.order_by("name").values_list("name", flat=True),
        },
    )


urlpatterns = [
    path("audit/", audit_log, name="audit_log"),
]
