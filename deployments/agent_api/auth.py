"""Authentication of the agent API: `Authorization: Bearer <host token>` names the host.

No session, no cookie, no CSRF token (there is no browser); a request without a valid,
unrevoked token is answered 401 before anything is read.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from controlpanel.hardening import client_ip
from core.context import change_context
from hardware.credentials import host_for_token
from hardware.models import Host

from .bodies import parse_body

MAX_BODY = 32 * 1024 * 1024  # an operation's end: a benchmark's raw per-request timings can be a few MB
SMALL_BODY = 1024 * 1024  # heartbeats, registration, progress, events

AgentView = Callable[..., HttpResponse]


def problem(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _bearer(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _body(request: HttpRequest, limit: int) -> dict[str, Any] | str:
    """The parsed body, or why it is refused."""
    if request.method != "POST":
        return {}
    too_big = f"The body must be a JSON object of at most {limit} bytes."
    try:
        length = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        return too_big
    if length > limit:
        return too_big
    raw = request.read(limit + 1)
    if len(raw) > limit:
        return too_big
    try:
        return parse_body(raw)
    except ValidationError as exc:
        return "; ".join(exc.messages)


def host_endpoint(methods: tuple[str, ...], *, max_body: int = SMALL_BODY) -> Callable[[AgentView], AgentView]:
    """The view gets (request, host, body, **url kwargs); host is the token's host. A body
    over `max_body` bytes is refused before it is parsed."""

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
            body = _body(request, max_body)
            if isinstance(body, str):
                return problem(400, body)
            with change_context("agent", client_ip(request)):
                return view(request, host, body, *args, **kwargs)

        return wrapped

    return decorator
