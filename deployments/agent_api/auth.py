"""Authentication of the agent API: `Authorization: Bearer <host token>` names the host.

No session, no cookie, no CSRF token (there is no browser); a request without a valid,
unrevoked token is answered 401 before anything is read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from controlpanel.context import change_context
from controlpanel.hardening import client_ip
from hardware.credentials import host_for_token
from hardware.models import Host

MAX_BODY = 32 * 1024 * 1024  # a benchmark's raw per-request timings can be a few MB

AgentView = Callable[..., HttpResponse]


def problem(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _bearer(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _body(request: HttpRequest) -> dict[str, Any] | None:
    if request.method != "POST":
        return {}
    try:
        length = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        return None
    if length > MAX_BODY:
        return None
    raw = request.read(MAX_BODY + 1)
    if len(raw) > MAX_BODY:
        return None
    try:
        data = json.loads(raw or b"{}")
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def host_endpoint(methods: tuple[str, ...]) -> Callable[[AgentView], AgentView]:
    """The view gets (request, host, body, **url kwargs); host is the token's host."""

    def decorator(view: AgentView) -> AgentView:
        @csrf_exempt
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            token = _bearer(request)
            host: Host | None = host_for_token(token) if token else None
            if host is None:
                response = problem(401, "This host credential is unknown or revoked.")
                response["WWW-Authenticate"] = 'Bearer realm="controlpanel-agent"'
                return response
            if request.method not in methods:
                return problem(405, f"Use {' or '.join(methods)}.")
            body = _body(request)
            if body is None:
                return problem(400, f"The body must be a JSON object of at most {MAX_BODY} bytes.")
            with change_context("agent", client_ip(request)):
                return view(request, host, body, *args, **kwargs)

        return wrapped

    return decorator
