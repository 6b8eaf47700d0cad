from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from controlpanel.context import change_context
from deployments.services.catalog import catalog_load


class Command(BaseCommand):
    help = "Manage the starter catalog of GPU types and model variants (`catalog load`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["load"])

    def handle(self, *args: Any, **options: Any) -> None:
        with change_context("cli"):
            created = catalog_load()
        self.stdout.write(
            f"Catalog loaded: {created['gpu_types']} new GPU type(s), {created['model_variants']} new model(s)."
        )
