"""A host's events page: what happened to it unasked (its agent killed and started again, the
watchdog's restarts, a serving table its front door refused, the door down and back, the host
offline), newest first, filterable by kind, live (its table polls). The host page shows the last
few (`recent_events`) and links here."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from controlpanel.params import int_param
from controlpanel.roles import VIEWER, role_required
from hardware.models import Host, HostEvent
from hardware.selectors import host_event_list
from notifications.choices import severity

PER_PAGE = 50
ON_HOST_PAGE = 5
BADGE = {"failure": "failed", "warning": "warning", "success": "succeeded", "info": "info"}  # panel.css classes


def event_rows(events: Any) -> list[dict[str, Any]]:
    """Each event with its badge (its notification's severity, as a class panel.css colours)."""
    return [{"event": e, "badge": BADGE.get(severity(e.kind), "info")} for e in events]


def recent_events(host: Host) -> list[dict[str, Any]]:
    """The host page's last few events."""
    return event_rows(host_event_list(host=host)[:ON_HOST_PAGE])


@require_GET
@role_required(VIEWER)
@vary_on_headers("HX-Request")
def host_events(request: HttpRequest, name: str) -> HttpResponse:
    """The page, or (an htmx poll) its table alone, or (`recent`) the host page's last few;
    `kind` filters, an unknown kind shows none."""
    host = get_object_or_404(Host, name=name)
    htmx = getattr(request, "htmx", None)
    partial = bool(htmx) and not htmx.boosted
    if partial and request.GET.get("recent"):  # the host page's section
        return render(request, "hardware/_host_events_recent.html", {"host": host, "events": recent_events(host)})
    kind = str(request.GET.get("kind") or "")
    known = kind in HostEvent.Kind.values
    events = host_event_list(host=host, kind=kind) if known or not kind else HostEvent.objects.none()
    page = Paginator(events, PER_PAGE).get_page(int_param(request.GET, "page", default=1, minimum=1))
    context = {
        "host": host,
        "rows": event_rows(page.object_list),
        "page": page,
        "kind": kind,
        "unknown_kind": kind if kind and not known else "",
        "kinds": HostEvent.Kind.choices,
        "query": request.GET.urlencode(),
    }
    if partial:
        return render(request, "hardware/_host_events.html", context)
    return render(request, "hardware/host_events.html", context)
