"""Beat's task for scheduled changes (on the panel's queue): runs whatever is due, signed in or not."""

from __future__ import annotations

from celery import shared_task

from core.context import change_context
from schedules.services import changes_run_due


@shared_task(ignore_result=True)
def run_scheduled_changes() -> int:
    """Beat, every 30 s: each due change goes through its service as the person who scheduled it.
    A second delivery of the same tick finds the rows already taken (schedules.services)."""
    with change_context("schedule"):
        return len(changes_run_due())
