"""Scheduling a change, cancelling it, running the due ones (beat), and a host's maintenance window.

Running is idempotent under a second delivery of the beat task: each due row is taken with
`select_for_update(skip_locked=True)` and only while it is still pending, and its change, its new
state and its audit row commit together. A host busy at the due time is tried again on each tick
until `run_until`, then the change fails with the host's reason. An approved change (its change
request's) re-checks what its approval covered first (`approval_recheck`): stale, it fails and
runs nothing, and its request is marked stale.
"""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role, has_role
from core.audit import audit_record, audited_save, person_of
from core.maintenance import next_opening
from hardware.models import Host
from hardware.review import (
    Approval,
    ChangeRequested,
    approval_recheck,
    approval_stamp,
    review_check,
    reviewed,
)

from .choices import ChangeState
from .events import change_event
from .kinds import KINDS, describe
from .models import MaintenanceWindow, ScheduledChange

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

log = logging.getLogger(__name__)
FURTHEST = timedelta(days=366)  # a change further ahead than this is a typo
DUE_BATCH = 100  # due changes taken per beat tick
NEEDS_REVIEW = (
    "A host of this change requires review since it was scheduled: it did not run. Schedule it again "
    "to open a change request that carries its time."
)


class Refused(Exception):
    """The change cannot run now and never will (its person lost the role, its revision is gone)."""


def busy_patience() -> timedelta:
    """How long a change due at an exact time waits for a busy host before it fails."""
    return timedelta(seconds=settings.SCHEDULE_BUSY_RETRY_S)


def window_of(host: Host) -> MaintenanceWindow | None:
    return MaintenanceWindow.objects.filter(host=host).first()


def next_window(host: Host, now: datetime | None = None) -> tuple[datetime, datetime] | None:
    """The host's maintenance window open now, or its next opening, as (opens, closes); None
    when the host has no window."""
    window = window_of(host)
    return None if window is None else next_opening(window.window(), now or timezone.now())


# --- scheduling -------------------------------------------------------------------------------


def when_params(*, at: datetime | None = None, in_window: bool = False) -> dict[str, Any]:
    """A time as a change request keeps it (its params' `when`): {"at": ISO} or {"window": True}."""
    return {"window": True} if in_window else {"at": at.isoformat() if at else None}


def when_args(when: Any) -> dict[str, Any] | None:
    """change_schedule's `at` or `in_window` from a `when` (when_params); None: at once."""
    if not isinstance(when, dict) or not when:
        return None
    if when.get("window") is True:
        return {"in_window": True}
    try:
        at = datetime.fromisoformat(str(when.get("at")))
    except ValueError:
        raise ValidationError({"at": f"{str(when.get('at'))[:40]!r} is not a time."}) from None
    return {"at": at}


@reviewed
@transaction.atomic
def change_schedule(
    *,
    kind: str,
    host: Host | None,
    params: dict[str, Any],
    at: datetime | None = None,
    in_window: bool = False,
    actor: AbstractUser | None,
    approval: Approval | None = None,
) -> ScheduledChange:
    """Schedule `kind` with `params` on `host` at `at`, or in the host's next maintenance window
    (the one open now, if it is). The kind's own checks run now and again when it is due.

    A rollout names no host: it is kept on its canary's row and waits for the canary's window.
    On a host that requires review (a rollout: any of its group) it opens a change request that
    carries the time instead (ChangeRequested); `approval`: that request approved, recorded on
    the row and carried by the change when it runs."""
    found = KINDS.get(kind)
    if found is None:
        raise ValidationError({"kind": f"{kind!r} is not a kind of change that can be scheduled."})
    ensure_role(actor, found.role)
    if (at is None) == (not in_window):
        raise ValidationError({"at": "Give a time, or ask for the next maintenance window (one of the two)."})
    checked = found.check(host, params, actor)
    host, clean = checked.host, checked.params
    now = timezone.now()
    if in_window:
        window = next_window(host, now)
        if window is None:
            raise ValidationError({"at": f"{host.name} has no maintenance window: set one on its page first."})
        run_at, run_until = max(window[0], now), window[1]
    else:
        assert at is not None
        if timezone.is_naive(at):
            raise ValidationError({"at": "Give the time with its time zone (e.g. 2026-12-05T02:00Z)."})
        if at < now - timedelta(minutes=1):
            raise ValidationError({"at": f"{at:%Y-%m-%d %H:%M} UTC is in the past."})
        if at > now + FURTHEST:
            raise ValidationError({"at": "A change can be scheduled at most a year ahead."})
        run_at, run_until = at, at + busy_patience()
    for reviewed_host in checked.reviewed or [host]:
        review_check(
            host=reviewed_host,
            kind=kind,
            params={**clean, "when": when_params(at=at, in_window=in_window)},
            summary=f"{describe(kind, clean)} at {run_at:%Y-%m-%d %H:%M} UTC"
            + (" (maintenance window)" if in_window else ""),
            actor=actor,
            approval=approval,
        )
    change = ScheduledChange(
        kind=kind,
        host=host,
        params=clean,
        run_at=run_at,
        run_until=run_until,
        in_window=in_window,
        created_by=person_of(actor),
        created_by_name=getattr(person_of(actor), "username", ""),
        change_request=approval.change_id if approval else None,
        approved_by=person_of(approval.approver) if approval else None,
    )
    audited_save(
        change,
        action="schedule.create",
        summary=f"{host.name}: {describe(kind, clean)} scheduled for {run_at:%Y-%m-%d %H:%M} UTC"
        + (" (maintenance window)" if in_window else ""),
        host=host,
        data={
            "kind": kind,
            "params": clean,
            "run_at": run_at.isoformat(),
            "run_until": run_until.isoformat(),
            **approval_stamp(approval),
        },
        actor=actor,
    )
    return change


@transaction.atomic
def change_cancel(*, change: ScheduledChange, actor: AbstractUser | None) -> ScheduledChange:
    ensure_role(actor, OPERATOR)
    # The change's row only: its host is named in the audit row, not written (a host row held here
    # held up that host's probe and heartbeat until the cancel committed).
    locked = ScheduledChange.objects.select_for_update(of=("self",)).select_related("host").get(pk=change.pk)
    if locked.state != ChangeState.PENDING:
        raise ValidationError(f"Scheduled change #{locked.pk} has already {locked.state}: nothing to cancel.")
    who = getattr(person_of(actor), "username", "") or "the panel"
    locked.state, locked.finished_at = ChangeState.CANCELLED, timezone.now()
    locked.cancelled_by, locked.outcome = person_of(actor), f"Cancelled by {who}."
    audited_save(
        locked,
        action="schedule.cancel",
        summary=f"{locked.host.name}: scheduled {describe(locked.kind, locked.params)} cancelled",
        host=locked.host,
        data={"change": locked.pk},
        actor=actor,
    )
    return locked


def windows_replan(*, host: Host, now: datetime) -> int:
    """Pending changes placed in the host's window move to its new next opening; answers how many."""
    window = next_window(host, now)
    moved = 0
    for change in ScheduledChange.objects.filter(host=host, in_window=True, state=ChangeState.PENDING):
        if window is None:
            change.state, change.finished_at = ChangeState.FAILED, now
            change.outcome = f"{host.name}'s maintenance window was removed before the change ran."
        else:
            change.run_at, change.run_until = max(window[0], now), window[1]
        change.save(update_fields=["state", "finished_at", "outcome", "run_at", "run_until"])
        moved += 1
    return moved


@transaction.atomic
def window_set(
    *, host: Host, weekdays: list[int], start: time, end: time, tz: str, actor: AbstractUser | None
) -> MaintenanceWindow:
    """Set the host's maintenance window (pending changes placed in it move with it)."""
    ensure_role(actor, OPERATOR)
    window = window_of(host) or MaintenanceWindow(host=host)
    window.weekdays, window.start, window.end, window.timezone = sorted(set(weekdays)), start, end, tz
    window.updated_by = person_of(actor)
    audited_save(
        window,
        action="schedule.window",
        summary=f"{host.name}: maintenance window {window.window().describe()}",
        host=host,
        data={"weekdays": window.weekdays, "start": f"{start:%H:%M}", "end": f"{end:%H:%M}", "tz": tz},
        actor=actor,
    )
    windows_replan(host=host, now=timezone.now())
    return window


@transaction.atomic
def window_clear(*, host: Host, actor: AbstractUser | None) -> None:
    ensure_role(actor, OPERATOR)
    deleted, _ = MaintenanceWindow.objects.filter(host=host).delete()
    if deleted:
        audit_record(
            action="schedule.window", summary=f"{host.name}: maintenance window removed", host=host, actor=actor
        )
        windows_replan(host=host, now=timezone.now())


# --- running (beat) ----------------------------------------------------------------------------


def changes_run_due(*, now: datetime | None = None) -> list[ScheduledChange]:
    """Run every pending change whose time has come; answers the rows this call moved on (ran,
    failed, or tried again on a busy host)."""
    now = now or timezone.now()
    due = ScheduledChange.objects.filter(state=ChangeState.PENDING, run_at__lte=now)
    ids = list(due.order_by("run_at", "pk").values_list("pk", flat=True)[:DUE_BATCH])
    return [change for pk in ids if (change := change_run(pk=pk, now=now)) is not None]


def _runner(change: ScheduledChange, role: str) -> Any:
    """The person the change runs as, read afresh (their role today, not when they scheduled it);
    None for a change the panel itself scheduled. Refused when they may no longer make it."""
    if change.created_by_id is None:
        if change.created_by_name:
            raise Refused(f"{change.created_by_name}, who scheduled it, no longer has an account.")
        return None
    person = get_user_model().objects.get(pk=change.created_by_id)
    if not person.is_active:
        raise Refused(f"{person.username}, who scheduled it, was deactivated.")
    if not has_role(person, role):
        raise Refused(f"{person.username}, who scheduled it, no longer has the {role} role.")
    return person


@transaction.atomic
def change_run(*, pk: int, now: datetime) -> ScheduledChange | None:
    """Run one due change; None when another delivery holds it or it is no longer pending."""
    rows = ScheduledChange.objects.select_for_update(skip_locked=True, of=("self",)).select_related("host")
    change = rows.filter(pk=pk, state=ChangeState.PENDING).first()
    if change is None:
        return None
    kind = KINDS.get(change.kind)
    try:
        if kind is None:
            raise Refused(f"This panel cannot run a change of kind {change.kind!r}.")
        if now > change.run_until:
            raise Refused(_too_late(change))
        actor = _runner(change, kind.role)
        approval = Approval(change.change_request, change.approved_by) if change.change_request else None
        if approval is not None:  # what it was approved for, resolved again: stale, it does not run
            approval = approval_recheck(approval)
        with transaction.atomic():  # a refusal rolls back what the service began, never this row
            outcome = kind.run(change.host, change.params, actor, approval)
    except ChangeRequested:  # the request it opened rolled back with the service's savepoint
        return _finish(change, now, error=NEEDS_REVIEW)
    except (Refused, PermissionDenied) as exc:
        return _finish(change, now, error=str(exc))
    except ValidationError as exc:
        if kind is not None and isinstance(exc, kind.busy):
            return _busy(change, " ".join(exc.messages), now)
        return _finish(change, now, error="; ".join(exc.messages))
    except Exception as exc:  # noqa: BLE001 - one broken change must not stop the others
        log.exception("scheduled change #%s failed", change.pk)
        return _finish(change, now, error=f"{type(exc).__name__}: {exc}")
    return _finish(change, now, message=outcome.message, operation=outcome.operation)


def _too_late(change: ScheduledChange) -> str:
    until = f"{change.run_until:%Y-%m-%d %H:%M} UTC"
    if change.attempts:
        return f"The host stayed busy until {until} (tried {change.attempts} times): {change.last_error}"
    return f"Missed: the panel did not run it between {change.run_at:%Y-%m-%d %H:%M} and {until}."


def _busy(change: ScheduledChange, reason: str, now: datetime) -> ScheduledChange:
    change.attempts += 1
    change.last_error = reason
    if now >= change.run_until:
        return _finish(change, now, error=_too_late(change))
    change.save(update_fields=["attempts", "last_error"])
    return change


def _finish(
    change: ScheduledChange, now: datetime, *, message: str = "", error: str = "", operation: Any = None
) -> ScheduledChange:
    change.state = ChangeState.FAILED if error else ChangeState.RAN
    change.outcome, change.operation, change.finished_at = error or message, operation, now
    change.save(update_fields=["state", "outcome", "operation", "finished_at", "attempts", "last_error"])
    what = describe(change.kind, change.params)
    audit_record(
        action=f"schedule.{change.state}",
        summary=f"{change.host.name}: scheduled {what} {change.state}" + (f": {error}" if error else ""),
        obj=change,
        host=change.host,
        data={"change": change.pk, "operation": str(operation.pk) if operation else None, "error": error},
        actor=None,
    )
    change_event(change)
    return change
