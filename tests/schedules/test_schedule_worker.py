"""Scheduled changes with real processes and real concurrency: the panel's own Celery worker runs
beat's task from the broker, and two deliveries of one tick at the same moment run a change once."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from deployments.models import Operation
from schedules.models import ScheduledChange
from schedules.services import change_schedule, changes_run_due
from schedules.tasks import run_scheduled_changes
from tests.deployments.test_views_revisions import add_revision, make_lab
from tests.support.panel_worker import PanelWorker
from tests.support.receivers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def due(catalog: None, operator: Any) -> ScheduledChange:
    host, _ = make_lab(operator)
    add_revision(host, operator, message="r2", port=8002)
    return change_schedule(kind="switch", host=host, params={"revision": 2}, at=timezone.now(), actor=operator)


@pytest.mark.celery
def test_the_panel_worker_runs_beats_task_from_the_broker(due: ScheduledChange, tmp_path: Any) -> None:
    worker = PanelWorker(f"schedule-test-{uuid.uuid4().hex[:8]}", tmp_path / "worker.log", concurrency=1).start()
    try:
        run_scheduled_changes.apply_async(queue=worker.queue)  # what beat sends every 30 s
        ran = wait_for(lambda: ScheduledChange.objects.filter(pk=due.pk, state="ran").first(), 60, "the change to run")
    finally:
        worker.stop()
    op = Operation.objects.get(kind="switch")
    assert ran.operation_id == op.pk and op.requested_by_id == due.created_by_id


def test_two_deliveries_of_one_tick_at_once_run_the_change_once(due: ScheduledChange) -> None:
    start = threading.Barrier(2)
    moved: list[int] = []

    def tick() -> None:
        try:
            start.wait(timeout=10)
            moved.extend(c.pk for c in changes_run_due() if c.state == "ran")
        finally:
            connection.close()

    threads = [threading.Thread(target=tick) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert moved == [due.pk]
    assert Operation.objects.filter(kind="switch").count() == 1
