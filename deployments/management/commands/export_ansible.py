from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from .export import Command as ExportCommand


class Command(ExportCommand):
    help = (
        "Print a revision as an Ansible group_vars YAML (default: the host's active, else latest, revision); "
        "the same as `export --to ansible`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--revision", type=int, default=None, help="revision number")

    def handle(self, *args: Any, **options: Any) -> None:
        super().handle(*args, **{**options, "target": "ansible", "via": None})  # group_vars go through no router
