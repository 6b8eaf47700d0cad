"""Changing one's own password, throttled like signing in: a wrong current password is a failed
sign-in for django-axes (same limit, same cool-off, same lockout page, same unlock), so a stolen
session cannot try passwords without end. A change revokes the person's API tokens (api.signals).
Refused while local passwords are off (CONTROLPANEL_LOCAL_PASSWORDS)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.contrib.auth.views import PasswordChangeView
from django.http import HttpRequest, HttpResponse
from django.urls import reverse_lazy

from .lockout import lockout_response
from .signin import passwords_off_page


def _credentials(request: HttpRequest) -> dict[str, str]:
    return {"username": request.user.get_username()}


def _allowed(request: HttpRequest) -> bool:
    from axes.handlers.proxy import AxesProxyHandler

    return bool(AxesProxyHandler.is_allowed(request, _credentials(request)))


class ThrottledPasswordChangeView(PasswordChangeView):
    success_url = reverse_lazy("password_change_done")

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.CONTROLPANEL_LOCAL_PASSWORDS:
            return passwords_off_page(request)
        return super().dispatch(request, *args, **kwargs)

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not _allowed(request):
            return lockout_response(request, credentials=_credentials(request))
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        if "old_password" in form.errors:
            credentials = _credentials(self.request)
            user_login_failed.send(sender=__name__, credentials=credentials, request=self.request)
            if not _allowed(self.request):
                return lockout_response(self.request, credentials=credentials)
        return super().form_invalid(form)
