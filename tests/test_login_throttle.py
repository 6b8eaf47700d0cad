"""Login throttling (django-axes): a user name is locked out from one address after the failure
limit, for the cool-off time; the lockout page says so clearly; admins unlock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.management import call_command
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from controlpanel.hardening import client_ip

pytestmark = pytest.mark.django_db
LOGIN = "/accounts/login/"


def _attempt(client, username: str, password: str, addr: str = "127.0.0.1", **extra):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=addr, **extra)


def test_defaults_lock_after_five_failures_for_fifteen_minutes(settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    assert timedelta(minutes=15) == settings.AXES_COOLOFF_TIME
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"
    assert settings.MIDDLEWARE[-1] == "axes.middleware.AxesMiddleware"


def test_wrong_passwords_lock_the_user_name_then_even_the_right_one_is_refused(client, viewer):
    for _ in range(4):
        response = _attempt(client, "vera", "guess")
        assert response.status_code == 200 and b"Please enter a correct username and password" in response.content
    locked = _attempt(client, "vera", "guess")
    assert locked.status_code == 429
    body = locked.content.decode()
    assert "Signing in is locked" in body and "vera" in body and "15 minutes" in body
    assert "axes_reset_username vera" in body
    again = _attempt(client, "vera", "pw-vera")
    assert again.status_code == 429 and "_auth_user_id" not in client.session


def test_the_lock_is_per_user_name_and_address(client, viewer, operator):
    for _ in range(5):
        _attempt(client, "vera", "guess")
    assert _attempt(client, "vera", "pw-vera").status_code == 429
    # Another person at the same address and the same person elsewhere still sign in.
    assert _attempt(client, "otto", "pw-otto").status_code == 302
    client.logout()
    assert _attempt(client, "vera", "pw-vera", addr="10.0.0.7").status_code == 302


def test_a_success_resets_the_count(client, viewer):
    for _ in range(4):
        _attempt(client, "vera", "guess")
    assert _attempt(client, "vera", "pw-vera").status_code == 302
    client.logout()
    for _ in range(4):
        assert _attempt(client, "vera", "guess").status_code == 200
    assert _attempt(client, "vera", "pw-vera").status_code == 302


def test_the_lock_ends_after_the_cool_off(client, viewer):
    for _ in range(5):
        _attempt(client, "vera", "guess")
    assert _attempt(client, "vera", "pw-vera").status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert _attempt(client, "vera", "pw-vera").status_code == 302


def test_admin_command_unlocks(client, viewer, capsys):
    for _ in range(5):
        _attempt(client, "vera", "guess")
    call_command("axes_reset_username", "vera")
    assert "removed" in capsys.readouterr().out
    assert _attempt(client, "vera", "pw-vera").status_code == 302


def test_limits_follow_settings(client, viewer, settings):
    settings.AXES_FAILURE_LIMIT = 2
    settings.AXES_COOLOFF_TIME = None  # locked until an admin unlocks
    _attempt(client, "vera", "guess")
    locked = _attempt(client, "vera", "guess")
    assert locked.status_code == 429 and b"until an admin unlocks it" in locked.content


def test_there_is_no_unthrottled_way_in(client, admin_user):
    for _ in range(5):
        _attempt(client, "ada", "guess")
    # The Django admin's own login form is never reached anonymously: it leads to the throttled one.
    response = client.post(reverse("admin:login"), {"username": "ada", "password": "pw-ada"})
    assert response.status_code == 302 and response.url.startswith(LOGIN)
    assert "_auth_user_id" not in client.session
    assert _attempt(client, "ada", "pw-ada").status_code == 429


def test_behind_a_proxy_the_client_address_comes_from_x_forwarded_for(settings, client, viewer):
    factory = RequestFactory()
    spoofed = factory.get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
    settings.CONTROLPANEL_PROXY_COUNT = 0
    assert client_ip(spoofed) == "10.0.0.1"  # no proxy trusted: the header is ignored
    settings.CONTROLPANEL_PROXY_COUNT = 1
    assert client_ip(spoofed) == "203.0.113.9"  # the entry the proxy added, not the client's own
    assert client_ip(factory.get("/", REMOTE_ADDR="10.0.0.1")) == "10.0.0.1"
    assert client_ip(factory.get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="junk")) == "10.0.0.1"
    # The lock follows the real client: rotating the forged part changes nothing.
    for n in range(5):
        _attempt(client, "vera", "guess", addr="10.0.0.1", HTTP_X_FORWARDED_FOR=f"1.1.1.{n}, 203.0.113.9")
    assert _attempt(client, "vera", "pw-vera", addr="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 429
    ok = _attempt(client, "vera", "pw-vera", addr="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.4")
    assert ok.status_code == 302
