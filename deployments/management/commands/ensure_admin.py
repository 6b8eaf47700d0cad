from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import CommandParser

from deployments.management.cli import PanelCommand


class Command(PanelCommand):
    help = "Create an admin login if none exists and print how to sign in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.CONTROLPANEL_LOCAL_PASSWORDS:
            # The break-glass way in (docs/sso.md): the password below signs in only with passwords on.
            self.stdout.write(
                "Local passwords are off (CONTROLPANEL_LOCAL_PASSWORDS=off): a password login works only after "
                "setting it on and restarting the panel (docs/sso.md#break-glass)."
            )
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
