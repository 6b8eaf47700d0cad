"""`python manage.py agent`: this GPU host's agent, in the foreground (hostagent.agent).

Runs on controlpanel.settings_agent (manage.py picks it): no database, no secret key of the
panel's. It needs the broker (CELERY_BROKER_URL), the panel (CONTROLPANEL_URL) and this host's
token (CONTROLPANEL_HOST_TOKEN_FILE, "-" for standard input, or CONTROLPANEL_HOST_TOKEN), which it
keeps in memory only: the variable is wiped from its environment once read.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from hostagent.agent import AgentConfigError, run
from hostagent.panel import CredentialRefused


class Command(BaseCommand):
    help = "Run this GPU host's agent: Celery worker on host.<name>, heartbeat, telemetry, watchdog."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None, help="refuse to start unless the token is this host's")
        parser.add_argument(
            "--address",
            default=None,
            help="the address this host suggests to the panel (shown to admins; an admin sets the one used); "
            "default: CONTROLPANEL_LAN_ADDRESS, else 127.0.0.1",
        )
        parser.add_argument("--no-watchdog", action="store_true")
        parser.add_argument("--no-telemetry", action="store_true")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run(
                name=options["name"],
                address=options["address"] or settings.LAN_ADDRESS or "127.0.0.1",
                watchdog=not options["no_watchdog"],
                telemetry=not options["no_telemetry"],
                loglevel=options["loglevel"],
            )
        except (AgentConfigError, CredentialRefused) as exc:
            raise CommandError(str(exc), returncode=2) from exc
