"""An admin issues or revokes a host's agent token from the host page.

The new token is shown once, on the answer to the POST (never cached, never stored in clear);
issuing revokes the earlier one, so this is also how a token is rotated."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from controlpanel.roles import ADMIN, role_required

from .credentials import host_token_issue, host_token_revoke
from .models import Host


@never_cache
@require_POST
@role_required(ADMIN)
def host_token(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    if request.POST.get("action") == "revoke":
        count = host_token_revoke(host=host, actor=request.user)
        messages.success(request, f"Revoked {count} agent token(s) of {host.name}: its agent is refused from now on.")
        return redirect("hardware:host_detail", name=host.name)
    try:
        host, token = host_token_issue(name=host.name, actor=request.user)
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
        return redirect("hardware:host_detail", name=host.name)
    return render(request, "hardware/host_token.html", {"host": host, "token": token})
