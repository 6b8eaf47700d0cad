"""`manage.py change open|list|approve|reject|reconfirm|withdraw`: change requests of protected
hosts from the shell (docs/change-requests.md). Every decision names a person (--user)."""

from __future__ import annotations

from typing import Any

from changes.choices import ChangeKind, Verdict
from changes.models import ChangeRequest
from changes.selectors import change_list
from changes.services import change_decide, change_open, stale_reasons
from controlpanel.params import MAX_INT
from deployments.management.cli import ActionCommand, Actions, BadInput, bounded_int, get_actor, get_host


class Command(ActionCommand):
    help = (
        "Change requests: open one (a switch, an alias move or a serving-set change proposed for review), "
        "list them, approve (the change runs), reject, reconfirm or withdraw (the author)."
    )

    def add_actions(self, actions: Actions[Any]) -> None:
        opened = actions.add_parser("open", help="propose a change for review")
        opened.add_argument("--host", required=True)
        opened.add_argument("--kind", required=True, choices=ChangeKind.values)
        opened.add_argument("--revision", required=True, type=bounded_int(1, MAX_INT))
        opened.add_argument("--name", default="", help="alias: the alias to create or move")
        opened.add_argument("--mode", default="", help="serving: pinned, on-demand or off")
        opened.add_argument("--idle-ttl-s", type=bounded_int(1, MAX_INT), default=None, help="serving: idle seconds")
        opened.add_argument("--override-reason", default="", help="switch, admins only: despite planner errors")
        opened.add_argument("--user", required=True, help="the author (a person: roles apply)")
        listed = actions.add_parser("list", help="pending requests (--all: decided ones too)")
        listed.add_argument("--host", default=None)
        listed.add_argument("--all", action="store_true")
        for verdict in DECISIONS:
            decide = actions.add_parser(verdict, help=Verdict(verdict).label.lower())
            decide.add_argument("id", type=bounded_int(1, MAX_INT))
            decide.add_argument("--comment", default="")
            decide.add_argument("--user", required=True, help="who decides (a person: roles apply)")

    def do_list(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"]) if o["host"] else None
        for change in change_list(host=host, pending=not o["all"]):
            stale = " (stale)" if stale_reasons(change) else ""
            author = change.author.username if change.author else "-"
            self.stdout.write(f"#{change.pk}\t{change.host.name}\t{change.state}{stale}\t{author}\t{change.summary}")

    def do_open(self, o: dict[str, Any]) -> None:
        params: dict[str, Any] = {"revision": o["revision"]}
        if o["kind"] == ChangeKind.ALIAS:
            params["name"] = o["name"]
        elif o["kind"] == ChangeKind.SERVING:
            params |= {"mode": o["mode"], "idle_ttl_s": o["idle_ttl_s"]}
        else:
            params["override_reason"] = o["override_reason"]
        host = get_host(o["host"])
        change = change_open(host=host, kind=o["kind"], params=params, actor=get_actor(o["user"]))
        self.stdout.write(f"Opened change request #{change.pk}: {change.summary}.")

    def decide(self, o: dict[str, Any]) -> None:
        change = ChangeRequest.objects.filter(pk=o["id"]).first()
        if change is None:
            raise BadInput(f"No change request #{o['id']}.")
        change = change_decide(change=change, verdict=o["action"], comment=o["comment"], actor=get_actor(o["user"]))
        done = f"Request #{change.pk}: {change.get_state_display().lower()}."
        if change.operation_id:
            done += f" Operation {change.operation_id} queued."
        self.stdout.write(done)

    do_approve = do_reject = do_reconfirm = do_withdraw = decide


DECISIONS = ("approve", "reject", "reconfirm", "withdraw")  # each runs Command.decide
