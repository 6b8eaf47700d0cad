"""A change request as a notification event (notifications.events.Event): opened, approved or
rejected, to the channels whose rules watch it on the request's host."""

from __future__ import annotations

from typing import Literal

from notifications.choices import EventKind
from notifications.events import Event

from .models import ChangeRequest

KIND = {"opened": EventKind.CHANGE_OPENED, "approved": EventKind.CHANGE_APPROVED, "rejected": EventKind.CHANGE_REJECTED}


def change_event(change: ChangeRequest, what: Literal["opened", "approved", "rejected"]) -> Event:
    who = change.author if what == "opened" else change.decided_by
    by = f" by {who.username}" if who is not None else ""
    details = [f"Author: {change.author.username}" if change.author else "Author: gone"]
    if what == "approved" and change.operation_id:
        details.append(f"Operation {change.operation_id} queued.")
    if what == "approved" and change.rollout_id:
        details.append(f"Rollout #{change.rollout_id} started.")
    if what == "approved" and change.scheduled is not None:
        details.append(f"Scheduled for {change.scheduled.run_at:%Y-%m-%d %H:%M} UTC (#{change.scheduled.pk}).")
    number = change.params.get("revision") if isinstance(change.params, dict) else None
    return Event(
        kind=KIND[what],
        summary=f"Change request #{change.pk} on {change.host.name} {what}{by}: {change.summary}",
        host_id=change.host_id,
        host_name=change.host.name,
        revision=f"r{number}" if isinstance(number, int) and not isinstance(number, bool) else "",
        link_path=change.get_absolute_url(),
        details=tuple(details),
    )
