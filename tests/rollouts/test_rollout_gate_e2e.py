"""A rollout whose canary must pass a benchmark gate, end to end: two real host agents on this
machine (each its own Celery worker, queue, data folder and engine port), the panel as the live
server on the real PostgreSQL, real Redis, real llama-server with the real Gemma 3 270M.

The gate is the one tests/test_switch_gate_e2e.py proves on a single switch: four requests at
once, where a revision with one slot (--parallel 1) makes the fourth wait for three whole answers
(its TTFT p95 many times the four slots'), whatever the machine's load. The first rollout gives
every host one slot: the canary's gate measures its r1 first (it has no run of the profile), then
the new revision, rolls it back, and the rollout stops failed with the comparison; the second
host is never touched. The second rollout changes nothing that matters (threads_batch = threads):
the canary's gate compares with the run it already has, passes, and only then does the second host
switch. Only the canary serves before; the second host's first revision is recorded as what it
serves without starting it (as on a host whose engine was stopped).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from api.tokens import token_create
from deployments.choices import GateState, OperationState
from deployments.models import ModelVariant, Operation
from deployments.services.gates import gate_from_input
from deployments.services.revisions import revision_mark_active
from deployments.services.switch import switch_request
from hardware.models import Host
from hardware.services import host_tags_set
from hostagent.runtime.supervisor import Supervisor
from rollouts.models import Rollout, RolloutHost
from rollouts.selectors import rollout_canary_gate
from rollouts.services import rollout_start
from serving.benchmarking.profiles import BenchmarkProfile
from tests.rollouts.conftest import active_number, revisions_of, running_agents, wait_ended
from tests.support.agent import AgentProcess
from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
# Four requests at once after one to warm up (a cold first one pages the weights in).
TINY = BenchmarkProfile(
    name="rollout-gate-e2e", concurrency=(4,), num_requests=4, input_tokens=12, output_tokens=80, warmup_requests=1
)


@pytest.fixture
def pair(tmp_path: Path, live_server: Any) -> Any:
    """Two hosts with their agents running, named so that a < b."""
    with running_agents(tmp_path, live_server.url, "ab", "gated") as agents:
        yield agents


def _serving(agent: AgentProcess) -> str | None:
    status = Supervisor(agent.state_dir / agent.name).status()
    return status.revision_label if status.running else None


def test_the_canarys_gate_stops_a_slower_change_and_lets_an_equal_one_through(
    pair: dict[str, AgentProcess], operator: Any
) -> None:
    gemma = ModelVariant.objects.create(
        name=f"gemma-{uuid.uuid4().hex[:6]}",
        format="gguf",
        gguf_file=gemma_model_path(),
        purpose=GEMMA_PURPOSE,
        arch={"architecture": "gemma3", "num_layers": 18},
    )
    hosts = {}
    for letter, agent in pair.items():
        host = Host.objects.get(name=agent.name)
        host_tags_set(host=host, tags=["pair"], actor=operator)
        first = make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=gemma,
            served_name="gemma",
            port=free_port(),
            knobs={"ctx_size": 1024, "parallel": 4, "n_gpu_layers": 0, "threads": 1},  # 4 slots of 256 tokens
            message="four slots",
            actor=operator,
        )
        if letter == "a":  # the canary serves: its gate measures r1 first
            assert wait_done(switch_request(revision=first, actor=operator)).state == OperationState.SUCCEEDED
        else:
            revision_mark_active(revision=first, actor=operator)
        hosts[letter] = host
    # Seen on a loaded 2-core machine (tests/test_switch_gate_e2e.py): one slot's TTFT p95 is 13-18x
    # the four slots', an equal revision's 0.9-1.5x: 300 % (4x) is ~3x from both.
    gate = gate_from_input(profile=TINY, limits="ttft_p95=300,decode=90")

    def roll(knobs: dict[str, Any], message: str) -> Rollout:
        started = rollout_start(
            group="pair",
            kind="revision",
            change={"set": knobs, "message": message},
            batch_size=1,
            gate=gate,
            actor=operator,
        )
        return wait_ended(started, timeout=420)

    slower = roll({"parallel": 1}, "one slot: requests wait in line")
    parts = {p.host.name[-1]: p for p in RolloutHost.objects.filter(rollout=slower).select_related("host")}
    row = rollout_canary_gate(rollout=slower)
    assert row is not None and row.state == GateState.ROLLED_BACK, (row and row.reason, slower.error)
    (ttft,) = [r for r in row.verdict["rows"] if r["metric"] == "ttft_p95"]
    print(f"one slot on the canary: TTFT p95 {ttft['baseline']:.0f} -> {ttft['candidate']:.0f} ms")
    assert ttft["passed"] is False and ttft["change_pct"] > 300
    assert row.baseline_op is not None and row.baseline_run.revision.number == 1  # measured first
    assert slower.state == "failed" and "TTFT p95" in slower.error and hosts["a"].name in slower.error
    assert parts["a"].state == "failed" and "rolled it back to r1" in parts["a"].message
    assert active_number(hosts["a"]) == 1 and _serving(pair["a"]) == "r1"
    # The second host is untouched: no revision, no operation, nothing started.
    assert parts["b"].state == "pending" and revisions_of(hosts["b"]) == [1]
    assert not Operation.objects.filter(host=hosts["b"]).exists() and _serving(pair["b"]) is None

    client = Client()
    client.force_login(operator)
    page = client.get(reverse("rollouts:detail", args=[slower.pk])).content.decode()
    assert "Failed: rolled back to the previous revision" in page and "beyond the 300 % allowed" in page
    token = token_create(user=operator, name="e2e", actor=operator).secret
    api = client.get(f"/api/v1/rollouts/{slower.pk}/", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert api["state"] == "failed" and api["hosts"][0]["gate"]["verdict"]["passed"] is False

    equal = roll({"threads_batch": 1}, "the same again")
    row = rollout_canary_gate(rollout=equal)
    assert row is not None and row.state == GateState.PASSED, (row and row.reason, equal.error)
    assert row.baseline_op is None  # the run of r1 the first rollout's gate made is compared with
    (ttft,) = [r for r in row.verdict["rows"] if r["metric"] == "ttft_p95"]
    print(f"an equal revision on the canary: TTFT p95 {ttft['baseline']:.0f} -> {ttft['candidate']:.0f} ms")
    # llama-server's own clock came back with every request and is kept beside the panel's decode.
    (level,) = row.candidate_run.results["levels"]
    panel, engine = level["decode_tokens_per_s"]["mean"], level["engine_decode_tokens_per_s"]["mean"]
    print(f"decode per stream on the canary's r3: panel {panel:.1f}, llama-server {engine:.1f} tok/s")
    assert panel > 0 and engine > 0
    assert equal.state == "succeeded", equal.error
    # r2 was the rolled-back one: the canary is on r3; the second host switched only after the gate.
    assert active_number(hosts["a"]) == 3 and _serving(pair["a"]) == "r3"
    assert active_number(hosts["b"]) == 2 and _serving(pair["b"]) == "r2"
    b_switch = RolloutHost.objects.get(rollout=equal, host=hosts["b"]).operation
    assert b_switch is not None and b_switch.created_at > row.finished_at
