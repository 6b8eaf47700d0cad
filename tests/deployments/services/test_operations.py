"""Operations without a worker: enqueue on commit, cancel, lost detection frees the host lock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.choices import OperationState
from deployments.models import ModelVariant, Operation
from deployments.services.operations import (
    HostBusyError,
    operation_begin,
    operation_cancel,
    operation_progress,
    operations_mark_lost,
)
from deployments.services.revisions import revision_create
from deployments.services.switch import PlanRefused, switch_request
from deployments.tasks import reap_lost_operations
from tests.hardware.factories import GPUFactory, HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def revision(catalog, operator):
    host = HostFactory()
    return revision_create(
        host=host,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        knobs={"ctx_size": 4096, "n_gpu_layers": 0},
        message="cpu test",
        actor=operator,
    )


def test_switch_is_a_row_first_and_enqueued_only_on_commit(revision, operator, django_capture_on_commit_callbacks):
    # The real delivery to the host queue is exercised end to end in test_switch_celery.py.
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        op = switch_request(revision=revision, actor=operator)
    assert len(callbacks) == 1
    assert Operation.objects.get(pk=op.pk).state == OperationState.QUEUED
    assert op.requested_by == operator and op.celery_task_id == str(op.pk)


def test_cancel_a_queued_operation_frees_the_host(revision, operator):
    op = switch_request(revision=revision, actor=operator)
    with pytest.raises(HostBusyError):
        switch_request(revision=revision, actor=operator)
    operation_cancel(op=op, actor=operator)
    op.refresh_from_db()
    assert op.state == OperationState.CANCELLED
    assert operation_begin(op_id=op.pk, worker="w") is None  # a late delivery does nothing
    switch_request(revision=revision, actor=operator)


def test_cancel_a_running_operation_asks_the_task_to_stop(revision, operator):
    op = switch_request(revision=revision, actor=operator)
    operation_begin(op_id=op.pk, worker="w")
    assert operation_progress(op_id=op.pk, stage="loading", progress=0.5, log="loading") is False
    operation_cancel(op=op, actor=operator)
    assert operation_progress(op_id=op.pk, log="still loading") is True
    op.refresh_from_db()
    assert op.log == "loading\nstill loading\n" and op.progress == 0.5


def test_a_silent_worker_makes_the_operation_lost_and_the_lock_free(revision, operator):
    op = switch_request(revision=revision, actor=operator)
    operation_begin(op_id=op.pk, worker="w")
    assert reap_lost_operations() == 0  # still fresh
    Operation.objects.filter(pk=op.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert reap_lost_operations() == 1
    op.refresh_from_db()
    assert op.state == OperationState.LOST
    switch_request(revision=revision, actor=operator)  # the host is free again
    assert operations_mark_lost(host=revision.host, worker_gone=True, reason="x") == []  # queued ones stay


def test_planner_errors_block_a_switch_unless_an_admin_overrides_with_a_reason(catalog, operator, admin_user):
    host = HostFactory()
    for i in range(6):
        GPUFactory(host=host, index=i)
    trap = revision_create(
        host=host,
        engine="vllm",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-27B"),
        knobs={"tensor_parallel_size": 6},
        env={"NCCL_P2P_DISABLE": "1"},
        message="TP=6",
        actor=operator,
    )
    with pytest.raises(PlanRefused) as refused:
        switch_request(revision=trap, actor=operator)
    assert "tp." in str(refused.value)
    with pytest.raises(Exception, match="Only an admin"):
        switch_request(revision=trap, override_reason="I know", actor=operator)
    assert not Operation.objects.exists()
    op = switch_request(revision=trap, override_reason="testing a patched vLLM", actor=admin_user)
    assert op.params["override_reason"] == "testing a patched vLLM"
    assert op.params["planner"]["errors"]
