"""Scheduled changes: schedule a switch or an alias move (at a time or in the host's next
maintenance window), list the upcoming and recent ones, cancel one before it runs."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from api.schemas import Error, ScheduledOut, ScheduleIn, ScheduleList
from controlpanel.roles import OPERATOR, VIEWER
from schedules import selectors
from schedules.kinds import KINDS, describe
from schedules.models import ScheduledChange
from schedules.services import change_cancel, change_schedule

from . import actor, host_filter, host_for, listed, row_or_404

router = Router(tags=["schedules"])


def scheduled_dict(change: ScheduledChange) -> dict[str, Any]:
    return {
        "id": change.pk,
        "kind": change.kind,
        "host": change.host.name,
        "change": describe(change.kind, change.params),
        "params": change.params if isinstance(change.params, dict) else {},
        "run_at": change.run_at,
        "run_until": change.run_until,
        "in_window": change.in_window,
        "state": change.state,
        "scheduled_by": change.created_by_name or None,
        "attempts": change.attempts,
        "last_error": change.last_error,
        "outcome": change.outcome,
        "operation": str(change.operation_id) if change.operation_id else None,
        "finished_at": change.finished_at,
        "change_request": change.change_request,
        "approved_by": change.approved_by.username if change.approved_by else None,
    }


@router.get(
    "", response={200: ScheduleList, 404: Error}, summary="Pending changes (soonest first), then the last week's"
)
def schedule_list(request: HttpRequest, host: str = "") -> dict[str, Any]:
    actor(request, VIEWER)
    found = host_filter(host)
    pending = [c for day in selectors.upcoming_by_day(host=found) for c in day.changes]
    return listed(scheduled_dict(c) for c in [*pending, *selectors.recent_outcomes(host=found)])


@router.post(
    "",
    response={201: ScheduledOut, 400: Error, 403: Error, 404: Error},
    summary="Schedule a switch or an alias move; beat runs it when due, as you",
)
def schedule_create(request: HttpRequest, payload: ScheduleIn) -> Status:
    user, host = host_for(request, payload.host, KINDS[payload.kind].role)
    params: dict[str, Any] = {"revision": payload.revision}
    if payload.kind == "switch":
        params["override_reason"] = payload.override_reason
    else:
        params["name"] = payload.name
    change = change_schedule(kind=payload.kind, host=host, params=params, **payload.schedule(), actor=user)
    return Status(201, scheduled_dict(change))


@router.post(
    "{change_id}/cancel/",
    response={200: ScheduledOut, 400: Error, 403: Error, 404: Error},
    summary="Cancel a pending scheduled change",
)
def schedule_cancel(request: HttpRequest, change_id: int) -> dict[str, Any]:
    user = actor(request, OPERATOR)
    change = row_or_404(ScheduledChange.objects.select_related("host"), change_id, f"No scheduled change #{change_id}.")
    return scheduled_dict(change_cancel(change=change, actor=user))
