from __future__ import annotations

import getpass
import sys
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser

from deployments.management.cli import ActionCommand, Actions, BadInput, get_actor, get_host, host_action, named_action
from deployments.services.secrets import secret_mark, secret_set


def _hub_flag(parser: CommandParser, *, required: bool) -> None:
    flag = parser.add_mutually_exclusive_group(required=required)
    flag.add_argument(
        "--hub-token",
        dest="hub_token",
        action="store_true",
        default=None,
        help="mark it as a Hugging Face token: the only secrets an import or a download sends to a hub",
    )
    flag.add_argument("--no-hub-token", dest="hub_token", action="store_false", help="unmark it")


class Command(ActionCommand):
    help = "Host secrets (engine API keys, hub tokens), encrypted at rest and named by revisions."

    def add_actions(self, actions: Actions[Any]) -> None:
        put = named_action(
            actions,
            "set",
            "create or rotate a secret: its value is read from a prompt or stdin, never from the command line",
        )
        _hub_flag(put, required=False)
        mark = named_action(actions, "mark", "mark or unmark a secret as a hub token (its value unchanged)")
        _hub_flag(mark, required=True)
        host_action(actions, "list", "the host's secrets, names only")

    def do_list(self, o: dict[str, Any]) -> None:
        for secret in get_host(o["host"]).secrets.order_by("name"):
            rotated = f", rotated {secret.rotated_at:%Y-%m-%d}" if secret.rotated_at else ""
            hub = ", hub token" if secret.hub_token else ""
            self.stdout.write(f"{secret.name} (created {secret.created_at:%Y-%m-%d}{rotated}{hub})")

    def do_mark(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        try:
            secret_mark(host=host, name=o["name"], hub_token=o["hub_token"], actor=get_actor(o["user"]))
        except ValidationError as exc:
            raise BadInput("; ".join(exc.messages)) from exc
        state = "is now" if o["hub_token"] else "is no longer"
        self.stdout.write(f"Secret {o['name']} of {host.name} {state} a hub token.")

    def do_set(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        value = getpass.getpass(f"Value of {o['name']}: ") if sys.stdin.isatty() else sys.stdin.readline()
        value = value.rstrip("\r\n")
        try:
            secret = secret_set(
                host=host, name=o["name"], value=value, actor=get_actor(o["user"]), hub_token=o["hub_token"]
            )
        except ValidationError as exc:
            raise BadInput("; ".join(exc.messages)) from exc
        hub = " (a hub token)" if secret.hub_token else ""
        self.stdout.write(f"Stored secret {o['name']}{hub} for {host.name}; revisions refer to it by name.")
