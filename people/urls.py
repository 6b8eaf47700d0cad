"""Signing in and out, single sign-on and one's own password, under /accounts/ (controlpanel/urls.py).
The names are global (`login`, `logout`, `sso_login`, `sso_callback`, `password_change`,
`password_change_done`): Django's LOGIN_URL and mozilla-django-oidc's callback setting name them.
The People pages are views.py's own urlpatterns, under /people/."""

from django.contrib.auth import views as auth_views
from django.urls import path

from .password import ThrottledPasswordChangeView
from .signin import SignInView, SignOutView, SsoCallbackView, SsoStartView

urlpatterns = [
    path("login/", SignInView.as_view(), name="login"),
    # Single sign-on (docs/sso.md): off (404) until CONTROLPANEL_OIDC_CLIENT_ID is set.
    path("sso/start/", SsoStartView.as_view(), name="sso_login"),
    path("sso/callback/", SsoCallbackView.as_view(), name="sso_callback"),
    path("logout/", SignOutView.as_view(), name="logout"),
    path("password/", ThrottledPasswordChangeView.as_view(), name="password_change"),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
]
