"""Ending an operation holds its host's row in no way that the host's probe or heartbeat, which
write that row, must wait for: real PostgreSQL, two real transactions (tests.support.locks).

Before, each of these read the operation FOR UPDATE with its host joined in (select_related),
and FOR UPDATE without OF locked the host's row too, until the end was committed: the probe and
the heartbeat of that host waited, and an agent's probe (host row, then its operations) against
an operation's end (operation, then host row) could deadlock, as the memory report did
(test_measured_memory.py)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from deployments.choices import OperationKind, OperationState
from deployments.models import ModelVariant, Operation
from deployments.services.host_reports import operation_host_finish
from deployments.services.operations import operation_begin, operation_create, operation_finish, operations_mark_lost
from hardware.credentials import host_token_issue
from hardware.models import Host
from hardware.services import host_heartbeat, host_probe_record
from tests.support.locks import held_open, lock_timeout
from tests.support.revisions import make_revision

ENDS: dict[str, Callable[[Operation], Any]] = {
    "the agent's report of its end": lambda op: operation_host_finish(
        op=op, state=OperationState.FAILED, result={}, error="did not come up"
    ),
    "operation_finish": lambda op: operation_finish(op_id=op.pk, state=OperationState.FAILED, error="did not come up"),
    "lost in the sweep": lambda op: operations_mark_lost(reason="its worker went quiet"),
    "lost when its agent restarts": lambda op: operations_mark_lost(host=op.host, worker_gone=True, reason="restarted"),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("end", list(ENDS), ids=list(ENDS))
def test_an_operations_open_end_does_not_hold_up_its_hosts_probe_or_heartbeat(
    end: str, catalog: None, admin_user, operator
):
    host, _ = host_token_issue(name="alpha", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    revision = make_revision(host=host, engine="vllm", model_variant=variant, message="m", actor=operator)
    op = operation_create(kind=OperationKind.SWITCH, host=host, revision=revision, actor=operator)
    op = operation_begin(op_id=op.pk, worker="alpha")
    Operation.objects.filter(pk=op.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
    op = Operation.objects.select_related("host").get(pk=op.pk)
    with held_open(lambda: ENDS[end](op)), lock_timeout(3):  # held up: "canceling statement due to lock timeout"
        host_heartbeat(host=host, engine_state={"running": False})
        probed = host_probe_record(name=host.name, facts={"kernel": "6.8.0"}, inventory={"gpus": []})
    assert probed.kernel == "6.8.0" and Host.objects.get(pk=host.pk).engine_state == {"running": False}
    ended = Operation.objects.get(pk=op.pk)
    assert ended.state in (OperationState.FAILED, OperationState.LOST) and ended.finished_at is not None
