"""Operations without a worker: enqueue on commit, cancel, lost detection frees the host lock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from deployments.choices import OperationKind, OperationState
from deployments.models import ModelVariant, Operation
from deployments.services.operations import (
    HostBusyError,
    operation_begin,
    operation_cancel,
    operation_create,
    operation_ended,
    operation_finish,
    operation_progress,
    operations_mark_lost,
)
from deployments.services.switch import PlanRefused, switch_request
from deployments.tasks import reap_lost_operations
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def revision(catalog, operator):
    host = HostFactory()
    return make_revision(
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
    trap = make_revision(
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


def _switch_row(revision, operator):
    return operation_create(kind=OperationKind.SWITCH, host=revision.host, revision=revision, actor=operator)


def test_every_end_of_an_operation_is_announced_once_after_commit(
    revision, operator, django_capture_on_commit_callbacks
):
    """What follows an operation (a gate, a rollout's next wave) hears of each end exactly once."""
    heard: list[tuple[str, str]] = []

    def listener(sender, operation, **kwargs):
        heard.append((str(operation.pk), operation.state))

    operation_ended.connect(listener)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            cancelled = _switch_row(revision, operator)
            operation_cancel(op=cancelled, actor=operator)
        with django_capture_on_commit_callbacks(execute=True):
            done = _switch_row(revision, operator)
            operation_begin(op_id=done.pk, worker="w")
            operation_finish(op_id=done.pk, state=OperationState.SUCCEEDED)
            operation_finish(op_id=done.pk, state=OperationState.FAILED)  # a late second report: no news
        with django_capture_on_commit_callbacks(execute=True):
            lost = _switch_row(revision, operator)
            operation_begin(op_id=lost.pk, worker="w")
            operations_mark_lost(host=revision.host, worker_gone=True, reason="agent restarted")
    finally:
        operation_ended.disconnect(listener)
    assert heard == [
        (str(cancelled.pk), OperationState.CANCELLED),
        (str(done.pk), OperationState.SUCCEEDED),
        (str(lost.pk), OperationState.LOST),
    ]


def _messages_for(queue: str) -> list[str]:
    """The task ids waiting on a host's queue in the real broker (kombu's Redis list)."""
    import json

    import redis
    from django.conf import settings

    raw = redis.Redis.from_url(settings.CELERY_BROKER_URL).lrange(queue, 0, -1)
    return [json.loads(m)["headers"]["id"] for m in raw]


def test_a_queued_operation_whose_message_was_lost_is_sent_again_once_its_host_is_idle(revision, operator):
    """A broker restarted without the message (or an agent killed after taking it) would leave the
    switch queued forever, holding the host lock: the beat sends it again (same task id), and
    only to an online host with nothing running, which would have taken it by now."""
    import redis
    from django.conf import settings

    host = revision.host
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(host.queue)
    Host = type(host)
    Host.objects.filter(pk=host.pk).update(last_heartbeat=timezone.now())
    op = switch_request(revision=revision, actor=operator)
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(host.queue)  # the broker lost it
    assert reap_lost_operations() == 0 and _messages_for(host.queue) == []  # still fresh: it may be on its way

    Operation.objects.filter(pk=op.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    Host.objects.filter(pk=host.pk).update(last_heartbeat=timezone.now() - timedelta(hours=1))
    reap_lost_operations()
    assert _messages_for(host.queue) == []  # an offline host: nothing to send it to

    Host.objects.filter(pk=host.pk).update(last_heartbeat=timezone.now())
    reap_lost_operations()
    assert _messages_for(host.queue) == [str(op.pk)]  # sent again, under the operation's own id
    reap_lost_operations()
    assert _messages_for(host.queue) == [str(op.pk)]  # waiting there: not sent a second time
    assert operation_begin(op_id=op.pk, worker="agent") is not None
    assert operation_begin(op_id=op.pk, worker="agent") is None  # the first message, late, does nothing

    other = Operation.objects.create(kind=OperationKind.PROBE, host=host, exclusive=False)
    Operation.objects.filter(pk=other.pk).update(created_at=timezone.now() - timedelta(minutes=2))
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(host.queue)
    reap_lost_operations()
    assert _messages_for(host.queue) == []  # the host is busy with the switch: the probe waits its turn


def test_a_benchmark_whose_operation_was_lost_does_not_stay_running_until_its_late_report(revision, operator):
    """The host's agent was killed mid-benchmark: the run says `lost`, not `running` forever; the
    figures, if the host kept them and sends them later, still fill it in."""
    from deployments.models import BenchmarkRun
    from deployments.services.host_reports import operation_host_begin, operation_host_finish

    op = operation_create(kind=OperationKind.BENCHMARK, host=revision.host, revision=revision,
                          params={"profile": {"name": "quick"}}, actor=operator)  # fmt: skip
    operation_host_begin(host=revision.host, op_id=op.pk, worker="agent")
    assert BenchmarkRun.objects.get(operation=op).status == "running"
    operations_mark_lost(host=revision.host, worker_gone=True, reason="the agent restarted")
    run = BenchmarkRun.objects.get(operation=op)
    assert run.status == "lost" and run.finished_at is not None

    op.refresh_from_db()
    operation_host_finish(op=op, state=OperationState.SUCCEEDED, result={}, error="",
                          benchmark={"status": "completed", "levels": []})  # fmt: skip
    assert BenchmarkRun.objects.get(operation=op).status == "completed"
