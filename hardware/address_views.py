"""An admin sets where the panel, the lab router and client exports reach a host (its host page,
Address). An agent's probe only suggests an address; operators and agents cannot set one."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from controlpanel.roles import ADMIN, role_required

from .models import Host
from .services import host_address_set


@require_POST
@role_required(ADMIN)
def host_address(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    before = host.address
    try:
        host = host_address_set(host=host, address=request.POST.get("address", ""), actor=request.user)
    except ValidationError as exc:
        messages.error(request, "Address not changed: " + "; ".join(exc.messages))
    else:
        if host.address != before:
            messages.success(request, f"{host.name}'s address is now {host.address}.")
    return redirect("hardware:host_detail", name=host.name)
