from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandParser

from deployments.management.cli import PanelCommand


class Command(PanelCommand):
    help = "Create an admin login if none exists and print how to sign in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        if user_model.objects.filter(is_superuser=True).exists():
            self.stdout.write(
                "An admin login exists; sign in with it (reset a password: python manage.py changepassword NAME)."
            )
            return
        password = secrets.token_urlsafe(12)
        user_model.objects.create_superuser(options["username"], "", password)
        self.stdout.write(
            self.style.SUCCESS(
                f"Created admin login: user '{options['username']}', password '{password}' (shown once; change it "
                "with python manage.py changepassword)."
            )
        )
