"""Thin Celery tasks: ids in, rows re-fetched, one host operation or service each.

Host tasks run on the host's own queue (`host.<name>`); the row is the source of truth, so
a task delivered twice (late acks) or after its operation ended returns quietly.
"""

from __future__ import annotations

import logging
import socket
import threading
import traceback
from collections.abc import Callable

from celery import shared_task
from django.db import close_old_connections
from django.utils import timezone

from deployments.choices import OperationState
from deployments.models import Operation
from deployments.services.operations import operation_begin, operation_finish, operations_mark_lost

log = logging.getLogger(__name__)
OP_HEARTBEAT_S = 10.0


def _keep_alive(op_id: str, stop: threading.Event) -> None:
    """Touch the operation while it runs so the reaper can tell a live worker from a dead one."""
    try:
        while not stop.wait(OP_HEARTBEAT_S):
            Operation.objects.filter(pk=op_id, state=OperationState.RUNNING).update(heartbeat_at=timezone.now())
    finally:
        close_old_connections()


def run_operation(op_id: str, body: Callable[[Operation], None]) -> None:
    op = operation_begin(op_id=op_id, worker=socket.gethostname())
    if op is None:
        log.info("operation %s is gone or already handled; nothing to do", op_id)
        return
    stop = threading.Event()
    beat = threading.Thread(target=_keep_alive, args=(op_id, stop), daemon=True)
    beat.start()
    try:
        body(op)
    except Exception as exc:  # noqa: BLE001 - any failure must end the operation, not leave it running
        log.exception("operation %s failed", op_id)
        operation_finish(
            op_id=op_id,
            state=OperationState.FAILED,
            error=f"{type(exc).__name__}: {exc}",
            result={"traceback": traceback.format_exc()[-4000:]},
        )
    finally:
        stop.set()
        beat.join(timeout=2)


@shared_task(bind=True, acks_late=True, ignore_result=True)
def switch_host(self, op_id: str) -> None:  # noqa: ANN001
    from deployments.host_ops import run_switch

    run_operation(op_id, run_switch)


@shared_task(bind=True, acks_late=True, ignore_result=True)
def stop_engine(self, op_id: str) -> None:  # noqa: ANN001
    from deployments.host_ops import run_stop

    run_operation(op_id, run_stop)


@shared_task(bind=True, acks_late=True, ignore_result=True)
def probe_host(self, op_id: str) -> None:  # noqa: ANN001
    def body(op: Operation) -> None:
        from hardware.agent_probe import probe_local
        from hardware.services import host_probe_record

        facts, inventory = probe_local()
        host = host_probe_record(name=op.host.name, facts=facts, inventory=inventory)
        operation_finish(
            op_id=op.pk,
            state=OperationState.SUCCEEDED,
            result={"gpus": host.gpus.count(), "mismatches": host.probe_mismatches},
        )

    run_operation(op_id, body)


@shared_task(ignore_result=True)
def reap_lost_operations() -> int:
    """Beat, on the panel's queue: running operations whose worker went silent become lost."""
    return len(operations_mark_lost(reason="the worker stopped reporting (killed or its machine went away)"))


@shared_task(bind=True, acks_late=True, ignore_result=True)
def benchmark_host(self, op_id: str) -> None:  # noqa: ANN001
    from deployments.host_ops import run_benchmark

    run_operation(op_id, run_benchmark)


@shared_task(bind=True, acks_late=True, ignore_result=True)
def install_engine(self, op_id: str) -> None:  # noqa: ANN001
    """On the host's queue: install an engine version (venv + pinned pip, or a source build)."""
    from deployments.host_ops import run_install_operation

    run_operation(op_id, run_install_operation)
