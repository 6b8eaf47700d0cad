"""Settings, driven by the environment (django-environ).

With nothing set the panel runs on its embedded default: SQLite under the data folder and
kombu's `filesystem://` broker (folders under the data folder), so a fresh machine needs no
server. Production sets DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL (Redis).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DATA_DIR = Path(env.str("CONTROLPANEL_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _embedded_secret_key() -> str:
    """A per-installation key kept in the data folder, so a laptop needs no configuration."""
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or _embedded_secret_key()
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "hardware",
    "deployments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "controlpanel.middleware.LoginRequiredMiddleware",
    "controlpanel.context.ChangeContextMiddleware",
]

ROOT_URLCONF = "controlpanel.urls"
WSGI_APPLICATION = "controlpanel.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "controlpanel.roles.role_context",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the workers share the file: wait for the lock instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "hardware:dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# --- Celery -------------------------------------------------------------------------------
BROKER_DIR = DATA_DIR / "broker"
EMBEDDED_BROKER = "filesystem://"
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=EMBEDDED_BROKER)
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.2,
    }
else:
    # Redis redelivers unacknowledged tasks after the visibility timeout: keep it above the
    # longest task (an engine install or a long benchmark) so nothing runs twice.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 6 * 3600}
# The UI reads Operation rows, never a result backend.
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 5 * 3600
CELERY_TASK_TIME_LIMIT = 5 * 3600 + 300
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "reap-lost-operations": {"task": "deployments.tasks.reap_lost_operations", "schedule": 30.0},
    "rollup-telemetry": {"task": "hardware.tasks.rollup_telemetry", "schedule": 300.0},
}

# --- The panel ------------------------------------------------------------------------------
# Where a host agent keeps engine state (pid file, logs, watchdog pause flag).
HOST_STATE_DIR = Path(env.str("CONTROLPANEL_HOST_STATE_DIR", default=str(DATA_DIR / "host")))
# A host whose agent has not heartbeated for this long is shown offline.
HOST_OFFLINE_AFTER_S = env.int("CONTROLPANEL_HOST_OFFLINE_AFTER_S", default=90)
AGENT_HEARTBEAT_S = env.int("CONTROLPANEL_AGENT_HEARTBEAT_S", default=15)
TELEMETRY_INTERVAL_S = env.int("CONTROLPANEL_TELEMETRY_INTERVAL_S", default=10)
# Raw telemetry kept at full rate; older samples are rolled up to one per minute.
TELEMETRY_RAW_RETENTION_H = env.int("CONTROLPANEL_TELEMETRY_RAW_RETENTION_H", default=24)
TELEMETRY_ROLLUP_RETENTION_D = env.int("CONTROLPANEL_TELEMETRY_ROLLUP_RETENTION_D", default=30)

# Engines bind here on GPU hosts. Loopback by default (safe on a laptop); a GPU host that
# serves its LAN sets 0.0.0.0 and lets its firewall decide.
ENGINE_BIND_HOST = env.str("CONTROLPANEL_ENGINE_BIND_HOST", default="127.0.0.1")
ENGINE_READY_TIMEOUT_S = env.float("CONTROLPANEL_ENGINE_READY_TIMEOUT_S", default=900.0)
# Executables per engine, e.g. {"llama.cpp": "/opt/llama.cpp/build/bin/llama-server"}; empty = discover.
ENGINE_BINARIES = env.dict("CONTROLPANEL_ENGINE_BINARIES", default={})
# The watchdog (defaults: the seed's systemd watchdog).
WATCHDOG_INTERVAL_S = env.float("CONTROLPANEL_WATCHDOG_INTERVAL_S", default=30.0)
WATCHDOG_TIMEOUT_S = env.float("CONTROLPANEL_WATCHDOG_TIMEOUT_S", default=10.0)
WATCHDOG_FAILURES = env.int("CONTROLPANEL_WATCHDOG_FAILURES", default=10)
WATCHDOG_MAX_RESTARTS = env.int("CONTROLPANEL_WATCHDOG_MAX_RESTARTS", default=5)
WATCHDOG_WINDOW_S = env.float("CONTROLPANEL_WATCHDOG_WINDOW_S", default=3600.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("DJANGO_LOG_LEVEL", default="INFO")},
    # Readiness polls and metrics scrapes would log every request at INFO.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}
