"""The settings switch between the embedded default and PostgreSQL/Redis by environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serving.binds import lan_address

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
        ("CONTROLPANEL_HOST_EVENTS_KEPT", "9", "from 10 to 1,000,000"),
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


LAN_PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({k: getattr(settings, k) for k in ('LAN_ADDRESS', 'PANEL_BIND', 'ALLOWED_HOSTS', "
    "'CONTROLPANEL_URL', 'ROUTER_BIND', 'ROUTER_URL', 'ENGINE_BIND_HOST')}))"
)


def _lan_settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    for name in ("PANEL_BIND", "DJANGO_ALLOWED_HOSTS", "CONTROLPANEL_URL", "CONTROLPANEL_ROUTER_BIND"):
        clean.pop(name, None)
    clean.update(env, CONTROLPANEL_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="controlpanel.settings")
    return subprocess.run([sys.executable, "-c", LAN_PROBE], cwd=ROOT, env=clean, capture_output=True, text=True)


def test_one_lan_address_serves_the_box_and_each_bind_still_overrides_it(tmp_path):
    """CONTROLPANEL_LAN_ADDRESS moves the panel, the router and the engines onto the LAN address;
    the allowed hosts and the URLs follow; each of the old settings still wins over it."""
    lan = json.loads(_lan_settings(tmp_path, CONTROLPANEL_LAN_ADDRESS="10.213.7.1").stdout.splitlines()[-1])
    assert lan["PANEL_BIND"] == "10.213.7.1:8000"
    assert "10.213.7.1" in lan["ALLOWED_HOSTS"] and "127.0.0.1" in lan["ALLOWED_HOSTS"]
    assert lan["CONTROLPANEL_URL"] == "http://10.213.7.1:8000"
    assert (lan["ROUTER_BIND"], lan["ROUTER_URL"]) == ("10.213.7.1:4100", "http://10.213.7.1:4100")
    assert lan["ENGINE_BIND_HOST"] == "10.213.7.1"

    over = _lan_settings(
        tmp_path,
        CONTROLPANEL_LAN_ADDRESS="10.213.7.1",
        PANEL_BIND="0.0.0.0:9000",
        CONTROLPANEL_ROUTER_BIND="127.0.0.1:4200",
        CONTROLPANEL_ENGINE_BIND_HOST="127.0.0.1",
        CONTROLPANEL_URL="https://panel.lab.example",
    )
    found = json.loads(over.stdout.splitlines()[-1])
    assert found["PANEL_BIND"] == "0.0.0.0:9000" and found["ROUTER_BIND"] == "127.0.0.1:4200"
    assert found["ENGINE_BIND_HOST"] == "127.0.0.1" and found["CONTROLPANEL_URL"] == "https://panel.lab.example"

    # Without the LAN setting, the allowed hosts follow a bind on one address (the local agent's hello
    # reaches the panel there), and the URL names it.
    bound = json.loads(_lan_settings(tmp_path, PANEL_BIND="10.213.7.1:8010").stdout.splitlines()[-1])
    assert "10.213.7.1" in bound["ALLOWED_HOSTS"] and bound["CONTROLPANEL_URL"] == "http://10.213.7.1:8010"
    assert bound["ROUTER_BIND"] == "127.0.0.1:4100" and bound["ENGINE_BIND_HOST"] == "127.0.0.1"


def test_a_lan_address_that_is_not_one_stops_the_start_naming_the_setting(tmp_path):
    for value, said in (
        ("127.0.0.1", "is a loopback address"),
        ("0.0.0.0", "unspecified"),
        ("169.254.1.1", "link-local"),
        ("gpu-box.lan", "must be this machine's IP address"),
    ):
        out = _lan_settings(tmp_path, CONTROLPANEL_LAN_ADDRESS=value)
        assert out.returncode != 0 and "CONTROLPANEL_LAN_ADDRESS" in out.stderr and said in out.stderr, out.stderr[
            -300:
        ]


@pytest.mark.parametrize("value", ["127.0.0.1", "gpu-box.lan"])
def test_an_agent_started_alone_refuses_a_bad_lan_address_in_one_sentence_naming_it(tmp_path, value):
    """The agent's settings share CONTROLPANEL_LAN_ADDRESS with the panel's (settings_shared): an agent
    started on its own checks it at start by the panel's rule, before it reaches for the panel or
    binds an engine there (it used to fail only at the engine's start)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "DJANGO_", "CONTROLPANEL_"))}
    clean.update(CONTROLPANEL_LAN_ADDRESS=value, CONTROLPANEL_DATA_DIR=str(tmp_path))
    agent = [sys.executable, "manage.py", "agent"]
    out = subprocess.run(agent, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)
    with pytest.raises(ValueError) as refused:
        lan_address(value)
    assert "CONTROLPANEL_LAN_ADDRESS" in str(refused.value)
    assert (out.returncode, out.stderr.strip()) == (2, f"CommandError: {refused.value}")
    # A good address passes that check: the start goes on to the host token, which is not set here.
    clean["CONTROLPANEL_LAN_ADDRESS"] = "10.213.7.1"
    good = subprocess.run(agent, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)
    assert good.returncode == 2 and "CONTROLPANEL_LAN_ADDRESS" not in good.stderr and "token" in good.stderr
