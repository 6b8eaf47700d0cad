"""A switch with a benchmark gate, end to end: the real agent (Celery worker on its own queue),
the panel as a live HTTP server on the real PostgreSQL, real llama-server with Gemma 3 270M.

The gate's load is four requests at once. The revision serving before has four slots
(--parallel 4), so each request's first token comes after one short prefill; a revision with one
slot is slower by its structure, not by compute: the fourth request waits in line for three whole
answers, so its TTFT p95 is many times the other's however fast or loaded the machine is. It is
switched to, measured and rolled back, and its switch's page shows the comparison that decided
it; a revision equal to the previous one (four slots again) is switched to, measured and kept. The
previous revision has no run of the profile at first, so the gate measures it before the first
switch, and reuses that run for the second.
"""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from deployments.choices import GATE_ACTIVE_STATES, GateState, OperationKind, OperationState
from deployments.models import Operation, SwitchGate, active_revision_id_of
from deployments.services.gates import gate_from_input
from deployments.services.switch import switch_request
from hardware.models import Host
from serving.benchmarking.profiles import BenchmarkProfile
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def wait_gate(op: Operation, timeout: float = 300.0) -> SwitchGate:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gate = SwitchGate.objects.filter(baseline_op=op).first() or SwitchGate.objects.get(switch_op=op)
        if gate.state not in GATE_ACTIVE_STATES:
            return gate
        time.sleep(0.2)
    ops = [o for o in (gate.baseline_op, gate.switch_op, gate.benchmark_op, gate.rollback_op) if o is not None]
    raise AssertionError(
        f"gate still {gate.state}: " + "\n".join(f"{o.kind} {o.state} {o.stage} {o.log[-800:]}" for o in ops)
    )


def test_a_gated_switch_to_a_slower_revision_rolls_back_and_to_an_equal_one_stays(lab, operator: User) -> None:
    host, rev = lab["host"], lab["rev"]
    # Four slots of 256 tokens: each fits a request (12 tokens in, 80 out) with room to spare.
    before = rev("the revision serving now", 1024, threads=1, parallel=4)
    assert wait_done(switch_request(revision=before, actor=operator)).state == OperationState.SUCCEEDED
    # Four requests at once after one to warm up (a cold first one pages the weights in).
    tiny = BenchmarkProfile(
        name="gate-e2e", concurrency=(4,), num_requests=4, input_tokens=12, output_tokens=80, warmup_requests=1
    )
    # Seen on a loaded 2-core machine: one slot's TTFT p95 is 13-18x the four slots' (+1200 % and
    # more), an equal revision's 0.9-1.5x (short runs swing up to 2x): 300 % (4x) is ~3x from both.
    gate = gate_from_input(profile=tiny, limits="ttft_p95=300,decode=90")

    slow = rev("one slot: requests wait in line", 1024, threads=1, parallel=1)
    first = switch_request(revision=slow, gate=gate, actor=operator)
    assert first.kind == OperationKind.BENCHMARK and first.revision_id == before.pk  # measured first
    row = wait_gate(first)
    assert row.state == GateState.ROLLED_BACK, (row.reason, row.verdict)
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == before.pk
    assert row.switch_op.state == OperationState.SUCCEEDED  # its health gate passed: the benchmark failed it
    assert row.rollback_op.kind == OperationKind.ROLLBACK and row.rollback_op.state == OperationState.SUCCEEDED
    (ttft,) = [r for r in row.verdict["rows"] if r["metric"] == "ttft_p95"]
    print(f"slow: TTFT p95 {ttft['baseline']:.0f} -> {ttft['candidate']:.0f} ms ({ttft['change_pct']:+.0f} %)")
    assert ttft["passed"] is False and ttft["change_pct"] > 300, row.verdict
    assert row.baseline_run.revision_id == before.pk and row.candidate_run.revision_id == slow.pk

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("deployments:operation_detail", args=[row.switch_op.pk])).content.decode()
    assert "Failed: rolled back to the previous revision" in page
    assert (
        "TTFT p95" in page and "beyond the 300 % allowed" in page and f"r{slow.number} against r{before.number}" in page
    )

    same = rev("the same again", 1024, threads=1, parallel=4)
    switched = switch_request(revision=same, gate=gate, actor=operator)
    assert switched.kind == OperationKind.SWITCH  # the earlier run of r{before} is compared with
    row = wait_gate(switched)
    assert row.state == GateState.PASSED, (row.reason, row.verdict)
    assert row.rollback_op is None and row.baseline_op is None
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == same.pk
    (ttft,) = [r for r in row.verdict["rows"] if r["metric"] == "ttft_p95"]
    print(f"equal: TTFT p95 {ttft['baseline']:.0f} -> {ttft['candidate']:.0f} ms ({ttft['change_pct']:+.0f} %)")
    assert row.reason.startswith("all ") and "within the limits" in row.reason
