"""A tuning run takes its next step when the operation it waits for ends: a receiver of
operation_ended (sent after the commit, once per end), never a page polling. Beat's sweep
(tasks.sweep_tuning_runs) takes a step an end did not take."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from deployments.services.operations import operation_ended

from .services import tuning_operation_ended

log = logging.getLogger(__name__)


@receiver(operation_ended, dispatch_uid="tuning.operation_ended")
def _operation_ended(sender: Any, operation: Any, **kwargs: Any) -> None:
    try:
        tuning_operation_ended(op=operation)
    except Exception:  # noqa: BLE001 - the operation has ended whatever a tuning run makes of it
        log.exception("tuning step after operation %s failed", getattr(operation, "pk", "?"))
