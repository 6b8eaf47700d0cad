"""Defaults of a deployed panel: `check --deploy` is clean in the documented production setup,
data files are private (0600 files, 0700 folders) and the Docker build context leaves out
everything local or secret."""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from controlpanel.hardening import parse_proxy_ssl_header, parse_umask

ROOT = Path(__file__).resolve().parent.parent
PANEL_ENV = {"DATABASE_URL", "CELERY_BROKER_URL", "CONTROLPANEL_DATA_DIR", "DJANGO_SECRET_KEY", "DJANGO_HTTPS"}


def documented_production_env() -> dict[str, str]:
    """The `.env` block of docs/production.md, with a real secret key."""
    page = (ROOT / "docs" / "production.md").read_text()
    block = re.search(r"```dotenv\n(.*?)```", page, re.S)
    assert block, "docs/production.md shows its .env in a ```dotenv block"
    found: dict[str, str] = {}
    for line in block.group(1).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    found["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    return found


def _run(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in PANEL_ENV and not k.startswith(("DJANGO_", "CONTROLPANEL_"))
    }
    clean.update({"CONTROLPANEL_DATA_DIR": str(tmp_path / "data"), "DJANGO_SETTINGS_MODULE": "controlpanel.settings"})
    clean.update(env)
    return subprocess.run(args, cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_in_the_documented_production_setup(tmp_path):
    env = documented_production_env()
    assert env["DJANGO_HTTPS"] == "true" and env["DATABASE_URL"].startswith("postgres://")
    out = _run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in (out.stdout + out.stderr).upper()
    assert "System check identified no issues" in out.stdout


def test_without_https_check_deploy_names_what_is_missing(tmp_path):
    env = documented_production_env()
    env["DJANGO_HTTPS"] = "false"
    out = _run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env, tmp_path)
    assert out.returncode != 0
    for code in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert code in out.stderr


PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "from django.db import connection; connection.ensure_connection(); "
    "print(json.dumps({k: str(getattr(settings, k)) for k in "
    "('SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', "
    "'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_HSTS_PRELOAD', 'SECURE_PROXY_SSL_HEADER', "
    "'AXES_FAILURE_LIMIT', 'AXES_COOLOFF_TIME', 'AXES_ENABLED')}))"
)


def _settings(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    out = _run([sys.executable, "-c", PROBE], env, tmp_path)
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


def test_https_switch_and_single_overrides(tmp_path):
    found = _settings({"DJANGO_HTTPS": "true"}, tmp_path)
    assert found["SESSION_COOKIE_SECURE"] == found["CSRF_COOKIE_SECURE"] == found["SECURE_SSL_REDIRECT"] == "True"
    assert found["SECURE_HSTS_SECONDS"] == "31536000" and found["SECURE_HSTS_PRELOAD"] == "True"
    assert found["SECURE_PROXY_SSL_HEADER"] == "None"
    found = _settings(
        {
            "DJANGO_HTTPS": "true",
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DJANGO_SECURE_HSTS_SECONDS": "3600",
            "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
        },
        tmp_path,
    )
    assert found["SECURE_SSL_REDIRECT"] == "False" and found["SECURE_HSTS_SECONDS"] == "3600"
    assert found["SECURE_PROXY_SSL_HEADER"] == "('HTTP_X_FORWARDED_PROTO', 'https')"
    laptop = _settings({}, tmp_path)
    assert laptop["SESSION_COOKIE_SECURE"] == "False" and laptop["SECURE_HSTS_SECONDS"] == "0"


def test_login_limits_come_from_the_environment(tmp_path):
    found = _settings({"CONTROLPANEL_LOGIN_FAILURE_LIMIT": "3", "CONTROLPANEL_LOGIN_COOLOFF_MINUTES": "60"}, tmp_path)
    assert found["AXES_FAILURE_LIMIT"] == "3" and found["AXES_COOLOFF_TIME"] == "1:00:00"
    found = _settings({"CONTROLPANEL_LOGIN_COOLOFF_MINUTES": "0", "CONTROLPANEL_LOGIN_THROTTLE": "false"}, tmp_path)
    assert found["AXES_COOLOFF_TIME"] == "None" and found["AXES_ENABLED"] == "False"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_fresh_data_folder_is_private(tmp_path):
    _settings({}, tmp_path)  # loads settings and opens the SQLite database
    data = tmp_path / "data"
    assert _mode(data) == 0o700
    assert _mode(data / "secret_key") == 0o600
    assert _mode(data / "db.sqlite3") == 0o600
    for folder in ("redis", "staticfiles"):
        assert _mode(data / folder) == 0o700, folder


def test_an_existing_readable_data_folder_is_made_private(tmp_path):
    data = tmp_path / "data"
    (data / "broker").mkdir(parents=True)
    for name in ("db.sqlite3", "secret_key"):
        (data / name).write_text("x" * 60 if name == "secret_key" else "")
        (data / name).chmod(0o644)
    data.chmod(0o755)
    (data / "broker").chmod(0o755)
    out = _run([sys.executable, "-c", "import django; django.setup()"], {}, tmp_path)
    assert out.returncode == 0, out.stderr
    assert _mode(data) == 0o700 and _mode(data / "broker") == 0o700
    assert _mode(data / "db.sqlite3") == 0o600 and _mode(data / "secret_key") == 0o600


def test_the_umask_reaches_files_the_panel_creates_later(tmp_path):
    code = (
        "import django, os; django.setup(); from django.conf import settings; "
        "p = settings.DATA_DIR / 'host' / 'engine.log'; p.parent.mkdir(); p.write_text('x'); "
        "print(oct(os.stat(p.parent).st_mode & 0o777), oct(os.stat(p).st_mode & 0o777))"
    )
    out = _run([sys.executable, "-c", code], {}, tmp_path)
    assert out.stdout.split() == ["0o700", "0o600"], out.stderr


def test_umask_and_proxy_header_values_are_checked():
    assert parse_umask("077") == parse_umask("0o077") == 0o077
    assert parse_umask("keep") is None and parse_umask("") is None
    for bad in ("rwx", "999", "1777"):
        with pytest.raises(ValueError):
            parse_umask(bad)
    assert parse_proxy_ssl_header("X-Forwarded-Proto=https") == ("HTTP_X_FORWARDED_PROTO", "https")
    assert parse_proxy_ssl_header("HTTP_X_FORWARDED_SSL=on") == ("HTTP_X_FORWARDED_SSL", "on")
    assert parse_proxy_ssl_header("") is None
    with pytest.raises(ValueError):
        parse_proxy_ssl_header("X Forwarded")


# --- the Docker build context --------------------------------------------------------------


def _dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def _docker_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore matching: root-relative, `**` any number of folders, `*` and `?`
    within one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves `path` out of the build context (a match on a folder covers
    everything below it; a later `!pattern` brings a path back)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        regex = _docker_regex(raw.lstrip("!").strip("/"))
        if any(regex.match(c) for c in candidates):
            ignored = not negate
    return ignored


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.production",
        "controlpanel/.env",
        "data/db.sqlite3",
        "data/secret_key",
        "data/host/engine.log",
        "db.sqlite3",
        ".venv/bin/python",
        ".git/config",
        "deployments/__pycache__/models.cpython-311.pyc",
        "node_modules/x/index.js",
        "llm_controlpanel.egg-info/PKG-INFO",
    ],
)
def test_dockerignore_keeps_local_and_secret_files_out(path):
    assert _ignored(path, _dockerignore()), path


@pytest.mark.parametrize(
    "path", ["manage.py", "controlpanel/settings.py", "templates/_base.html", "static/css/panel.css"]
)
def test_dockerignore_keeps_what_the_image_needs(path):
    assert not _ignored(path, _dockerignore()), path


def test_the_image_runs_as_an_unprivileged_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER panel$", dockerfile, re.M)
    assert dockerfile.index("USER panel") > dockerfile.index("COPY . .")
