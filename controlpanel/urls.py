from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from controlpanel.params import BadParameter
from deployments.views.metrics import metrics


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400 with the reason when it is one of ours (a bad parameter says which and why)."""
    reason = str(exception) if isinstance(exception, BadParameter) else ""
    return HttpResponseBadRequest(render_to_string("400.html", {"reason": reason}, request=request))


handler400 = bad_request

urlpatterns = [
    # Sign-in, sign-out, single sign-on and one's password (people/urls.py), and the People pages.
    path("accounts/", include("people.urls")),
    path("people/", include("people.views")),
    path("notifications/", include("notifications.urls")),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("metrics", metrics, name="metrics"),  # Prometheus: a bearer token or loopback (docs/metrics.md)
    # The automation API (personal tokens) and the page that manages those tokens.
    path("api/v1/", include("api.urls")),
    path("account/tokens/", include("api.views")),
    # GPU hosts' agents, authenticated by their own host token (deployments.agent_api).
    path("agent/v1/", include("deployments.agent_api.urls")),
    # Browsers ask for /favicon.ico whatever the page links: send them to the static icon.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("", include("changes.urls")),
    path("", include("schedules.urls")),
    path("", include("dashboard.urls")),
    path("", include("deployments.views.host_urls")),
    path("", include("deployments.views.urls")),
    path("", include("rollouts.urls")),
    path("", include("tuning.urls")),
]
