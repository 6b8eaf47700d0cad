"""A real OpenID Connect provider for the single sign-on test: django-oidc-provider (PyPI) in a
throwaway Django project written under a temporary folder, with its own SQLite database, signing
keys, client and people, served by its own `runserver` on its own port.

People sign in on its own login page; its user info carries a `groups` claim (the person's Django
groups there), as Keycloak's group mapper or Authentik's profile scope send them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.support.llama import free_port
from tests.support.receivers import wait_for

SETTINGS = """
from pathlib import Path
HERE = Path(__file__).resolve().parent
SECRET_KEY = "provider-test-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions", "oidc_provider"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "provider_urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [HERE / "templates"],
              "APP_DIRS": True, "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": HERE / "provider.sqlite3"}}
# Tables straight from the models (a throwaway database needs no history): seconds faster.
MIGRATION_MODULES = {app.rpartition(".")[2]: None for app in INSTALLED_APPS}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a test provider: fast sign-ins
LOGIN_URL = "/login/"
# Its own cookie names: the panel runs on this machine too.
SESSION_COOKIE_NAME = "op_session"
CSRF_COOKIE_NAME = "op_csrftoken"
SITE_URL = "{site}"
OIDC_USERINFO = "provider_claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "provider_claims.GroupsClaims"
"""

URLS = """
from django.contrib.auth.views import LoginView
from django.urls import include, path
urlpatterns = [
    path("login/", LoginView.as_view(template_name="op_login.html")),
    path("openid/", include("oidc_provider.urls", namespace="oidc_provider")),
]
"""

CLAIMS = """
from oidc_provider.lib.claims import ScopeClaims

def userinfo(claims, user):
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["name"] = user.get_full_name() or user.username
    return claims

class GroupsClaims(ScopeClaims):
    info_groups = ("Groups", "The groups you are in.")

    def scope_groups(self):
        return {"groups": sorted(g.name for g in self.user.groups.all())}
"""

LOGIN_PAGE = """<!doctype html><title>Lab identity provider</title>
<h1>Lab identity provider</h1>
<form method="post">{% csrf_token %}{{ form.as_p }}<input type="hidden" name="next" value="{{ next }}">
<button type="submit" id="op-sign-in">Sign in to the lab</button></form>
"""

MAIN = """
import json, os, sys
import django
django.setup()
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from oidc_provider.models import Client, ResponseType

call_command("migrate", run_syncdb=True, verbosity=0)
call_command("creatersakey")
spec = json.loads(os.environ["PROVIDER_SPEC"])
for person in spec["people"]:
    user = User.objects.create_user(person["username"], person["email"], person["password"])
    user.groups.set([Group.objects.get_or_create(name=g)[0] for g in person["groups"]])
client = Client.objects.create(
    name="panel", client_id=spec["client_id"], client_secret=spec["client_secret"], client_type="confidential",
    jwt_alg="RS256", require_consent=False, _redirect_uris=spec["redirect_uri"],
    _post_logout_redirect_uris=spec["post_logout_redirect_uri"],
)
client.response_types.add(ResponseType.objects.create(value="code", description="code (Authorization Code Flow)"))
call_command("runserver", f"127.0.0.1:{spec['port']}", use_reloader=False, use_threading=True, skip_checks=True)
"""


class OidcProvider:
    """Start with `start()`; `discovery_url` is its issuer; `stop()` ends it."""

    client_id = "llm-panel"
    client_secret = "provider-test-secret"

    def __init__(
        self, folder: Path, *, redirect_uri: str, people: list[dict[str, Any]], post_logout_redirect_uri: str = ""
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.discovery_url = f"{self.url}/openid"
        self.end_session_url = f"{self.discovery_url}/end-session"  # RP-initiated logout
        self.redirect_uri = redirect_uri
        self.post_logout_redirect_uri = post_logout_redirect_uri  # where it sends the browser back after it
        self.people = people
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = folder / "provider.log"

    def start(self, timeout_s: float = 60.0) -> OidcProvider:
        (self.folder / "templates").mkdir(parents=True, exist_ok=True)
        (self.folder / "provider_settings.py").write_text(SETTINGS.replace("{site}", self.url))
        (self.folder / "provider_urls.py").write_text(URLS)
        (self.folder / "provider_claims.py").write_text(CLAIMS)
        (self.folder / "provider_main.py").write_text(MAIN)
        (self.folder / "templates" / "op_login.html").write_text(LOGIN_PAGE)
        spec = {
            "people": self.people,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "redirect_uri": self.redirect_uri,
            "post_logout_redirect_uri": self.post_logout_redirect_uri,
            "port": self.port,
        }
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))},
            "DJANGO_SETTINGS_MODULE": "provider_settings",
            "PYTHONPATH": str(self.folder),
            "PROVIDER_SPEC": json.dumps(spec),
        }
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "provider_main.py"], cwd=self.folder, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the provider stopped:\n{self.log.read_text()[-4000:]}")
            try:
                return httpx.get(f"{self.discovery_url}/.well-known/openid-configuration", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_for(answers, timeout_s, "the OpenID Connect provider")
        except AssertionError:
            self.stop()
            raise AssertionError(f"the provider did not answer:\n{self.log.read_text()[-4000:]}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
