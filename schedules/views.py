"""Scheduled changes in the browser: the calendar-like list (by day, per host), cancelling one, and a
host's maintenance window. Scheduling itself happens on the pages of the change (the switch
confirmation, the alias form), which carry schedules.forms.WhenForm."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method, form_save
from hardware.models import Host

from . import selectors, services
from .forms import WindowForm
from .models import MaintenanceWindow, ScheduledChange


@require_GET
@role_required(VIEWER)
def schedule_list(request: HttpRequest) -> HttpResponse:
    name = (request.GET.get("host") or "").strip()
    host = Host.objects.filter(name=name).first() if name else None
    context = {
        "host": host,
        "hosts": Host.objects.order_by("name").values_list("name", flat=True),
        "days": selectors.upcoming_by_day(host=host),
        "recent": selectors.recent_outcomes(host=host),
    }
    return render(request, "schedules/list.html", context)


@require_POST
@role_required(OPERATOR)
def schedule_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    change = get_object_or_404(ScheduledChange.objects.select_related("host"), pk=pk)
    try:
        services.change_cancel(change=change, actor=request.user)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
    else:
        messages.success(request, f"Cancelled scheduled change #{change.pk}: it will not run.")
    return redirect(reverse("schedules:list") + f"?host={change.host.name}")


def _window_page(request: HttpRequest, host: Host, form: WindowForm) -> HttpResponse:
    context = {
        "host": host,
        "form": form,
        "window": services.window_of(host),
        "next": services.next_window(host),
        "days": selectors.upcoming_by_day(host=host),
    }
    return render(request, "schedules/window.html", context)


@role_required(VIEWER)
def window_get(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    window = services.window_of(found)
    initial = (
        {"weekdays": window.weekdays, "start": window.start, "end": window.end, "timezone": window.timezone}
        if window
        else {}
    )
    return _window_page(request, found, WindowForm(initial=initial))


@role_required(OPERATOR)
def window_post(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    if request.POST.get("remove"):
        services.window_clear(host=found, actor=request.user)
        messages.success(request, f"{found.name} has no maintenance window now.")
        return redirect("schedules:window", host=found.name)
    form = WindowForm(request.POST)

    def save(data: dict[str, Any]) -> MaintenanceWindow:
        return services.window_set(
            host=found,
            weekdays=data["weekdays"],
            start=data["start"],
            end=data["end"],
            tz=data["timezone"],
            actor=request.user,
        )

    window = form_save(form, save)
    if window is None:
        return _window_page(request, found, form)
    messages.success(request, f"{found.name}'s maintenance window: {window.window().describe()}.")
    return redirect("schedules:window", host=found.name)


window = by_method(get=window_get, post=window_post)
