"""Login is required everywhere except the sign-in pages (the password form, single sign-on's start
and callback), static files, /metrics (its own token or loopback: deployments.views.metrics) and
the agent API (which authenticates each request by its host's token instead). A full disk is said in one sentence."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse

from core.errors import DISK_FULL_SENTENCE, is_disk_full

OPEN_PREFIXES = ("/accounts/login/", "/accounts/sso/", "/static/", "/healthz", "/metrics", "/api/v1/", "/agent/v1/")


class LoginRequiredMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.user.is_authenticated and not request.path.startswith(OPEN_PREFIXES):
            if getattr(request, "htmx", False):
                response = HttpResponse(status=401)
                response["HX-Redirect"] = settings.LOGIN_URL
                return response
            return redirect_to_login(request.get_full_path(), "/accounts/login/")
        return self.get_response(request)


class DiskFullMiddleware:
    """A request whose write met a full disk (a database write, a file) ends in 507 with one
    sentence saying so; its transaction rolled back, so nothing half-done is kept, and the next
    request is served as usual (tests/test_disk_full.py)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_disk_full(exception):
            return None
        logging.getLogger("controlpanel").error("disk full during %s %s: %s", request.method, request.path, exception)
        return HttpResponse(DISK_FULL_SENTENCE, status=507, content_type="text/plain; charset=utf-8")
