"""The settings switch between the embedded default and PostgreSQL/Redis by environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({'db': settings.DATABASES['default']['ENGINE'], "
    "'name': str(settings.DATABASES['default']['NAME']), 'broker': settings.CELERY_BROKER_URL, "
    "'data': str(settings.DATA_DIR)}))"
)


def _settings_under(env: dict[str, str]) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    clean.update(env, DJANGO_SETTINGS_MODULE="controlpanel.settings")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_nothing_set_means_sqlite_and_a_serverless_broker(tmp_path):
    found = _settings_under({"CONTROLPANEL_DATA_DIR": str(tmp_path)})
    assert found["db"] == "django.db.backends.sqlite3"
    assert found["name"] == str(tmp_path / "db.sqlite3")
    # The embedded Redis that `python -m embedded` starts, on a socket in the data folder.
    assert found["broker"] == f"redis+socket://{tmp_path / 'redis' / 'redis.sock'}"
    assert (tmp_path / "redis").is_dir()
    assert (tmp_path / "secret_key").exists()


def test_environment_selects_postgres_and_redis(tmp_path):
    found = _settings_under(
        {
            "CONTROLPANEL_DATA_DIR": str(tmp_path),
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/panel",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/3",
        }
    )
    assert found["db"] == "django.db.backends.postgresql"
    assert found["name"] == "panel"
    assert found["broker"] == "redis://127.0.0.1:6379/3"


def test_a_setting_out_of_its_range_stops_the_start_naming_it(tmp_path):
    """Numbers this panel reads from the environment are checked against their range: a typo
    never becomes a zero wait, a deleted history or an unbounded cache."""
    for variable, value, said in (
        ("CONTROLPANEL_NOTIFICATIONS_RETRY_S", "60,-5", "at most 10 waits of 1 to 86400 seconds"),
        ("CONTROLPANEL_NOTIFICATIONS_RETRY_S", ",".join(["60"] * 11), "at most 10 waits"),
        ("CONTROLPANEL_NOTIFICATIONS_KEPT_DAYS", "0", "from 1 to 36,500"),
        ("CONTROLPANEL_CARD_CACHE_ENTRIES", "lots", "from 300 to 1,000,000"),
        ("CONTROLPANEL_ENGINE_LOG_RUN_BYTES", "1e99", "from 4,096 to"),
        ("CONTROLPANEL_AGENT_ENGINE_LOG_S", "nan", "from 0.1 to 60"),
        ("CONTROLPANEL_OIDC_SIGN_ALGO", "none", "one of RS256"),  # an unsigned ID token, never
        ("CONTROLPANEL_ROUTER_BIND", "4100", "HOST:PORT (e.g. 127.0.0.1:4100) or off"),
        ("CONTROLPANEL_ROUTER_URL", "lab.example:4100", "an http(s) URL"),
        ("CONTROLPANEL_ROUTER_REFRESH_S", "0", "from 0.2 to 300"),
    ):
        clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
        clean.update(
            {variable: value, "CONTROLPANEL_DATA_DIR": str(tmp_path)}, DJANGO_SETTINGS_MODULE="controlpanel.settings"
        )
        out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=clean, capture_output=True, text=True)
        assert out.returncode != 0 and f"{variable} must" in out.stderr and said in out.stderr, (
            variable,
            out.stderr[-300:],
        )
    assert _settings_under({"CONTROLPANEL_DATA_DIR": str(tmp_path), "CONTROLPANEL_NOTIFICATIONS_RETRY_S": ""})


def test_an_end_session_endpoint_is_checked_at_start_and_let_through_the_sign_out_form(tmp_path):
    """CONTROLPANEL_OIDC_END_SESSION_ENDPOINT: set, the sign-out form's redirect may go to the
    provider (the policy's form-action) and the ID token is kept for id_token_hint; a value that
    is no URL, or set with single sign-on off, stops the start naming it."""
    probe = (
        "import json, django; from django.conf import settings; django.setup(); "
        "policy = settings.CONTENT_SECURITY_POLICY['DIRECTIVES']; "
        "print(json.dumps([policy['form-action'], settings.OIDC_STORE_ID_TOKEN]))"
    )
    base = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    base.update(CONTROLPANEL_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="controlpanel.settings")
    good = {
        "CONTROLPANEL_OIDC_CLIENT_ID": "panel",
        "CONTROLPANEL_OIDC_END_SESSION_ENDPOINT": "https://sso.example.org/realms/lab/protocol/openid-connect/logout",
    }
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env={**base, **good}, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [["'self'", "https://sso.example.org"], True]
    for wrong, said in (
        ({"CONTROLPANEL_OIDC_END_SESSION_ENDPOINT": "sso/logout"}, "end-session URL"),
        ({"CONTROLPANEL_OIDC_CLIENT_ID": ""}, "single sign-on is off"),
    ):
        out = subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, env={**base, **good, **wrong}, capture_output=True, text=True
        )
        assert out.returncode != 0 and "CONTROLPANEL_OIDC_END_SESSION_ENDPOINT" in out.stderr and said in out.stderr
