"""The rollout moves on when one of its switches ends, or its canary's benchmark gate: receivers
of operation_ended and gate_ended (sent after the commit, once per end), never a page polling."""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import receiver

from deployments.services.gates import gate_ended
from deployments.services.operations import operation_ended

from . import services

log = logging.getLogger(__name__)


def _step(what: str, row: Any, step: str, **kwargs: Any) -> None:
    try:
        getattr(services, step)(**kwargs)
    except Exception:  # the operation or the gate has ended whatever a rollout makes of it
        log.exception("rollout step after %s %s failed", what, getattr(row, "pk", "?"))


@receiver(operation_ended, dispatch_uid="rollouts.operation_ended")
def _operation_ended(sender: Any, operation: Any, **kwargs: Any) -> None:
    _step("operation", operation, "rollout_operation_ended", op=operation)


@receiver(gate_ended, dispatch_uid="rollouts.gate_ended")
def _gate_ended(sender: Any, gate: Any, **kwargs: Any) -> None:
    _step("the benchmark gate", gate, "rollout_gate_ended", gate=gate)
