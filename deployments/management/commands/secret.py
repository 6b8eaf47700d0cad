from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser

from controlpanel.context import change_context
from deployments.management.cli import BadInput, PanelCommand, get_actor, get_host
from deployments.services.secrets import secret_set


class Command(PanelCommand):
    help = (
        "Host secrets (engine API keys, hub tokens), encrypted at rest and named by revisions: "
        "`secret set --host H NAME` reads the value from a prompt or stdin, never from the command line; "
        "`secret list --host H` prints names only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        put = sub.add_parser("set", help="create or rotate a secret (the value is read, not passed)")
        put.add_argument("--host", required=True)
        put.add_argument("name")
        put.add_argument("--user", default=None)
        lst = sub.add_parser("list")
        lst.add_argument("--host", required=True)

    def handle(self, *args: Any, **o: Any) -> None:
        host = get_host(o["host"])
        if o["action"] == "list":
            for secret in host.secrets.order_by("name"):
                rotated = f", rotated {secret.rotated_at:%Y-%m-%d}" if secret.rotated_at else ""
                self.stdout.write(f"{secret.name} (created {secret.created_at:%Y-%m-%d}{rotated})")
            return
        value = getpass.getpass(f"Value of {o['name']}: ") if sys.stdin.isatty() else sys.stdin.readline()
        value = value.rstrip("\r\n")
        try:
            with change_context("cli"):
                secret_set(host=host, name=o["name"], value=value, actor=get_actor(o["user"]))
        except ValidationError as exc:
            raise BadInput("; ".join(exc.messages)) from exc
        self.stdout.write(f"Stored secret {o['name']} for {host.name}; revisions refer to it by name.")
