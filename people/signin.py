"""Signing in: the sign-in page (a password form, the single sign-on button, or both), the start
of a single sign-on and the provider's callback (mozilla-django-oidc's views, with pages that say
why a sign-in was refused), and the refusal of password routes while local passwords are off."""

from __future__ import annotations

from typing import Any

import requests
from django.conf import settings
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView, OIDCLogoutView

from .oidc import ProviderUnreachable, endpoints, sso_enabled
from .sso import SsoRefused

PASSWORDS_OFF = "Local passwords are off in this panel: sign in with {provider}."


def sign_in_context(request: HttpRequest) -> dict[str, Any]:
    """For every template: whether passwords work here, and the sign-on button's label if any."""
    return {
        "local_passwords": settings.CONTROLPANEL_LOCAL_PASSWORDS,
        "sso_label": settings.CONTROLPANEL_OIDC_BUTTON_LABEL if sso_enabled() else "",
    }


def passwords_off_page(request: HttpRequest) -> HttpResponse:
    message = PASSWORDS_OFF.format(provider=settings.CONTROLPANEL_OIDC_PROVIDER_NAME)
    return render(
        request, "registration/sso_refused.html", {"title": "Passwords are off", "message": message}, status=403
    )


class SignInView(LoginView):
    """Django's sign-in form; while local passwords are off, only the sign-on button (and a
    posted password is refused, counting as no attempt)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.CONTROLPANEL_LOCAL_PASSWORDS:
            return passwords_off_page(request)
        return super().post(request, *args, **kwargs)


class SignOutView(OIDCLogoutView):
    """Signing out (POST): the panel's session ends; after a single sign-on, with
    CONTROLPANEL_OIDC_END_SESSION_ENDPOINT set, the provider's too (oidc.provider_logout_url)."""

    http_method_names = ["post"]


def _refusal(request: HttpRequest, message: str, *, status: int, groups: tuple[str, ...] | None = None) -> HttpResponse:
    context = {
        "title": "Not signed in",
        "message": message,
        "groups": groups,
        "groups_claim": settings.CONTROLPANEL_OIDC_GROUPS_CLAIM,
    }
    return render(request, "registration/sso_refused.html", context, status=status)


def _not_set_up() -> Http404:
    return Http404("Single sign-on is not set up in this panel (CONTROLPANEL_OIDC_CLIENT_ID).")


class SsoStartView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider's sign-in page (state, nonce and PKCE in the session)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        View.__init__(self, *args, **kwargs)  # the endpoints are looked up per request, below

    def get(self, request: HttpRequest) -> HttpResponse:
        if not sso_enabled():
            raise _not_set_up()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoints().authorization
        except ProviderUnreachable as exc:
            return _refusal(request, str(exc), status=502)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back: signs the person in, or says why not."""

    user: Any = None

    def get(self, request: HttpRequest) -> HttpResponse:
        if not sso_enabled():
            raise _not_set_up()
        provider = settings.CONTROLPANEL_OIDC_PROVIDER_NAME
        try:
            return super().get(request)
        except SsoRefused as exc:
            return _refusal(request, str(exc), status=403, groups=exc.groups)
        except ProviderUnreachable as exc:
            return _refusal(request, str(exc), status=502)
        except requests.RequestException as exc:
            status = getattr(exc.response, "status_code", None)
            reason = f"it answered {status}" if status else "it could not be reached"
            return _refusal(request, f"The panel could not finish the sign-in with {provider}: {reason}.", status=502)
        except SuspiciousOperation:
            return _refusal(request, self._incomplete(provider), status=400)

    @staticmethod
    def _incomplete(provider: str) -> str:
        return (
            f"The sign-in with {provider} did not complete: the link was old, used twice or opened in "
            "another browser. Start again from the sign-in page."
        )

    def login_failure(self) -> HttpResponse:
        provider = settings.CONTROLPANEL_OIDC_PROVIDER_NAME
        error = self.request.GET.get("error")
        if error:
            described = self.request.GET.get("error_description") or error
            message = f"{provider} did not sign you in: {described[:300]}"
        elif self.user is not None and not self.user.is_active:
            message = f"Your account {self.user.username} is deactivated in this panel. Ask an admin."
        else:
            message = self._incomplete(provider)
        return _refusal(self.request, message, status=403)
