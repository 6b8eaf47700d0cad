"""The page a locked-out sign-in gets (django-axes calls `lockout_response`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def _duration(minutes: float) -> str:
    if minutes >= 120 and minutes % 60 == 0:
        return f"{int(minutes // 60)} hours"
    whole = max(1, round(minutes))
    return f"{whole} minute{'s' if whole != 1 else ''}"


def lockout_response(request: HttpRequest, original_response: Any = None, credentials: Any = None) -> HttpResponse:
    from axes.helpers import get_client_username, get_cool_off, get_failure_limit

    cooloff = get_cool_off(request)
    context = {
        "username": get_client_username(request, credentials) or "",
        "failure_limit": get_failure_limit(request, credentials),
        "cooloff": _duration(cooloff.total_seconds() / 60) if cooloff else "",
    }
    return render(request, "registration/locked_out.html", context, status=settings.AXES_HTTP_RESPONSE_CODE)
