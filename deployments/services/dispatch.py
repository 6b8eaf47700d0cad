"""Send an operation to its host's queue, by task name (serving.operation_tasks)."""

from __future__ import annotations

import logging

from django.db.models import F, Value
from django.db.models.functions import Concat
from kombu.exceptions import KombuError

from controlpanel.celery import app, send_for_row
from deployments.choices import OperationState
from deployments.models import Operation
from serving.operation_tasks import OPERATION_TASKS

log = logging.getLogger("controlpanel.operations")
BROKER_AWAY = (
    "The message to {host} could not be sent: the broker is unreachable ({error}). The operation "
    "stays queued and is sent again once the broker is back.\n"
)


def broker_errors() -> tuple[type[BaseException], ...]:
    """What sending to or reading the broker raises while it is away (refused, reset, timed out)."""
    return (KombuError, OSError, *app.connection_for_write().connection_errors)


def operation_dispatch(op: Operation) -> None:
    """On commit of the operation's row: the host's agent gets a message naming it, nothing more.

    A broker that is away does not fail the person's request or lose the operation: the row
    stays queued, its log says why, and the resend of stranded operations
    (operations.operations_resend_stranded) sends it once the broker is back."""
    try:
        send_for_row(OPERATION_TASKS[op.kind], queue=op.host.queue, key="op_id", pk=op.pk)
    except broker_errors() as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
        log.warning("operation %s on %s stays queued: the broker is unreachable (%s)", op.pk, op.host.name, error)
        note = BROKER_AWAY.format(host=op.host.name, error=error)
        Operation.objects.filter(pk=op.pk, state=OperationState.QUEUED).update(log=Concat(F("log"), Value(note)))


def operation_message_waiting(op: Operation) -> bool:
    """Whether the operation's message still waits on its host's queue (a Redis list under the
    queue's name, as the panel's brokers keep it). Unknown (another transport): False, so the
    caller sends it again, which operation_begin makes safe."""
    needle = f'"id": "{op.pk}"'.encode()
    with app.connection_for_read() as conn:
        client = getattr(conn.default_channel, "client", None)
        if client is None:
            return False
        return any(needle in raw for raw in client.lrange(op.host.queue, 0, -1))
