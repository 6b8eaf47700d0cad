from __future__ import annotations

from typing import Any

from deployments.management.cli import (
    ActionCommand,
    Actions,
    bounded_int,
    get_actor,
    get_host,
    get_revision,
    host_action,
    named_action,
)
from deployments.services.aliases import alias_delete, alias_list, alias_set
from hardware.review import ChangeRequested
from schedules.choices import ChangeKind
from schedules.cli import add_when_options, scheduled_line, when_of
from schedules.services import change_schedule


class Command(ActionCommand):
    help = "Aliases of a host's front door, stable names for its clients; a switch moves the replaced revision's."

    def add_actions(self, actions: Actions[Any]) -> None:
        put = named_action(actions, "set", "create or move an alias to one of the host's served revisions")
        put.add_argument("--revision", required=True, type=bounded_int(1, 2**31 - 1))
        add_when_options(put)
        host_action(actions, "list", "the host's aliases and the revisions they point at")
        named_action(actions, "delete", "delete an alias")

    def do_list(self, o: dict[str, Any]) -> None:
        for alias in alias_list(get_host(o["host"])):
            self.stdout.write(f"{alias.name}\tr{alias.revision.number}")

    def do_delete(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        alias_delete(host=host, name=o["name"], actor=get_actor(o["user"]))
        self.stdout.write(f"Deleted {host.name}'s alias {o['name']}.")

    def do_set(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        revision = get_revision(host, o["revision"])
        try:
            if (later := when_of(o)) is not None:
                params = {"name": o["name"], "revision": revision.number}
                change = change_schedule(
                    kind=ChangeKind.ALIAS, host=host, params=params, **later, actor=get_actor(o["user"])
                )
                self.stdout.write(scheduled_line(change))
                return
            alias = alias_set(host=host, name=o["name"], revision=revision, actor=get_actor(o["user"]))
        except ChangeRequested as exc:  # a protected host: the move (at its time) waits for a review
            self.stdout.write(" ".join(exc.messages))
            return
        self.stdout.write(f"{host.name}: {alias.name} -> r{revision.number}.")
