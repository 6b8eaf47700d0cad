"""Login is required everywhere except the sign-in pages (the password form, single sign-on's start
and callback), static files, /metrics (its own token or loopback: deployments.views.metrics) and
the agent API (which authenticates each request by its host's token instead). A full disk is said in one sentence.
Nothing a signed-in person or a token is answered is kept by a browser's or a proxy's cache. Each
request runs in its change context (core.context: web or api, and the client's address)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

from controlpanel.hardening import client_ip
from core.context import change_context, request_source
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


# Answers to a token rather than a session: the automation API (an inference key's secret on
# create, shown once) and the agent API (a launch's engine keys).
NO_STORE_PREFIXES = ("/api/", "/agent/")


class NoStoreMiddleware:
    """`Cache-Control: no-store` (Django's never-cache headers) on every answer to a signed-in person
    and every answer of the token APIs, so no page, key or secret is left in a browser's disk cache,
    its back button or a shared proxy; an answer whose view set its own Cache-Control (static files,
    the playground's stream) keeps it. Registered before the agent API's middleware, which ends its
    requests early, so its answers pass here too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.has_header("Cache-Control"):
            return response
        user = getattr(request, "user", None)  # unset where the agent API's middleware answered
        if request.path.startswith(NO_STORE_PREFIXES) or (user is not None and user.is_authenticated):
            add_never_cache_headers(response)
        return response


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


class ChangeContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with change_context(request_source(request), client_ip(request)):
            return self.get_response(request)
