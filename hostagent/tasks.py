"""The agent's Celery tasks, on its own queue (`host.<name>`), one per operation kind, under the
names the panel sends (serving.operation_tasks). Each takes an operation id only."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from serving.operation_tasks import OPERATION_TASKS

from .context import current
from .operations.runner import run_operation


def _task(kind: str) -> Any:
    @shared_task(name=OPERATION_TASKS[kind], acks_late=True, ignore_result=True)
    def run(op_id: str) -> None:
        run_operation(current(), op_id)

    return run


switch = _task("switch")
launch = _task("launch")
rollback = _task("rollback")
stop = _task("stop")
probe = _task("probe")
benchmark = _task("benchmark")
install = _task("install")
download = _task("download")
model_delete = _task("model_delete")
