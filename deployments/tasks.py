"""The panel's own Celery tasks (on the `default` queue). Host operations run in each host's
agent (hostagent.tasks), sent there by name (serving.operation_tasks)."""

from __future__ import annotations

from celery import shared_task

from deployments.services.operations import operations_mark_lost, operations_resend_stranded


@shared_task(ignore_result=True)
def reap_lost_operations() -> int:
    """Beat, on the panel's queue: running operations whose worker went silent become lost;
    queued ones whose message was lost are sent to their host again."""
    lost = operations_mark_lost(reason="the worker stopped reporting (killed or its machine went away)")
    operations_resend_stranded()
    return len(lost)
