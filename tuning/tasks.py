"""Beat's sweep of tuning runs (tuning.services.tuning_sweep): a run resumes after a restart."""

from __future__ import annotations

from celery import shared_task

from .services import tuning_sweep


@shared_task(ignore_result=True)
def sweep_tuning_runs() -> int:
    return tuning_sweep()
