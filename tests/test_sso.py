"""Single sign-on without the browser: the provider's groups map to roles at each sign-in (several
groups, an unknown group, a role set by hand kept), local passwords turned off, and the pages that
say why a sign-in was refused. The whole flow against a real provider in real Chromium is
tests/browser/test_sso_browser.py."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.urls import reverse

from api.models import ApiToken
from api.tokens import token_authenticate, token_create
from controlpanel.roles import parse_role_map, role_for_groups, user_role
from core.models import AuditEvent
from people import services
from people.models import SsoAccount
from people.sso import SsoClaims, SsoRefused, claims_read, person_follow_groups, sso_sign_in

MAP = "lab-admins=admin, lab-ops=operator\n/lab/readers=viewer"


@pytest.fixture
def sso_settings(settings):
    settings.OIDC_RP_CLIENT_ID = "panel"
    settings.OIDC_RP_CLIENT_SECRET = "s3cret-client"
    settings.CONTROLPANEL_OIDC_DISCOVERY_URL = "http://127.0.0.1:9/realms/lab"  # nothing listens there
    settings.CONTROLPANEL_OIDC_ROLE_MAP = MAP
    settings.CONTROLPANEL_OIDC_PROVIDER_NAME = "Keycloak"
    settings.CONTROLPANEL_OIDC_BUTTON_LABEL = "Sign in with Keycloak"
    return settings


ISSUER = "https://sso.lab.example/realms/lab"


def _claims(*groups: str, sub: str = "sub-1", username: str = "sam", issuer: str = ISSUER) -> SsoClaims:
    return SsoClaims(
        issuer=issuer, subject=sub, username=username, email=f"{username}@lab.example", groups=tuple(sorted(groups))
    )


def _fresh(user: User) -> User:
    return User.objects.get(pk=user.pk)


# --- the role map ------------------------------------------------------------------------------


def test_the_highest_role_of_several_groups_wins_and_unknown_groups_give_none():
    role_map = parse_role_map(MAP)
    assert role_for_groups(["lab-ops", "lab-admins", "coffee"], role_map) == "admin"
    assert role_for_groups(["/lab/readers", "lab-ops"], role_map) == "operator"
    assert role_for_groups(["coffee", "LAB-ADMINS"], role_map) is None  # exact names, case included
    assert role_for_groups([], role_map) is None
    everyone = parse_role_map("lab-ops=operator,*=viewer")
    assert role_for_groups(["coffee"], everyone) == "viewer"
    assert role_for_groups(["lab-ops"], everyone) == "operator"


@pytest.mark.parametrize("text", ["lab-admins", "=admin", "lab-admins=root", "a=admin,b=Viewer"])
def test_a_mistyped_role_map_stops_the_panel_at_start_naming_the_pair(settings, text):
    from django.apps import apps

    with pytest.raises(ValueError):
        parse_role_map(text)
    settings.CONTROLPANEL_OIDC_ROLE_MAP = text
    with pytest.raises(ImproperlyConfigured, match="CONTROLPANEL_OIDC_ROLE_MAP"):
        apps.get_app_config("people").ready()


def test_groups_are_read_from_the_claim_set_even_nested(settings):
    claims = {"sub": "s", "preferred_username": "kim", "groups": ["b", "a", 3, ""]}
    assert claims_read(claims).groups == ("a", "b")
    settings.CONTROLPANEL_OIDC_GROUPS_CLAIM = "realm_access.roles"
    nested = claims_read({"sub": "s", "realm_access": {"roles": ["lab-ops"]}})
    assert nested.groups == ("lab-ops",) and nested.username == ""


# --- sign-ins ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_first_sign_in_creates_the_person_with_their_mapped_role(sso_settings):
    user = sso_sign_in(claims=_claims("lab-ops", "lab-admins", "coffee"))
    assert user_role(user) == "admin" and user.username == "sam" and not user.has_usable_password()
    account = SsoAccount.objects.get(user=user)
    assert account.provider == "Keycloak" and account.groups == ["coffee", "lab-admins", "lab-ops"]
    event = AuditEvent.objects.get(action="person.create")
    assert "first sign-in with Keycloak" in event.summary and event.data["role"] == "admin"


@pytest.mark.django_db
def test_a_sign_in_never_takes_over_a_local_account_of_the_same_name(sso_settings, viewer):
    user = sso_sign_in(claims=_claims("lab-ops", username="vera"))
    assert user.username == "vera-2" and user.pk != viewer.pk
    assert user_role(_fresh(viewer)) == "viewer"


@pytest.mark.django_db
def test_a_stranger_whose_groups_map_to_nothing_is_refused_and_gets_no_account(sso_settings):
    with pytest.raises(SsoRefused) as refused:
        sso_sign_in(claims=_claims("coffee", "LAB-ADMINS"))
    assert refused.value.groups == ("LAB-ADMINS", "coffee")
    assert not User.objects.filter(username="sam").exists() and not SsoAccount.objects.exists()


@pytest.mark.django_db
def test_a_default_role_lets_everyone_in(sso_settings):
    sso_settings.CONTROLPANEL_OIDC_ROLE_MAP = MAP + ",*=viewer"
    assert user_role(sso_sign_in(claims=_claims())) == "viewer"


@pytest.mark.django_db
def test_each_sign_in_sets_the_role_again_and_a_change_revokes_tokens(sso_settings):
    sam = sso_sign_in(claims=_claims("lab-ops"))
    secret = token_create(user=sam, name="ci", actor=sam).secret
    sam = sso_sign_in(claims=_claims("lab-ops", "coffee"))  # same role: the token stays
    assert token_authenticate(secret) == sam
    sam = sso_sign_in(claims=_claims("/lab/readers"))
    assert user_role(_fresh(sam)) == "viewer"
    assert token_authenticate(secret) is None
    assert ApiToken.objects.get().revoked_reason == "the role changed"
    assert AuditEvent.objects.filter(action="person.role", summary__contains="operator -> viewer").exists()


@pytest.mark.django_db
def test_losing_every_mapped_group_takes_the_role_and_refuses(sso_settings):
    sam = sso_sign_in(claims=_claims("lab-ops"))
    with pytest.raises(SsoRefused):
        sso_sign_in(claims=_claims("coffee"))
    assert user_role(_fresh(sam)) is None  # kept although the sign-in was refused
    assert SsoAccount.objects.get(user=sam).groups == ["coffee"]


@pytest.mark.django_db
def test_a_role_set_by_hand_is_kept_until_an_admin_hands_it_back(sso_settings, admin_user):
    sam = sso_sign_in(claims=_claims("/lab/readers"))
    services.person_set_role(user=sam, role="operator", actor=admin_user)
    assert SsoAccount.objects.get(user=sam).role_by_hand
    sam = sso_sign_in(claims=_claims("/lab/readers"))
    assert user_role(_fresh(sam)) == "operator"
    sam = sso_sign_in(claims=_claims("coffee"))  # no mapped group at all: the hand-set role still lets them in
    assert user_role(_fresh(sam)) == "operator"

    assert person_follow_groups(user=sam, actor=admin_user) is None  # their last groups map to nothing
    assert user_role(_fresh(sam)) is None and not SsoAccount.objects.get(user=sam).role_by_hand
    assert AuditEvent.objects.filter(action="person.sso_groups", actor=admin_user).exists()
    assert user_role(sso_sign_in(claims=_claims("lab-ops"))) == "operator"


@pytest.mark.django_db
def test_the_last_admin_keeps_admin_when_their_groups_change(sso_settings):
    ann = sso_sign_in(claims=_claims("lab-admins", sub="ann", username="ann"))
    ann = sso_sign_in(claims=_claims("lab-ops", sub="ann", username="ann"))
    assert user_role(_fresh(ann)) == "admin"
    sso_sign_in(claims=_claims("lab-admins", sub="bob", username="bob"))
    assert user_role(_fresh(sso_sign_in(claims=_claims("lab-ops", sub="ann", username="ann")))) == "operator"


@pytest.mark.django_db
def test_a_deactivated_person_is_refused_and_nothing_changes(sso_settings, admin_user):
    sam = sso_sign_in(claims=_claims("lab-ops"))
    services.person_set_active(user=sam, active=False, actor=admin_user)
    with pytest.raises(SsoRefused, match="deactivated"):
        sso_sign_in(claims=_claims("lab-admins"))
    assert user_role(User.objects.get(pk=sam.pk)) is None  # inactive: no role while deactivated
    assert SsoAccount.objects.get(user=sam).groups == ["lab-ops"]


# --- the issuer: a `sub` counts only at the issuer that gave it -----------------------------------

OTHER_ISSUER = "https://login.other-tenant.example/v2.0"


@pytest.mark.django_db
def test_a_second_issuers_user_with_the_admins_sub_is_refused_and_does_not_get_the_account(sso_settings):
    ann = sso_sign_in(claims=_claims("lab-admins", sub="ann-sub", username="ann"))
    account = SsoAccount.objects.get(user=ann)
    assert account.issuer == ISSUER and user_role(ann) == "admin"

    with pytest.raises(SsoRefused, match="linked to another identity provider") as refused:
        sso_sign_in(claims=_claims("lab-admins", sub="ann-sub", username="mallory", issuer=OTHER_ISSUER))
    assert OTHER_ISSUER in str(refused.value) and "ann" not in str(refused.value)
    # Neither the admin's account nor one of their own; the admin's link is as it was.
    assert list(User.objects.values_list("username", flat=True)) == ["ann"]
    assert SsoAccount.objects.get().issuer == ISSUER
    assert SsoAccount.objects.get().last_sign_in == account.last_sign_in
    event = AuditEvent.objects.get(action="person.sso_refused")
    assert event.data["issuer"] == OTHER_ISSUER and event.data["linked_issuer"] == ISSUER
    assert OTHER_ISSUER in event.summary and event.actor is None

    # The right issuer (a trailing slash is the same issuer) still signs the admin in.
    assert sso_sign_in(claims=_claims("lab-admins", sub="ann-sub", username="ann", issuer=ISSUER + "/")) == ann


@pytest.mark.django_db
def test_the_issuer_comes_from_the_signed_id_token_not_the_user_info(sso_settings, monkeypatch):
    """Through the backend: the ID token says the other issuer; user info naming the first does not help."""
    from people.oidc import SsoBackend

    sso_sign_in(claims=_claims("lab-admins", sub="ann-sub", username="ann"))
    backend = SsoBackend()
    monkeypatch.setattr(backend, "get_userinfo", lambda *a: {"sub": "ann-sub", "iss": ISSUER, "groups": ["lab-admins"]})
    payload = {"iss": OTHER_ISSUER, "sub": "ann-sub", "preferred_username": "mallory"}
    with pytest.raises(SsoRefused, match="linked to another identity provider"):
        backend.get_or_create_user("access", "id-token", payload)
    with pytest.raises(SsoRefused, match="names no issuer|without an issuer"):
        backend.get_or_create_user("access", "id-token", {"sub": "ann-sub"})
    assert User.objects.count() == 1 and AuditEvent.objects.filter(action="person.sso_refused").count() == 1


@pytest.mark.django_db
def test_the_refusal_is_said_on_the_callback_page(client, sso_settings, monkeypatch):
    from mozilla_django_oidc.views import OIDCAuthenticationCallbackView

    sso_sign_in(claims=_claims("lab-admins", sub="ann-sub", username="ann"))

    def callback(view, request):
        sso_sign_in(claims=_claims("lab-admins", sub="ann-sub", issuer=OTHER_ISSUER))

    monkeypatch.setattr(OIDCAuthenticationCallbackView, "get", callback)
    response = client.get(reverse("sso_callback"), {"code": "c", "state": "s"})
    assert response.status_code == 403 and "linked to another identity provider" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_existing_links_get_the_configured_issuer_and_unknown_ones_take_the_next(sso_settings):
    """The data migration: links made before issuers were kept get the configured provider's."""
    from importlib import import_module

    from django.apps import apps

    migration = import_module("people.migrations.0002_sso_account_issuer")
    sam = sso_sign_in(claims=_claims("lab-ops"))
    SsoAccount.objects.update(issuer="")
    sso_settings.CONTROLPANEL_OIDC_DISCOVERY_URL = ISSUER + "/.well-known/openid-configuration"
    migration.fill_issuer(apps, None)
    assert SsoAccount.objects.get(user=sam).issuer == ISSUER

    # Only the endpoints were set: unknown, so the next sign-in's issuer becomes theirs, then only it.
    SsoAccount.objects.update(issuer="")
    sso_settings.CONTROLPANEL_OIDC_DISCOVERY_URL = ""
    migration.fill_issuer(apps, None)
    assert SsoAccount.objects.get(user=sam).issuer == ""
    assert sso_sign_in(claims=_claims("lab-ops", issuer=OTHER_ISSUER)) == sam
    assert SsoAccount.objects.get(user=sam).issuer == OTHER_ISSUER
    assert AuditEvent.objects.filter(action="person.sso_issuer").exists()
    with pytest.raises(SsoRefused, match="linked to another identity provider"):
        sso_sign_in(claims=_claims("lab-ops"))


# --- pages -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_people_page_says_how_each_person_signs_in(client, sso_settings, admin_user):
    sam = sso_sign_in(claims=_claims("lab-ops"))
    client.force_login(admin_user)
    listing = client.get(reverse("people:list")).content.decode()
    assert "Signs in with" in listing
    assert '<td class="signs-in-with">Keycloak</td>' in listing and '<td class="signs-in-with">password</td>' in listing
    detail = client.get(reverse("people:detail", args=[sam.username])).content.decode()
    assert "Groups at Keycloak" in detail and "<code>lab-ops</code>" in detail
    assert "their groups, at each sign-in" in detail
    client.post(reverse("people:role", args=[sam.username]), {"role": "viewer"})
    detail = client.get(reverse("people:detail", args=[sam.username])).content.decode()
    assert "hand: their groups no longer change it" in detail and 'id="person-sso-groups"' in detail
    response = client.post(reverse("people:sso_groups", args=[sam.username]), follow=True)
    assert "follows their groups again: operator" in response.content.decode()
    assert user_role(_fresh(sam)) == "operator"
    refused = client.post(reverse("people:sso_groups", args=[admin_user.username]), follow=True)
    assert "does not sign in with single sign-on" in refused.content.decode()


@pytest.mark.django_db
def test_the_sign_in_page_offers_the_button_and_the_password_form(client, sso_settings):
    page = client.get("/accounts/login/?next=/people/").content.decode()
    assert 'id="sso-sign-in"' in page and "Sign in with Keycloak" in page and "/accounts/sso/start/?next=" in page
    assert 'name="password"' in page


@pytest.mark.django_db
def test_a_provider_that_cannot_be_reached_is_said_not_a_500(client, sso_settings):
    response = client.get(reverse("sso_login"))
    assert response.status_code == 502
    assert "discovery document" in response.content.decode() and "s3cret-client" not in response.content.decode()


@pytest.mark.django_db
def test_the_provider_refusing_is_said_on_the_page(client, sso_settings):
    response = client.get(reverse("sso_callback"), {"error": "access_denied", "error_description": "User said no"})
    assert response.status_code == 403 and "Keycloak did not sign you in: User said no" in response.content.decode()
    stale = client.get(reverse("sso_callback"), {"code": "x", "state": "y"})
    assert stale.status_code == 403 and "did not complete" in stale.content.decode()


@pytest.mark.django_db
def test_without_a_client_id_single_sign_on_is_off(client):
    assert client.get(reverse("sso_login")).status_code == 404
    assert client.get(reverse("sso_callback")).status_code == 404
    assert 'id="sso-sign-in"' not in client.get("/accounts/login/").content.decode()


# --- local passwords off -----------------------------------------------------------------------


@pytest.mark.django_db
def test_with_local_passwords_off_only_the_button_signs_in(client, sso_settings, admin_user):
    sso_settings.CONTROLPANEL_LOCAL_PASSWORDS = False
    page = client.get("/accounts/login/").content.decode()
    assert 'id="sso-sign-in"' in page and 'name="password"' not in page
    response = client.post("/accounts/login/", {"username": "ada", "password": "pw-ada"})
    assert response.status_code == 403 and "Local passwords are off" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_with_local_passwords_off_password_routes_refuse_and_password_sessions_end(client, settings, admin_user):
    client.force_login(admin_user)
    assert client.get(reverse("password_change")).status_code == 200
    settings.CONTROLPANEL_LOCAL_PASSWORDS = False
    assert client.get(reverse("dashboard:index")).url.startswith("/accounts/login/")  # signed out
    client.force_login(admin_user, backend="people.oidc.SsoBackend")
    for method in ("get", "post"):
        response = getattr(client, method)(reverse("password_change"), {"old_password": "pw-ada"})
        assert response.status_code == 403 and "Local passwords are off" in response.content.decode()
    before = User.objects.get(pk=admin_user.pk).password
    reset = client.post(reverse("people:password", args=["ada"]), follow=True).content.decode()
    assert "Local passwords are off" in reset and User.objects.get(pk=admin_user.pk).password == before
    added = client.post(reverse("people:add"), {"username": "nina", "role": "viewer"})
    assert added.status_code == 400 and not User.objects.filter(username="nina").exists()
    with pytest.raises(ValidationError):
        services.person_create(username="nina", role="viewer", actor=admin_user)


@pytest.mark.django_db
def test_the_sign_in_pages_keep_the_strict_policy(client, sso_settings):
    from tests.test_csp import assert_strict, refused

    sso_settings.CONTROLPANEL_LOCAL_PASSWORDS = False
    for response in (
        client.get("/accounts/login/"),
        client.get(reverse("sso_callback"), {"error": "access_denied"}),
        client.post("/accounts/login/", {"username": "ada", "password": "x"}),
    ):
        assert_strict(response)
        assert refused(response.content.decode()).problems == []


@pytest.mark.django_db
def test_ensure_admin_says_how_to_break_glass_while_passwords_are_off(settings):
    from io import StringIO

    from django.core.management import call_command

    settings.CONTROLPANEL_LOCAL_PASSWORDS = False
    out = StringIO()
    call_command("ensure_admin", stdout=out)
    assert "CONTROLPANEL_LOCAL_PASSWORDS=off" in out.getvalue() and "docs/sso.md#break-glass" in out.getvalue()
    assert "Created admin login" in out.getvalue() and User.objects.filter(is_superuser=True).exists()


# --- signing out at the provider too (RP-initiated logout) ---------------------------------------

END_SESSION = "http://127.0.0.1:9/realms/lab/protocol/openid-connect/logout"
ID_TOKEN = "eyJ.the-id-token.sig"  # what the callback keeps in the session (OIDC_STORE_ID_TOKEN)


def _sso_session(client, user) -> None:
    client.force_login(user, backend="people.oidc.SsoBackend")
    session = client.session
    session["oidc_id_token"] = ID_TOKEN
    session.save()


@pytest.mark.django_db
def test_signing_out_after_a_sign_on_sends_the_browser_to_the_providers_end_session(client, sso_settings):
    sso_settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT = END_SESSION
    sam = sso_sign_in(claims=_claims("lab-ops"))
    _sso_session(client, sam)
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    url = urlsplit(response["Location"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == END_SESSION
    assert parse_qs(url.query) == {
        "client_id": ["panel"],
        "post_logout_redirect_uri": ["http://testserver/accounts/login/"],
        "id_token_hint": ["eyJ.the-id-token.sig"],
    }
    assert "_auth_user_id" not in client.session  # the panel's session ended too
    assert client.get("/").status_code == 302


@pytest.mark.django_db
def test_a_password_session_or_no_endpoint_signs_out_of_the_panel_only(client, sso_settings, viewer):
    sso_settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT = END_SESSION
    client.force_login(viewer, backend="people.oidc.LocalPasswordBackend")
    assert client.post(reverse("logout"))["Location"] == "/accounts/login/"
    sso_settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT = ""
    _sso_session(client, sso_sign_in(claims=_claims("lab-ops")))
    assert client.get(reverse("logout")).status_code == 405  # a link cannot sign anyone out
    assert client.post(reverse("logout"))["Location"] == "/accounts/login/"


@pytest.mark.parametrize(
    "url,client_id,message",
    [
        ("keycloak/logout", "panel", "end-session URL"),
        ("ftp://sso.example.org/logout", "panel", "end-session URL"),
        ("https://sso.example.org/logout", "", "single sign-on is off"),
    ],
)
def test_a_wrong_end_session_endpoint_stops_the_panel_at_start(settings, url, client_id, message):
    from django.apps import apps

    settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT = url
    settings.OIDC_RP_CLIENT_ID = client_id
    with pytest.raises(ImproperlyConfigured, match=f"CONTROLPANEL_OIDC_END_SESSION_ENDPOINT .*{message}"):
        apps.get_app_config("people").ready()
