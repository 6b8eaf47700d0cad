from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from core.context import change_context
from deployments.management.cli import PanelCommand
from deployments.services.catalog import catalog_load


class Command(PanelCommand):
    help = "Manage the starter catalog of GPU types and model variants (`catalog load`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["load"])

    def handle(self, *args: Any, **options: Any) -> None:
        with change_context("cli"):
            created = catalog_load()
        self.stdout.write(
            f"Catalog loaded: {created['gpu_types']} new GPU type(s), {created['model_variants']} new model(s)."
        )
