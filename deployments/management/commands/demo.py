from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from core.context import change_context
from deployments.management.cli import PanelCommand
from deployments.services.demo import demo_load, demo_remove


class Command(PanelCommand):
    help = "Record the seed labs as offline demo hosts (`demo load`) or remove them (`demo remove`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["load", "remove"])

    def handle(self, *args: Any, **options: Any) -> None:
        with change_context("cli"):
            if options["action"] == "load":
                hosts = demo_load()
                self.stdout.write(f"Demo data loaded: {len(hosts)} new demo host(s).")
            else:
                self.stdout.write(f"Removed {demo_remove()} demo host(s) and their history.")
