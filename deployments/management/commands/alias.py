from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from controlpanel.context import change_context
from deployments.management.cli import (
    PanelCommand,
    bounded_int,
    get_actor,
    get_host,
    get_revision,
    host_action,
    named_action,
)
from deployments.services.aliases import alias_delete, alias_list, alias_set


class Command(PanelCommand):
    help = "Aliases of a host's front door, stable names for its clients; a switch moves the replaced revision's."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        put = named_action(sub, "set", "create or move an alias to one of the host's served revisions")
        put.add_argument("--revision", required=True, type=bounded_int(1, 2**31 - 1))
        host_action(sub, "list", "the host's aliases and the revisions they point at")
        named_action(sub, "delete", "delete an alias")

    def handle(self, *args: Any, **o: Any) -> None:
        host = get_host(o["host"])
        if o["action"] == "list":
            for alias in alias_list(host):
                self.stdout.write(f"{alias.name}\tr{alias.revision.number}")
            return
        with change_context("cli"):
            if o["action"] == "delete":
                alias_delete(host=host, name=o["name"], actor=get_actor(o["user"]))
                self.stdout.write(f"Deleted {host.name}'s alias {o['name']}.")
                return
            revision = get_revision(host, o["revision"])
            alias = alias_set(host=host, name=o["name"], revision=revision, actor=get_actor(o["user"]))
        self.stdout.write(f"{host.name}: {alias.name} -> r{revision.number}.")
