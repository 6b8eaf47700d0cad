from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from controlpanel.roles import VIEWER, role_required

from . import selectors
from .models import Host


@require_GET
@role_required(VIEWER)
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "hardware/dashboard.html", {"cards": selectors.host_cards()})


@require_GET
@role_required(VIEWER)
@vary_on_headers("HX-Request")
def host_cards_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "hardware/_host_cards.html", {"cards": selectors.host_cards()})


@require_GET
@role_required(VIEWER)
def host_detail(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host.objects.select_related("active_revision__model_variant"), name=name)
    cards = selectors.host_cards(hosts=Host.objects.filter(pk=host.pk).select_related("active_revision__model_variant"))
    revisions = host.revisions.select_related("model_variant", "author").order_by("-number")[:20]
    return render(
        request,
        "hardware/host_detail.html",
        {"host": host, "card": cards[0], "revisions": revisions},
    )
