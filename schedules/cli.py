"""`--at TIME` / `--window` for the commands that make a change (switch, alias set), and the line
they print once it is scheduled."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from core.maintenance import parse_moment

from .kinds import describe
from .models import ScheduledChange


def add_when_options(parser: CommandParser) -> None:
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--at", help="schedule it instead: ISO 8601, e.g. 2026-12-05T02:00Z (no zone: UTC)")
    when.add_argument("--window", action="store_true", help="schedule it in the host's next maintenance window")


def when_of(options: dict[str, Any]) -> dict[str, Any] | None:
    """change_schedule's `at` or `in_window` from the options; None to run now."""
    if options.get("window"):
        return {"in_window": True}
    if options.get("at") is None:
        return None
    try:
        return {"at": parse_moment(options["at"])}
    except ValueError as exc:  # exit status 2, as every bad argument
        raise CommandError(str(exc), returncode=2) from exc


def scheduled_line(change: ScheduledChange) -> str:
    window = f" (maintenance window, until {change.run_until:%H:%M} UTC)" if change.in_window else ""
    what = describe(change.kind, change.params)
    return f"Scheduled #{change.pk}: {change.host.name} {what} at {change.run_at:%Y-%m-%d %H:%M} UTC{window}."
