from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView

from deployments.views.metrics import metrics
from people.password import ThrottledPasswordChangeView
from people.signin import SignInView, SignOutView, SsoCallbackView, SsoStartView


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """400 with the reason when it is one of ours (a bad parameter says which and why)."""
    from controlpanel.params import BadParameter

    reason = str(exception) if isinstance(exception, BadParameter) else ""
    return HttpResponseBadRequest(render_to_string("400.html", {"reason": reason}, request=request))


handler400 = bad_request

urlpatterns = [
    path("accounts/login/", SignInView.as_view(), name="login"),
    # Single sign-on (docs/sso.md): off (404) until CONTROLPANEL_OIDC_CLIENT_ID is set.
    path("accounts/sso/start/", SsoStartView.as_view(), name="sso_login"),
    path("accounts/sso/callback/", SsoCallbackView.as_view(), name="sso_callback"),
    path("accounts/logout/", SignOutView.as_view(), name="logout"),
    path("accounts/password/", ThrottledPasswordChangeView.as_view(), name="password_change"),
    path("accounts/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
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
    path("", include("deployments.host_urls")),
    path("", include("deployments.urls")),
    path("", include("rollouts.urls")),
]
