"""Send an operation to its host's queue, by task name (serving.operation_tasks)."""

from __future__ import annotations

from deployments.models import Operation
from serving.operation_tasks import OPERATION_TASKS


def operation_dispatch(op: Operation) -> None:
    """On commit of the operation's row: the host's agent gets a message naming it, nothing more."""
    from controlpanel.celery import app

    app.send_task(OPERATION_TASKS[op.kind], kwargs={"op_id": str(op.pk)}, queue=op.host.queue, task_id=str(op.pk))
