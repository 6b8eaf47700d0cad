"""Operations in tests: waiting for one the real agent runs, and the messages the panel sends."""

from __future__ import annotations

import time
from typing import Any

import pytest

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


def record_sent_tasks(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The messages the panel sends to agents' queues, kept instead of sent: each one's task
    name, kwargs, queue and id (what the agent reads; how hard the sender retries is not kept)."""
    from controlpanel.celery import app

    sent: list[dict[str, Any]] = []

    def send_task(name: str, **kw: Any) -> None:
        sent.append({"name": name, **{k: kw[k] for k in ("kwargs", "queue", "task_id") if k in kw}})

    monkeypatch.setattr(app, "send_task", send_task)
    return sent
