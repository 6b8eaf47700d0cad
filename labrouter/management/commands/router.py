"""`manage.py router [--bind HOST:PORT]`: the lab router (labrouter), one OpenAI endpoint
for the whole lab in front of every host's front door, until Ctrl-C or SIGTERM."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from labrouter.run import serve_forever


class Command(BaseCommand):
    help = "Run the lab router: one OpenAI endpoint routing to the hosts' front doors (docs/front-door.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--bind", help="HOST:PORT (default: CONTROLPANEL_ROUTER_BIND, 127.0.0.1:4100)")

    def handle(self, *args: Any, bind: str | None = None, **options: Any) -> None:
        serve_forever(bind)
