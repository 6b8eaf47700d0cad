"""Issue 37 (info): the key-create API answer (the key's secret, shown once) and most signed-in
pages were sent without `Cache-Control: no-store`, so a browser's disk cache, its back button or a
shared proxy could keep them. Now every answer to a signed-in person and every answer of the token
APIs carries it (controlpanel.middleware.NoStoreMiddleware); tests/test_access.py checks it on
every page of the permission matrix."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.api.test_api import _token, call

pytestmark = pytest.mark.django_db


def test_the_key_create_answer_carrying_the_secret_is_not_stored(client: Client, admin_user: User) -> None:
    answer = call(client, "POST", "/api/v1/keys/", _token(admin_user), {"name": "app", "models": ["coder"]})
    assert answer.status_code == 201 and answer.json()["secret"]
    assert "no-store" in answer["Cache-Control"]
    listed = call(client, "GET", "/api/v1/keys/", _token(admin_user))
    assert listed.status_code == 200 and "no-store" in listed["Cache-Control"]
    refused = call(client, "GET", "/api/v1/keys/", "cpat_not-a-token")
    assert refused.status_code == 401 and "no-store" in refused["Cache-Control"]


def test_signed_in_pages_and_their_fragments_are_not_stored(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    for path in ("/", "/audit/", "/no-such-page/"):
        answer = client.get(path)
        assert "no-store" in answer.get("Cache-Control", ""), (path, answer.status_code)
    fragment = client.get("/", HTTP_HX_REQUEST="true")
    assert "no-store" in fragment["Cache-Control"]
