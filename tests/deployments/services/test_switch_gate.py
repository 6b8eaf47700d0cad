"""A switch's benchmark gate without an agent: bad input refused with nothing queued, roles, and
each step taken when the previous operation ends.

The agent's reports are replayed through the panel's own intake (operation_host_begin/finish,
what the agent API calls); the messages to the host's queue are recorded instead of sent (the
delivery, the real agent and llama-server are in tests/test_switch_gate_e2e.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from api.tokens import token_create
from deployments.choices import GateState, OperationKind, OperationState
from deployments.models import BenchmarkRun, ModelVariant, Operation, SwitchGate, active_revision_id_of
from deployments.services import benchmarks, gates, switch
from deployments.services.gates import gate_from_input
from deployments.services.host_reports import operation_host_begin, operation_host_finish
from deployments.services.revisions import revision_mark_active
from deployments.services.switch import switch_request
from hardware.models import Host
from notifications.events import gate_event
from serving.benchmarking.profiles import BenchmarkProfile
from tests.hardware.factories import HostFactory
from tests.support.gate_runs import gate_run_report
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
PROFILE = BenchmarkProfile(name="gate-test", num_requests=2, input_tokens=16, output_tokens=4, warmup_requests=0)


@pytest.fixture
def sent(monkeypatch) -> list[Operation]:
    queued: list[Operation] = []
    monkeypatch.setattr(gates, "operation_dispatch", queued.append)
    monkeypatch.setattr(switch, "operation_dispatch", queued.append)
    monkeypatch.setattr(benchmarks, "operation_dispatch", queued.append)
    return queued


@pytest.fixture
def two(catalog, operator) -> tuple[Any, Any]:
    """A host serving r1, and r2 to switch to."""
    host = HostFactory()
    variant = ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL")

    def rev(message: str) -> Any:
        return make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=variant,
            knobs={"ctx_size": 4096, "n_gpu_layers": 0},
            message=message,
            actor=operator,
        )

    old, new = rev("serving"), rev("candidate")
    revision_mark_active(revision=old, actor=operator)
    return old, new


def _bench(decode: float, ttft: float) -> dict[str, Any]:
    return gate_run_report(PROFILE, decode, ttft)


def _end(op: Operation, state: str = OperationState.SUCCEEDED, **report: Any) -> None:
    """What the host's agent reports, through the panel's intake; the gate moves on after the commit."""
    operation_host_begin(host=op.host, op_id=op.pk, worker="agent@test")
    operation_host_finish(op=Operation.objects.get(pk=op.pk), state=state, result={}, error="", **report)


def _earlier_run(revision: Any) -> Operation:
    """A run of PROFILE on `revision`, as one an operator asked for before the gated switch."""
    earlier = Operation.objects.create(
        kind=OperationKind.BENCHMARK,
        host=revision.host,
        revision=revision,
        params={"profile": PROFILE.to_dict(), "revision": revision.number},
    )
    _end(earlier, benchmark=_bench(100.0, 50.0))
    return earlier


def _bearer(user: Any) -> str:
    return f"Bearer {token_create(user=user, name='gate test', actor=user).secret}"


def _gate(op: Operation) -> SwitchGate:
    return SwitchGate.objects.get(pk=gates.gate_of(op).pk)


def test_a_regression_beyond_a_limit_rolls_back_and_keeps_the_comparison(
    two, operator, sent, django_capture_on_commit_callbacks
):
    old, new = two
    gate = gate_from_input(profile=PROFILE, limits="decode=10,ttft_p95=20")
    with django_capture_on_commit_callbacks(execute=True):
        baseline = switch_request(revision=new, gate=gate, actor=operator)
    assert baseline.kind == OperationKind.BENCHMARK and baseline.revision == old  # no run to compare with yet
    assert sent == [baseline]
    with django_capture_on_commit_callbacks(execute=True):
        _end(baseline, benchmark=_bench(100.0, 50.0))
    row = _gate(baseline)
    assert row.state == GateState.SWITCHING and row.baseline_run.operation_id == baseline.pk
    assert sent[-1] == row.switch_op and row.switch_op.params["gated"] is True
    with django_capture_on_commit_callbacks(execute=True):
        _end(row.switch_op)
    row = _gate(baseline)
    assert active_revision_id_of(Host.objects.get(pk=old.host_id)) == new.pk
    assert row.state == GateState.MEASURING and row.benchmark_op.revision == new and sent[-1] == row.benchmark_op
    with django_capture_on_commit_callbacks(execute=True):
        _end(row.benchmark_op, benchmark=_bench(70.0, 52.0))  # 30 % slower decode, TTFT within
    row = _gate(baseline)
    assert row.state == GateState.ROLLING_BACK
    assert row.rollback_op.kind == OperationKind.ROLLBACK and row.rollback_op.revision == old
    assert "30.0 % below, beyond the 10 % allowed" in row.reason
    assert [(r["metric"], r["passed"]) for r in row.verdict["rows"]] == [("decode", False), ("ttft_p95", True)]
    with django_capture_on_commit_callbacks(execute=True):
        _end(row.rollback_op)
    row = _gate(baseline)
    event = gate_event(row)
    assert event.kind == "switch.rolled_back" and "failed its benchmark gate" in event.summary
    assert row.state == GateState.ROLLED_BACK and row.finished_at is not None
    assert active_revision_id_of(Host.objects.get(pk=old.host_id)) == old.pk

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("deployments:operation_detail", args=[row.switch_op.pk])).content.decode()
    assert "Failed: rolled back to the previous revision" in page and "beyond the 10 % allowed" in page
    api = client.get(f"/api/v1/operations/{row.rollback_op.pk}/", HTTP_AUTHORIZATION=_bearer(operator)).json()
    assert api["gate"]["state"] == "rolled_back" and api["gate"]["verdict"]["passed"] is False


def test_an_equal_revision_passes_and_an_earlier_run_is_compared_with(
    two, operator, sent, django_capture_on_commit_callbacks
):
    old, new = two
    with django_capture_on_commit_callbacks(execute=True):
        earlier = _earlier_run(old)
    assert BenchmarkRun.objects.get(operation=earlier).status == "completed"
    other_load = BenchmarkProfile.from_dict({**PROFILE.to_dict(), "output_tokens": 8})
    assert gates.baseline_run(old, other_load) is None  # another load is no baseline
    with django_capture_on_commit_callbacks(execute=True):
        op = switch_request(revision=new, gate=gate_from_input(profile=PROFILE, limits="decode=5"), actor=operator)
    assert op.kind == OperationKind.SWITCH  # the earlier run of r1 is the baseline
    with django_capture_on_commit_callbacks(execute=True):
        _end(op)
    with django_capture_on_commit_callbacks(execute=True):
        _end(_gate(op).benchmark_op, benchmark=_bench(98.0, 50.0))
    row = _gate(op)
    assert row.state == GateState.PASSED and row.rollback_op is None
    assert active_revision_id_of(Host.objects.get(pk=old.host_id)) == new.pk


def test_a_switch_that_fails_stops_the_gate_with_its_reason(two, operator, sent, django_capture_on_commit_callbacks):
    old, new = two
    with django_capture_on_commit_callbacks(execute=True):
        _earlier_run(old)
        op = switch_request(revision=new, gate=gate_from_input(profile=PROFILE, limits="decode=5"), actor=operator)
    with django_capture_on_commit_callbacks(execute=True):
        operation_host_begin(host=op.host, op_id=op.pk, worker="agent@test")
        operation_host_finish(op=op, state=OperationState.FAILED, result={"rolled_back": True}, error="did not come up")
    row = _gate(op)
    assert row.state == GateState.STOPPED and row.reason == "the switch failed: did not come up"
    assert row.benchmark_op is None and sent == [op]


@pytest.mark.parametrize(
    ("profile", "limits", "field", "message"),
    [
        ("quick", "speed=5", "gate_limits", "unknown gate metric 'speed'"),
        ("quick", "decode=-5", "gate_limits", "0 % or more"),
        ("no-such-profile", "decode=5", "gate_profile", "unknown profile 'no-such-profile'"),
        ("quick", "", "gate_limits", "at least one limit"),
    ],
)
def test_bad_gate_input_is_refused_clearly_and_queues_nothing(two, operator, sent, profile, limits, field, message):
    old, new = two
    before = Operation.objects.count()
    with pytest.raises(ValidationError) as exc:
        switch_request(revision=new, gate=gate_from_input(profile=profile, limits=limits), actor=operator)
    assert message in " ".join(exc.value.message_dict[field])
    client = Client()
    client.force_login(operator)
    answer = client.post(
        f"/api/v1/hosts/{new.host.name}/switch/",
        {"revision": new.number, "gate": {"profile": profile, "max_drop": dict([limits.split("=")]) if limits else {}}},
        content_type="application/json",
        HTTP_AUTHORIZATION=_bearer(operator),
    )
    assert answer.status_code == 400 and message in answer.content.decode()
    page = client.post(
        reverse("deployments:revision_switch", args=[new.host.name, new.number]),
        {"gate_profile": profile, "gate_limits": limits},
    )
    shown = "is not one of the available choices" if field == "gate_profile" else message  # the form's own list
    assert page.status_code == 200 and shown.replace("'", "&#x27;") in page.content.decode()
    with pytest.raises(CommandError) as cli:
        call_command(
            "switch", host=new.host.name, revision=new.number, gate=profile, max_drop=limits, user=operator.username
        )
    assert cli.value.returncode == 2 and message in str(cli.value)
    assert Operation.objects.count() == before and not SwitchGate.objects.exists() and sent == []
    assert active_revision_id_of(Host.objects.get(pk=old.host_id)) == old.pk


def test_a_gate_needs_a_revision_serving_and_a_different_one(two, operator, sent):
    old, new = two
    gate = gate_from_input(profile=PROFILE, limits="decode=5")
    with pytest.raises(ValidationError, match="already active"):
        switch_request(revision=old, gate=gate, actor=operator)
    with pytest.raises(CommandError, match="--gate and --max-drop go together"):
        call_command("switch", host=new.host.name, revision=new.number, gate="quick", user=operator.username)
    assert not Operation.objects.exists() and sent == []


def test_only_operators_may_ask_for_a_gated_switch(two, viewer, sent):
    _old, new = two
    gate = gate_from_input(profile=PROFILE, limits="decode=5")
    with pytest.raises(PermissionDenied):
        switch_request(revision=new, gate=gate, actor=viewer)
    client = Client()
    client.force_login(viewer)
    answer = client.post(
        f"/api/v1/hosts/{new.host.name}/switch/",
        {"revision": new.number, "gate": {"profile": "quick", "max_drop": {"decode": 5}}},
        content_type="application/json",
        HTTP_AUTHORIZATION=_bearer(viewer),
    )
    assert answer.status_code == 403
    page = client.post(
        reverse("deployments:revision_switch", args=[new.host.name, new.number]),
        {"gate_profile": "quick", "gate_limits": "decode=5"},
    )
    assert page.status_code == 403
    assert not Operation.objects.exists() and not SwitchGate.objects.exists() and sent == []
