"""Login is required everywhere except the login page, static files, /metrics (its own token or
loopback: deployments.views.metrics) and the agent API (which
authenticates each request by its host's token instead)."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse

OPEN_PREFIXES = ("/accounts/login/", "/static/", "/healthz", "/metrics", "/api/v1/", "/agent/v1/")


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
