"""Reads of scheduled changes: the calendar-like list (upcoming changes by day, per host) and the
recent outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from hardware.models import Host

from .choices import ChangeState
from .models import ScheduledChange

RECENT = timedelta(days=7)
RECENT_LIMIT = 50


@dataclass(frozen=True)
class Day:
    day: date
    changes: list[ScheduledChange]


def _changes(host: Host | None) -> QuerySet[ScheduledChange]:
    rows = ScheduledChange.objects.select_related("host", "created_by", "operation", "cancelled_by", "approved_by")
    return rows.filter(host=host) if host is not None else rows


def upcoming_by_day(*, host: Host | None = None) -> list[Day]:
    """Pending changes, soonest first, grouped by their UTC day."""
    days: dict[date, list[ScheduledChange]] = {}
    for change in _changes(host).filter(state=ChangeState.PENDING).order_by("run_at", "pk"):
        days.setdefault(change.run_at.date(), []).append(change)
    return [Day(day, changes) for day, changes in days.items()]


def recent_outcomes(*, host: Host | None = None, now: datetime | None = None) -> list[ScheduledChange]:
    """Changes that ran, failed or were cancelled in the last week, newest first."""
    since = (now or timezone.now()) - RECENT
    done = _changes(host).exclude(state=ChangeState.PENDING).filter(finished_at__gte=since)
    return list(done.order_by("-finished_at", "-pk")[:RECENT_LIMIT])
