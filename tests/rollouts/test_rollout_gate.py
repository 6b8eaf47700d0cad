"""A rollout whose canary carries a benchmark gate, without agents: the next wave waits for the
gate's verdict, a passing gate lets it start (its hosts switch without a gate), a gate that rolls
the canary back stops the rollout with the comparison on its page, in the API and the CLI, the
other hosts untouched; and the gate as the form, the API and the CLI take it (the end to end run
with real agents and llama-server is tests/rollouts/test_rollout_gate_e2e.py).

The agents' reports are replayed through the panel's own intake (operation_host_begin/finish);
what follows each end (operation_ended, gate_ended, after the commit) runs as in the panel.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from api.tokens import token_create
from deployments.choices import GateState, OperationKind, OperationState
from deployments.models import DeploymentRevision, Operation, SwitchGate
from deployments.services.gates import gate_from_input, gate_of
from deployments.services.host_reports import operation_host_begin, operation_host_finish
from rollouts.models import Rollout, RolloutHost
from rollouts.services import rollout_start
from serving.benchmarking.profiles import BenchmarkProfile
from tests.rollouts.conftest import active_number, revisions_of
from tests.support.gate_runs import gate_run_report

pytestmark = pytest.mark.django_db
PROFILE = BenchmarkProfile(name="rollout-gate", num_requests=2, input_tokens=16, output_tokens=4, warmup_requests=0)
CHANGE = {"set": {"threads": 4}, "message": "four threads everywhere"}


def _bench(decode: float) -> dict[str, Any]:
    return gate_run_report(PROFILE, decode, 50.0)


def _end(op: Operation, capture: Any, **report: Any) -> None:
    with capture(execute=True):
        operation_host_begin(host=op.host, op_id=op.pk, worker="agent@test")
        operation_host_finish(
            op=Operation.objects.get(pk=op.pk), state=OperationState.SUCCEEDED, result={}, error="", **report
        )


def _earlier_run(host: Any, capture: Any) -> None:
    """A run of PROFILE on the host's r1, as an operator made before: the gate compares with it."""
    r1 = DeploymentRevision.objects.get(host=host, number=1)
    op = Operation.objects.create(
        kind=OperationKind.BENCHMARK, host=host, revision=r1, params={"profile": PROFILE.to_dict(), "revision": 1}
    )
    _end(op, capture, benchmark=_bench(100.0))


def _parts(rollout: Rollout) -> dict[str, RolloutHost]:
    return {p.host.name[-1]: p for p in RolloutHost.objects.filter(rollout=rollout).select_related("host", "operation")}


def _gated(fleet: Any, operator: Any, capture: Any) -> tuple[Rollout, SwitchGate]:
    _earlier_run(fleet["a"], capture)
    with capture(execute=True):
        rollout = rollout_start(
            group="fleet",
            kind="revision",
            change=CHANGE,
            batch_size=2,
            gate=gate_from_input(profile=PROFILE, limits="decode=10"),
            actor=operator,
        )
    canary = _parts(rollout)["a"]
    gate = gate_of(canary.operation)
    assert gate is not None and canary.operation == gate.switch_op and gate.revision == canary.target
    assert canary.state == "switching" and "then its benchmark gate" in canary.message
    return rollout, gate


def test_the_next_wave_waits_for_the_canarys_gate_and_starts_once_it_passed(
    fleet, operator, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    rollout, gate = _gated(fleet, operator, capture)
    assert rollout.gate == {"profile": PROFILE.to_dict(), "limits": {"decode": 10.0}}

    _end(gate.switch_op, capture)  # the canary's switch is healthy: its gate measures now
    gate.refresh_from_db()
    assert gate.state == GateState.MEASURING
    assert {k: p.state for k, p in _parts(rollout).items()} == {
        "a": "switching",
        "b": "pending",
        "c": "pending",
        "d": "pending",
    }
    assert revisions_of(fleet["b"]) == [1]  # the next wave waits for the verdict

    _end(gate.benchmark_op, capture, benchmark=_bench(97.0))  # 3 % slower: within the 10 %
    parts = _parts(rollout)
    assert parts["a"].state == "done" and "benchmark gate passed" in parts["a"].message
    assert [parts[x].state for x in "bcd"] == ["switching", "switching", "pending"]
    for letter in "bc":  # the later waves switch without a gate: the canary proved the change
        op = parts[letter].operation
        assert op.kind == OperationKind.SWITCH and "gated" not in op.params and gate_of(op) is None
    for letter in "bc":
        _end(parts[letter].operation, capture)
    _end(_parts(rollout)["d"].operation, capture)
    rollout.refresh_from_db()
    assert rollout.state == "succeeded" and [active_number(h) for h in fleet.values()] == [2, 2, 2, 2]


def test_a_gate_that_rolls_the_canary_back_stops_the_rollout_and_shows_why(
    fleet, operator, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    rollout, gate = _gated(fleet, operator, capture)
    _end(gate.switch_op, capture)
    gate.refresh_from_db()
    _end(gate.benchmark_op, capture, benchmark=_bench(60.0))  # 40 % slower: beyond the 10 %
    gate.refresh_from_db()
    assert gate.state == GateState.ROLLING_BACK
    rollout.refresh_from_db()
    assert rollout.state == "running" and _parts(rollout)["a"].state == "switching"  # until it is back
    _end(gate.rollback_op, capture)

    rollout.refresh_from_db()
    parts = _parts(rollout)
    assert rollout.state == "failed" and "40.0 % below, beyond the 10 % allowed" in rollout.error
    assert parts["a"].state == "failed" and "rolled it back to r1" in parts["a"].message
    assert active_number(fleet["a"]) == 1
    for letter in "bcd":  # untouched: no revision, no operation
        assert parts[letter].state == "pending" and revisions_of(fleet[letter]) == [1]
        assert not Operation.objects.filter(host=fleet[letter]).exists()
    assert not RolloutHost.objects.filter(claimed=True).exists()

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("rollouts:detail", args=[rollout.pk])).content.decode()
    assert "Failed: rolled back to the previous revision" in page and 'class="gate-comparison"' in page
    assert "beyond the 10 % allowed" in page and "r2 against r1" in page
    token = token_create(user=operator, name="t", actor=operator).secret
    api = client.get(f"/api/v1/rollouts/{rollout.pk}/", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    canary = api["hosts"][0]
    assert api["state"] == "failed" and canary["state"] == "failed"
    assert canary["gate"]["state"] == "rolled_back" and canary["gate"]["verdict"]["passed"] is False
    (row,) = canary["gate"]["verdict"]["rows"]
    assert row["metric"] == "decode" and row["baseline"] == 100.0 and row["candidate"] == 60.0
    assert all(h["gate"] is None for h in api["hosts"][1:])
    out = StringIO()
    call_command("rollout", "show", str(rollout.pk), stdout=out)
    assert "Benchmark gate on the canary (fleet-a): Failed: rolled back" in out.getvalue()
    assert "decode tokens/s per stream (concurrency 1): BEYOND: 40.0 % below" in out.getvalue()


def test_the_gate_from_the_form_the_api_and_the_cli(fleet, operator, django_capture_on_commit_callbacks):
    _earlier_run(fleet["a"], django_capture_on_commit_callbacks)
    client = Client()
    client.force_login(operator)
    form = {"group": "fleet", "kind": "revision", "knobs": "threads=4", "message": "m", "batch_size": "2"}
    bad = client.post(reverse("rollouts:new"), {**form, "gate_profile": "quick", "gate_limits": "speed=5"})
    assert bad.status_code == 400 and "unknown gate metric" in bad.content.decode()
    assert not Rollout.objects.exists()
    made = client.post(reverse("rollouts:new"), {**form, "gate_profile": "quick", "gate_limits": "decode=5"})
    assert made.status_code == 302
    rollout = Rollout.objects.get()
    assert rollout.gate["limits"] == {"decode": 5.0} and rollout.gate["profile"]["name"] == "quick"
    assert gate_of(_parts(rollout)["a"].operation) is not None  # the quick profile's first step on the canary
    call_command("rollout", "cancel", str(rollout.pk), stdout=StringIO())

    token = token_create(user=operator, name="t", actor=operator).secret
    # Each attempt's canary another host: the cancelled rollout's gate still runs on fleet-a.
    body = {"group": "fleet", "set": {"threads": 4}, "message": "api", "canary": "fleet-b"}
    body["gate"] = {"profile": "quick", "max_drop": {}}
    auth = {"content_type": "application/json", "HTTP_AUTHORIZATION": f"Bearer {token}"}
    refused = client.post("/api/v1/rollouts/", body, **auth)
    assert refused.status_code == 400 and "at least one limit" in refused.content.decode()
    body["gate"] = {"profile": "quick", "max_drop": {"decode": 5, "ttft_p95": 10}}
    answer = client.post("/api/v1/rollouts/", body, **auth)
    assert answer.status_code == 201, answer.content
    got = answer.json()
    assert got["gate"]["limits"] == {"decode": 5.0, "ttft_p95": 10.0} and got["hosts"][0]["gate"]["state"]
    call_command("rollout", "cancel", str(got["id"]), stdout=StringIO())

    with pytest.raises(CommandError, match="--gate and --max-drop go together") as caught:
        call_command("rollout", "start", "--group", "fleet", "--set", "threads=4", "--message", "m", "--gate", "quick")
    assert caught.value.returncode == 2
    out = StringIO()
    call_command(
        "rollout", "start", "--group", "fleet", "--set", "threads=4", "--message", "m", "--canary", "fleet-c",
        "--gate", "quick", "--max-drop", "decode=5", stdout=out,
    )  # fmt: skip
    rollout = Rollout.objects.order_by("-pk").first()
    assert rollout.gate["limits"] == {"decode": 5.0} and gate_of(_parts(rollout)["c"].operation) is not None


def test_an_alias_move_carries_no_gate(fleet, operator):
    with pytest.raises(ValidationError) as caught:
        rollout_start(
            group="fleet",
            kind="alias",
            change={"alias": "chat", "tag": "stable"},
            batch_size=1,
            gate=gate_from_input(profile=PROFILE, limits="decode=5"),
            actor=operator,
        )
    assert "switches nothing" in " ".join(caught.value.message_dict["gate_profile"])
    assert not Rollout.objects.exists()
