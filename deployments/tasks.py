"""The panel's own Celery tasks (on the `default` queue). Host operations run in each host's
agent (hostagent.tasks), sent there by name (serving.operation_tasks)."""

from __future__ import annotations

from celery import shared_task

from deployments.services.hub_imports import HUB_IMPORT_TASK, hub_import_run, hub_imports_mark_lost
from deployments.services.operations import operations_mark_lost, operations_resend_stranded


@shared_task(ignore_result=True)
def reap_lost_operations() -> int:
    """Beat, on the panel's queue: running operations whose worker went silent become lost;
    queued ones whose message was lost are sent to their host again; hub imports whose worker
    went away become lost."""
    lost = operations_mark_lost(reason="the worker stopped reporting (killed or its machine went away)")
    operations_resend_stranded()
    hub_imports_mark_lost()
    return len(lost)


@shared_task(name=HUB_IMPORT_TASK, ignore_result=True, acks_late=True)
def run_hub_import(import_id: str) -> str:
    """One hub import (deployments.services.hub_imports), on HUB_IMPORT_QUEUE: the web request
    that asked for it has long answered."""
    done = hub_import_run(import_id=import_id)
    return done.state if done is not None else "skipped"
