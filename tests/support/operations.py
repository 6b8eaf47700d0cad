"""Waiting for an operation the real agent runs: the suite's one copy."""

from __future__ import annotations

import time

from deployments.choices import OperationState
from deployments.models import Operation


def wait_done(op: Operation, timeout: float = 120.0) -> Operation:
    """`op` once it has ended (reloaded), or AssertionError with its stage and log at `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op.refresh_from_db()
        if op.state not in (OperationState.QUEUED, OperationState.RUNNING):
            return op
        time.sleep(0.2)
    raise AssertionError(f"operation still {op.state} at {op.stage}:\n{op.log[-4000:]}")
