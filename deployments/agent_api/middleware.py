"""The agent API's requests skip the browser's middleware.

A GPU host's agent reports every few seconds, and at a hundred hosts those reports are most of
the panel's requests. They carry a host token, not a session: sessions, users, CSRF, messages,
htmx, the sign-in wall, the change context (the endpoints set their own) and django-axes have
nothing to do for them, and running them cost a fifth of a telemetry report's CPU
(bench/bench_ingest.py). Placed right after SecurityMiddleware (which still applies: HTTPS
redirect, HSTS), this middleware resolves an `/agent/v1/` path and calls its view itself; every
other request goes on down the chain. An exception in the view still becomes Django's error
response, through the handler's own wrapping of this middleware; but a write that met a full
disk answers 507 with one sentence in JSON (the browser's pages get the same from
controlpanel.middleware.DiskFullMiddleware, which these requests skip): the view's transaction
rolled back, and the agent keeps the report in its outbox (a 5xx is "the panel is away") until
there is room again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import resolve

from core.errors import DISK_FULL_SENTENCE, is_disk_full

PREFIX = "/agent/v1/"


class AgentApiMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(PREFIX):
            return self.get_response(request)
        request.get_host()  # ALLOWED_HOSTS, as CommonMiddleware would check it (DisallowedHost: 400)
        match = resolve(request.path_info)  # Resolver404 becomes the usual 404
        request.resolver_match = match
        try:
            return match.func(request, *match.args, **match.kwargs)
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            logging.getLogger("controlpanel").error("disk full during %s %s: %s", request.method, request.path, exc)
            return JsonResponse({"error": DISK_FULL_SENTENCE}, status=507)
