"""The notification a scheduled change raises when it runs or fails (notifications.events builds
the operations' own: a scheduled switch that later fails on the host is announced there too)."""

from __future__ import annotations

from django.urls import reverse

from notifications.choices import EventKind
from notifications.events import Event, error_line, never_raises
from notifications.services import notify

from .choices import ChangeState
from .kinds import describe
from .models import ScheduledChange


@never_raises
def _event(change: ScheduledChange) -> Event | None:
    what = describe(change.kind, change.params)
    who = change.created_by_name or "the panel"
    host = change.host
    revision = change.params.get("revision") if isinstance(change.params, dict) else None
    common = {
        "host_id": host.pk,
        "host_name": host.name,
        "revision": f"r{revision}" if isinstance(revision, int) else "",
        "details": (f"Scheduled by {who} for {change.run_at:%Y-%m-%d %H:%M} UTC.",),
    }
    if change.state == ChangeState.FAILED:
        return Event(
            kind=EventKind.SCHEDULE_FAILED,
            summary=f"Scheduled {what} on {host.name} failed.",
            error=error_line(change.outcome),
            link_path=reverse("schedules:list") + f"?host={host.name}",
            **common,
        )
    if change.state == ChangeState.RAN:
        link = (
            reverse("deployments:operation_detail", args=[change.operation_id])
            if change.operation_id
            else reverse("schedules:list") + f"?host={host.name}"
        )
        return Event(
            kind=EventKind.SCHEDULE_RAN, summary=f"Scheduled {what} on {host.name} ran.", link_path=link, **common
        )
    return None


def change_event(change: ScheduledChange) -> None:
    """Notify (after the commit) that a scheduled change ran or failed."""
    notify(_event(change))
