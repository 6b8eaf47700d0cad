"""Settings of a GPU host's agent (`manage.py agent` loads these, see manage.py).

The agent holds no keys to the panel: no database (DATABASES is empty, so any ORM use fails
loudly), and no DJANGO_SECRET_KEY (the one below is random per process and signs nothing).
It holds the broker URL, the panel's URL and its own host token, and talks to the panel only
through the agent API (hostagent.panel).
"""

from __future__ import annotations

import secrets

from controlpanel.settings_shared import *  # noqa: F403 - the broker, host state, watchdog, logging
from controlpanel.settings_shared import env

SECRET_KEY = "agent-" + secrets.token_urlsafe(32)  # Django wants one; nothing the agent does uses it
DEBUG = False
INSTALLED_APPS = ["hostagent"]
DATABASES: dict[str, dict[str, object]] = {}
USE_TZ = True
TIME_ZONE = "UTC"

# Where the panel is, and this host's credential (`manage.py host token NAME` on the panel).
CONTROLPANEL_URL = env.str("CONTROLPANEL_URL", default="http://127.0.0.1:8000")
CONTROLPANEL_HOST_TOKEN = env.str("CONTROLPANEL_HOST_TOKEN", default="")
CONTROLPANEL_HOST_TOKEN_FILE = env.str("CONTROLPANEL_HOST_TOKEN_FILE", default="")
# A CA bundle to verify the panel's TLS certificate with (default: the system's).
CONTROLPANEL_CA_BUNDLE = env.str("CONTROLPANEL_CA_BUNDLE", default="")
# Reports the panel could not take (it was away) wait here until it is back.
AGENT_OUTBOX_DIR = env.str("CONTROLPANEL_AGENT_OUTBOX_DIR", default="")  # "" = <host state>/outbox
# How long an operation's end is retried before it waits in the outbox for the panel instead.
AGENT_REPORT_PATIENCE_S = env.float("CONTROLPANEL_AGENT_REPORT_PATIENCE_S", default=30.0)
