"""`manage.py schedule list|cancel`: the scheduled changes (schedules/). It lives with the other
commands on the panel's command-line base (deployments.management.cli), above schedules, which
imports nothing of deployments."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from deployments.management.cli import (
    ActionCommand,
    Actions,
    BadInput,
    add_user_option,
    bounded_int,
    get_actor,
    get_host,
)
from schedules import selectors
from schedules.kinds import describe
from schedules.models import ScheduledChange
from schedules.services import change_cancel


class Command(ActionCommand):
    help = (
        "Scheduled changes (made with `switch --at/--window`, `alias set --at/--window`): list the "
        "upcoming ones by day and the last week's outcomes, or cancel one before it runs."
    )

    def add_actions(self, actions: Actions[Any]) -> None:
        show = actions.add_parser("list", help="upcoming changes by day, then the last week's outcomes")
        show.add_argument("--host", default=None)
        cancel = actions.add_parser("cancel", help="cancel a pending change by its number")
        cancel.add_argument("id", type=bounded_int(1, 2**63 - 1))
        add_user_option(cancel)

    def do_cancel(self, o: dict[str, Any]) -> None:
        change = ScheduledChange.objects.select_related("host").filter(pk=o["id"]).first()
        if change is None:
            raise BadInput(f"No scheduled change #{o['id']}.")
        try:
            change_cancel(change=change, actor=get_actor(o["user"]))
        except ValidationError as exc:
            raise BadInput("; ".join(exc.messages)) from exc
        self.stdout.write(f"Cancelled #{change.pk}: {change.host.name} {describe(change.kind, change.params)}.")

    def do_list(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"]) if o["host"] else None
        for day in selectors.upcoming_by_day(host=host):
            self.stdout.write(f"{day.day:%a %Y-%m-%d}")
            for c in day.changes:
                busy = f"\tbusy, tried {c.attempts}x" if c.attempts else ""
                window = " (window)" if c.in_window else ""
                who = c.created_by_name or "the panel"
                line = f"  #{c.pk}\t{c.run_at:%H:%M}{window}\t{c.host.name}\t{describe(c.kind, c.params)}\tby {who}"
                self.stdout.write(line + busy)
        for c in selectors.recent_outcomes(host=host):
            what = describe(c.kind, c.params)
            self.stdout.write(f"#{c.pk}\t{c.state}\t{c.run_at:%Y-%m-%d %H:%M}\t{c.host.name}\t{what}\t{c.outcome}")
