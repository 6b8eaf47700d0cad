"""The authentication backends: local passwords (which `CONTROLPANEL_LOCAL_PASSWORDS=off` turns
off) and single sign-on through the lab's OpenID Connect provider, on mozilla-django-oidc's
authorization-code flow (state, nonce and PKCE checked by the library; the ID token's signature
checked against the provider's published keys).

The provider's endpoints come from its discovery document unless set one by one; it is fetched
on the first sign-in and kept for an hour, never at start and never for a password sign-in, so a
provider that is down cannot stop the panel or its password sign-ins. Who the person is and which
role they get is `people.sso`'s work."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from django.shortcuts import resolve_url
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from . import sso

WELL_KNOWN = "/.well-known/openid-configuration"
DISCOVERY_TIMEOUT_S = 10.0
DISCOVERY_KEPT_S = 3600.0


def sso_enabled() -> bool:
    return bool(settings.OIDC_RP_CLIENT_ID)


def end_session_problem(url: str) -> str | None:
    """Why CONTROLPANEL_OIDC_END_SESSION_ENDPOINT cannot be used (None: it can, or it is unset)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.fragment:
        return f"must be the provider's end-session URL (https://...), not {url[:200]!r}."
    if not sso_enabled():
        return "is set but single sign-on is off: set CONTROLPANEL_OIDC_CLIENT_ID too, or unset it."
    return None


SSO_BACKEND = "people.oidc.SsoBackend"


def provider_logout_url(request: HttpRequest) -> str:
    """mozilla-django-oidc's OIDC_OP_LOGOUT_URL_METHOD, called before the panel's session ends:
    where signing out sends the browser. After a single sign-on, with an end-session endpoint
    set: the provider's, with the ID token as `id_token_hint` (when the session kept it), the
    client id, and `post_logout_redirect_uri` back to the panel's sign-in page. Otherwise (a
    password session, or no endpoint) the sign-in page itself."""
    back = resolve_url(settings.LOGOUT_REDIRECT_URL)
    endpoint = settings.CONTROLPANEL_OIDC_END_SESSION_ENDPOINT
    if not endpoint or request.session.get(BACKEND_SESSION_KEY) != SSO_BACKEND:
        return back
    params = {"client_id": settings.OIDC_RP_CLIENT_ID, "post_logout_redirect_uri": request.build_absolute_uri(back)}
    id_token = request.session.get("oidc_id_token")
    if isinstance(id_token, str) and id_token:
        params["id_token_hint"] = id_token
    return f"{endpoint}{'&' if urlsplit(endpoint).query else '?'}{urlencode(params)}"


class ProviderUnreachable(Exception):
    """The provider's discovery document could not be read (the message says why)."""


@dataclass(frozen=True)
class Endpoints:
    authorization: str
    token: str
    userinfo: str
    jwks: str


_FIELDS = {
    "authorization": ("OIDC_OP_AUTHORIZATION_ENDPOINT", "authorization_endpoint"),
    "token": ("OIDC_OP_TOKEN_ENDPOINT", "token_endpoint"),
    "userinfo": ("OIDC_OP_USER_ENDPOINT", "userinfo_endpoint"),
    "jwks": ("OIDC_OP_JWKS_ENDPOINT", "jwks_uri"),
}
_kept: dict[str, tuple[float, dict[str, Any]]] = {}
_kept_lock = threading.Lock()


def discovery_url(url: str) -> str:
    """The issuer's URL or its discovery document's: the discovery document's."""
    url = url.strip()
    return url if url.rstrip("/").endswith(WELL_KNOWN) else url.rstrip("/") + WELL_KNOWN


def endpoints() -> Endpoints:
    """The provider's endpoints: each one set in the environment, else the discovery document's."""
    explicit = {name: getattr(settings, setting) for name, (setting, _) in _FIELDS.items()}
    if all(explicit.values()):
        return Endpoints(**explicit)
    if not settings.CONTROLPANEL_OIDC_DISCOVERY_URL:
        raise ProviderUnreachable(
            "Set CONTROLPANEL_OIDC_DISCOVERY_URL (the provider's issuer URL) or all four endpoints."
        )
    document = _discovery(discovery_url(settings.CONTROLPANEL_OIDC_DISCOVERY_URL))
    found = {name: explicit[name] or str(document.get(key) or "") for name, (_, key) in _FIELDS.items()}
    missing = [key for name, (_, key) in _FIELDS.items() if not found[name]]
    if missing:
        raise ProviderUnreachable(f"The provider's discovery document names no {', '.join(missing)}.")
    return Endpoints(**found)


def _discovery(url: str) -> dict[str, Any]:
    with _kept_lock:
        kept = _kept.get(url)
    if kept is not None and time.monotonic() - kept[0] < DISCOVERY_KEPT_S:
        return kept[1]
    try:
        response = httpx.get(url, timeout=DISCOVERY_TIMEOUT_S, follow_redirects=True)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ProviderUnreachable(f"The provider's discovery document ({url}) could not be read: {exc}") from None
    if not isinstance(document, dict):
        raise ProviderUnreachable(f"The provider's discovery document ({url}) is not a JSON object.")
    with _kept_lock:
        _kept[url] = (time.monotonic(), document)
    return document


class LocalPasswordBackend(ModelBackend):
    """Django's user name and password, while local passwords are on. Off, it signs nobody in
    and its sessions end: those people sign in again through the provider."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if not settings.CONTROLPANEL_LOCAL_PASSWORDS:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)

    def get_user(self, user_id: Any) -> Any:
        if not settings.CONTROLPANEL_LOCAL_PASSWORDS:
            return None
        return super().get_user(user_id)


class SsoBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, answering only the provider's callback. Its accounts are
    keyed by the ID token's issuer and subject (`iss`, `sub`), never matched to a local account by
    e-mail or name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Offline on purpose: Django builds the backend for every signed-in request's session
        # and for every password sign-in; the endpoints are looked up in `authenticate`.
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or "nonce" not in kwargs or not sso_enabled():
            return None
        found = endpoints()
        self.OIDC_OP_TOKEN_ENDPOINT = found.token
        self.OIDC_OP_USER_ENDPOINT = found.userinfo
        self.OIDC_OP_JWKS_ENDPOINT = found.jwks
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not payload.get("sub") or userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("The provider's ID token names nobody, or its user info someone else.")
        # The ID token's claims, and the user info's over them (groups may come in either); who the
        # person is (issuer and subject) only from the ID token, whose signature was checked.
        claims = {**payload, **userinfo, "iss": payload.get("iss"), "sub": payload["sub"]}
        return sso.sso_sign_in(claims=sso.claims_read(claims))

    def get_user(self, user_id: Any) -> Any:
        # ModelBackend's: a deactivated person's sessions end (mozilla-django-oidc's keeps them).
        return ModelBackend.get_user(self, user_id)
