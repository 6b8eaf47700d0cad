"""Personal API tokens follow their account (issue 24): a password change by any door, a
deactivation and a role change revoke every active token of the person, and the token page says
why. Changing one's password is throttled like signing in."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from api.models import ApiToken
from api.tokens import token_create
from core.models import AuditEvent
from people import services

pytestmark = pytest.mark.django_db
HOSTS = "/api/v1/hosts/"


def _get(client: Client, secret: str) -> int:
    return client.get(HOSTS, HTTP_AUTHORIZATION=f"Bearer {secret}").status_code


def _two_tokens(user: User) -> list[str]:
    return [token_create(user=user, name=f"ci-{i}", actor=user).secret for i in range(2)]


def test_a_password_reset_by_an_admin_revokes_the_persons_tokens(client, operator, admin_user):
    secrets = _two_tokens(operator)
    other = token_create(user=admin_user, name="mine", actor=admin_user).secret
    assert all(_get(client, s) == 200 for s in secrets)
    services.person_reset_password(user=operator, actor=admin_user)
    assert [_get(client, s) for s in secrets] == [401, 401]
    assert _get(client, other) == 200  # nobody else's
    rows = ApiToken.objects.filter(user=operator)
    assert {t.revoked_reason for t in rows} == {"the password changed"}
    event = AuditEvent.objects.filter(action="api_token.revoke").latest("pk")
    assert "2 API tokens of otto revoked: the password changed" in event.summary


def test_changing_ones_own_password_revokes_ones_tokens_and_the_page_says_why(client, operator):
    (secret, _) = _two_tokens(operator)
    client.force_login(operator)
    response = client.post(
        "/accounts/password/",
        {"old_password": "pw-otto", "new_password1": "a-New-long-pass-42", "new_password2": "a-New-long-pass-42"},
    )
    assert response.status_code == 302
    assert _get(Client(), secret) == 401
    client.force_login(User.objects.get(pk=operator.pk))
    page = client.get("/account/tokens/").content.decode()
    assert "revoked" in page and "the password changed" in page


def test_manage_py_changepassword_revokes_too(operator, monkeypatch):
    (secret, _) = _two_tokens(operator)
    monkeypatch.setattr("getpass.getpass", lambda prompt="": "another-Long-pass-77")
    call_command("changepassword", "otto")
    assert _get(Client(), secret) == 401


def test_deactivation_and_a_role_change_revoke_and_reactivation_brings_nothing_back(
    client, operator, viewer, admin_user
):
    (secret, _) = _two_tokens(operator)
    services.person_set_active(user=operator, active=False, actor=admin_user)
    services.person_set_active(user=operator, active=True, actor=admin_user)
    assert _get(client, secret) == 401
    assert set(ApiToken.objects.filter(user=operator).values_list("revoked_reason", flat=True)) == {
        "the account was deactivated"
    }
    (viewer_token, _) = _two_tokens(viewer)
    services.person_set_role(user=viewer, role="operator", actor=admin_user)
    assert _get(client, viewer_token) == 401
    assert ApiToken.objects.filter(user=viewer, revoked_reason="the role changed").count() == 2


def test_saving_an_account_for_other_reasons_keeps_its_tokens(client, operator):
    (secret, _) = _two_tokens(operator)
    client.force_login(operator)  # writes last_login
    operator.first_name = "Otto"
    operator.save()
    assert _get(client, secret) == 200


def _change(client: Client, old: str) -> Any:
    return client.post(
        "/accounts/password/",
        {"old_password": old, "new_password1": "a-New-long-pass-42", "new_password2": "a-New-long-pass-42"},
        REMOTE_ADDR="10.1.2.3",
    )


def test_the_password_form_locks_after_the_sign_in_limit_even_for_the_right_password(client, operator, settings):
    client.force_login(operator)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = _change(client, "guess")
        assert response.status_code == 200 and "old password was entered incorrectly" in response.content.decode()
    locked = _change(client, "guess")
    assert locked.status_code == 429 and "Signing in is locked" in locked.content.decode()
    assert _change(client, "pw-otto").status_code == 429
    assert User.objects.get(pk=operator.pk).check_password("pw-otto")  # unchanged
    # The same lock as signing in: an admin's unlock clears it.
    call_command("axes_reset_username", "otto")
    assert _change(client, "pw-otto").status_code == 302
