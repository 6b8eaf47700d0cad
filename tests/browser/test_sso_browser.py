"""Single sign-on end to end, in real Chromium, against a real OpenID Connect provider run on this
machine (django-oidc-provider in a throwaway project: tests/support/oidc_provider.py): the
panel's button leads to the provider's own login page; back in the panel the person is signed in
with the role their provider groups map to. Someone in no mapped group gets a page that says so,
and no account. The mapping's rules without a browser: tests/test_sso.py."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User

from controlpanel.roles import user_role
from people.models import SsoAccount
from tests.browser.chromium import snap
from tests.support.oidc_provider import OidcProvider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PEOPLE = [
    {"username": "olga", "email": "olga@lab.example", "password": "olga-at-the-lab", "groups": ["lab-ops", "coffee"]},
    {"username": "sid", "email": "sid@lab.example", "password": "sid-at-the-lab", "groups": ["coffee"]},
]


@pytest.fixture
def provider(live_server: Any, tmp_path: Path, settings: Any) -> Iterator[OidcProvider]:
    op = OidcProvider(
        tmp_path / "provider",
        redirect_uri=f"{live_server.url}/accounts/sso/callback/",
        post_logout_redirect_uri=f"{live_server.url}/accounts/login/",
        people=PEOPLE,
    )
    op.start()
    settings.CONTROLPANEL_OIDC_DISCOVERY_URL = op.discovery_url
    settings.OIDC_RP_CLIENT_ID = op.client_id
    settings.OIDC_RP_CLIENT_SECRET = op.client_secret
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.CONTROLPANEL_OIDC_ROLE_MAP = "lab-admins=admin,lab-ops=operator"
    settings.CONTROLPANEL_OIDC_PROVIDER_NAME = "Lab ID"
    settings.CONTROLPANEL_OIDC_BUTTON_LABEL = "Sign in with Lab ID"
    settings.CONTROLPANEL_LOCAL_PASSWORDS = False
    try:
        yield op
    finally:
        op.stop()


def _sign_in_at_the_provider(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/accounts/login/")
    assert page.locator("input[name=password]").count() == 0  # local passwords are off: the button only
    page.click("#sso-sign-in")
    page.wait_for_selector("#op-sign-in")  # the provider's own login page
    assert page.url.startswith("http://127.0.0.1:")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("#op-sign-in")


def test_signing_in_through_the_provider_lands_with_the_mapped_role(
    live_server: Any, page: Any, provider: OidcProvider
) -> None:
    from playwright.sync_api import expect

    _sign_in_at_the_provider(page, live_server.url, "olga", "olga-at-the-lab")
    expect(page.locator("header .who")).to_contain_text("olga · operator")
    snap(page, "sso-signed-in")
    assert page.url.startswith(live_server.url) and "/accounts/" not in page.url
    olga = User.objects.get(username="olga")
    assert user_role(olga) == "operator" and olga.email == "olga@lab.example" and not olga.has_usable_password()
    account = SsoAccount.objects.get(user=olga)
    assert account.provider == "Lab ID" and account.groups == ["coffee", "lab-ops"]
    assert page.locator("header a[href='/accounts/password/']").count() == 0

    # Someone whose groups map to no role: the provider signs them in, the panel says why not.
    other = page.context.browser.new_context()
    try:
        stranger = other.new_page()
        _sign_in_at_the_provider(stranger, live_server.url, "sid", "sid-at-the-lab")
        expect(stranger.locator("#sign-in-refused")).to_contain_text("none of your groups there gives a role")
        expect(stranger.locator("#provider-groups")).to_contain_text("coffee")
        snap(stranger, "sso-refused")
    finally:
        other.close()
    assert not User.objects.filter(username="sid").exists()


def test_signing_out_ends_the_providers_session_too(live_server: Any, page: Any, provider: OidcProvider, settings: Any):
    """RP-initiated logout (CONTROLPANEL_OIDC_END_SESSION_ENDPOINT): the provider's end-session
    endpoint gets the ID token as id_token_hint and sends the browser back to the sign-in page; the
    next sign-in asks for the password at the provider again (its session ended too)."""
    from playwright.sync_api import expect

    settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT = provider.end_session_url
    settings.OIDC_STORE_ID_TOKEN = True
    # As the setting does at start: the sign-out form's redirect may go to the provider.
    policy = copy.deepcopy(settings.CONTENT_SECURITY_POLICY)
    policy["DIRECTIVES"]["form-action"].append(provider.url)
    settings.CONTENT_SECURITY_POLICY = policy
    _sign_in_at_the_provider(page, live_server.url, "olga", "olga-at-the-lab")
    expect(page.locator("header .who")).to_contain_text("olga · operator")
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if r.url.startswith(provider.end_session_url) else None)
    page.locator("header form.who button[type=submit]").click()
    page.wait_for_url(f"{live_server.url}/accounts/login/")
    assert len(seen) == 1 and "id_token_hint=" in seen[0]
    assert "post_logout_redirect_uri=" + quote(f"{live_server.url}/accounts/login/", safe="") in seen[0]
    snap(page, "sso-signed-out")
    page.click("#sso-sign-in")
    page.wait_for_selector("#op-sign-in")  # the provider asks again: its session ended with the panel's
    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url  # and the panel's session is gone
