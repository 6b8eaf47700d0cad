"""A memory report (the telemetry endpoint's `memory`) holds its host's row in no way that the
probe or the heartbeat, which write that row, must wait for: real PostgreSQL, two real
transactions. Before, the report's SELECT ... FOR UPDATE of its readings joined the revision and
host tables (the model's ordering) and locked their rows too; a probe of the same host then
waited on it, and with a heartbeat between them the two deadlocked ("deadlock detected ... while
locking tuple in relation hardware_host"), the report's telemetry answered 500."""

from __future__ import annotations

import time

import pytest

from deployments.models import MeasuredMemory, ModelVariant
from deployments.services.measured_memory import measured_memory_record
from hardware.credentials import host_token_issue
from hardware.models import Host
from hardware.services import host_heartbeat, host_probe_record
from serving.agent_reports import EngineMemory, MemoryReport
from tests.support.locks import Background, held_open, lock_timeout, wait_for_a_lock_wait
from tests.support.revisions import make_revision


def _report(revision_id: int, size: int) -> MemoryReport:
    return MemoryReport(ts=time.time(), engines=(EngineMemory(revision_id=str(revision_id), devices={"gpu0": size}),))


@pytest.mark.django_db(transaction=True)
def test_an_open_memory_report_does_not_hold_up_its_hosts_probe_or_heartbeat(catalog: None, admin_user, operator):
    host, _ = host_token_issue(name="alpha", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    revision = make_revision(host=host, engine="vllm", model_variant=variant, message="m", actor=operator)
    measured_memory_record(host=host, report=_report(revision.pk, 1 << 30))  # its reading exists: the next locks it
    second = _report(revision.pk, 2 << 30)  # its transaction still open while the heartbeat and probe come
    with held_open(lambda: measured_memory_record(host=host, report=second)), lock_timeout(3):  # held up: timeout
        host_heartbeat(host=host, engine_state={"running": True})
        probed = host_probe_record(name=host.name, facts={"kernel": "6.8.0"}, inventory={"gpus": []})
    assert probed.kernel == "6.8.0" and Host.objects.get(pk=host.pk).engine_state == {"running": True}
    row = MeasuredMemory.objects.get(revision=revision, device="gpu0")
    assert (row.latest_bytes, row.peak_bytes, row.readings) == (2 << 30, 2 << 30, 2)  # the report committed too


@pytest.mark.django_db(transaction=True)
def test_two_first_reports_of_one_reading_at_once_both_count(catalog: None, admin_user, operator):
    """The first report of a reading not yet committed when a second comes: the second waits for
    it and counts its reading on the same row. Before, both found no row and inserted one; the
    second failed on measured_memory_once (IntegrityError: the agent's telemetry answered 500)."""
    host, _ = host_token_issue(name="alpha", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    revision = make_revision(host=host, engine="vllm", model_variant=variant, message="m", actor=operator)
    with held_open(lambda: measured_memory_record(host=host, report=_report(revision.pk, 1 << 30))) as kept:
        second = Background(lambda: measured_memory_record(host=host, report=_report(revision.pk, 3 << 30)))
        wait_for_a_lock_wait()  # the second waits on the first's row
    assert (kept, second.result()) == (1, 1)
    row = MeasuredMemory.objects.get(revision=revision, device="gpu0")
    assert (row.latest_bytes, row.peak_bytes, row.readings) == (3 << 30, 3 << 30, 2)
