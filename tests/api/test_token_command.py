"""`manage.py token create|list|revoke`: the token is printed once and works on the API, the list
never shows it, a revoked token is refused, and the command line's changes are audited as `cli`."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from core.models import AuditEvent

pytestmark = pytest.mark.django_db


def _token(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_token_made_on_the_command_line_works_until_it_is_revoked(client: Client, operator) -> None:
    secret, said = _token("create", "--user", operator.username, "--name", "laptop")
    secret = secret.strip()
    assert "shown once" in said
    assert client.get("/api/v1/hosts/", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200

    listed, _ = _token("list", "--user", operator.username)
    assert "laptop" in listed and "active" in listed and secret not in listed
    prefix = listed.split("…")[0]
    assert secret.startswith(prefix)

    said, _ = _token("revoke", prefix)
    assert said.startswith("Revoked")
    assert client.get("/api/v1/hosts/", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 401
    assert "revoked" in _token("list")[0]
    sources = AuditEvent.objects.filter(action__startswith="api_token.").values_list("source", flat=True)
    assert set(sources) == {"cli"}


def test_a_token_for_nobody_is_refused_with_exit_status_2() -> None:
    with pytest.raises(CommandError) as refused:
        _token("create", "--user", "nobody")
    assert refused.value.returncode == 2 and "nobody" in str(refused.value)
