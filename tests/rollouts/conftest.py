"""A fleet of hosts in one group, each serving r1, with no agent: a switch's end is reported the
way the agent API reports it (operation_host_finish), and what follows it (operation_ended,
sent after the commit) runs as it does in the panel."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from deployments.choices import OperationState
from deployments.models import DeploymentRevision, ModelVariant, Operation
from deployments.services.host_reports import operation_host_begin, operation_host_finish
from deployments.services.revisions import revision_mark_active
from hardware.credentials import host_token_issue
from hardware.models import Host
from hardware.services import host_tags_set
from hostagent.runtime.supervisor import Supervisor
from rollouts.models import Rollout
from tests.hardware.factories import HostFactory
from tests.support.agent import AgentProcess
from tests.support.revisions import make_revision

MODEL = "Qwen3.5-122B-A10B-Q6_K_XL"


@pytest.fixture
def fleet(catalog: None, operator: Any) -> dict[str, Host]:
    """Hosts a, b, c, d (named fleet-a ...) tagged `fleet`, each serving its r1."""
    hosts = {}
    for letter in "abcd":
        host = HostFactory(name=f"fleet-{letter}")
        host_tags_set(host=host, tags=["fleet", f"only-{letter}"], actor=operator)
        first = make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=ModelVariant.objects.get(name=MODEL),
            knobs={"ctx_size": 4096, "n_gpu_layers": 0},
            message="first",
            actor=operator,
        )
        revision_mark_active(revision=first, actor=operator)
        hosts[letter] = host
    return hosts


def end_switch(op: Operation, ok: bool, capture: Any, error: str = "did not come up") -> None:
    """The host's agent reports the switch's end (as deployments.agent_api does), and what
    follows the commit runs."""
    with capture(execute=True):
        operation_host_begin(host=op.host, op_id=op.pk, worker="test")
        operation_host_finish(
            op=op,
            state=OperationState.SUCCEEDED if ok else OperationState.FAILED,
            result={"revision": op.revision.number if op.revision else None, "rolled_back": not ok},
            error="" if ok else error,
        )


def active_number(host: Host) -> int | None:
    host = Host.objects.select_related("deployment__active_revision").get(pk=host.pk)
    revision = host.deployment.active_revision if hasattr(host, "deployment") else None
    return revision.number if revision else None


def revisions_of(host: Host) -> list[int]:
    return list(DeploymentRevision.objects.filter(host=host).order_by("number").values_list("number", flat=True))


@contextmanager
def running_agents(tmp_path: Path, panel_url: str, letters: str, stem: str) -> Iterator[dict[str, AgentProcess]]:
    """A real host agent per letter (each its own Celery worker, queue, data folder and engine
    port), registered with the panel; hosts named `{stem}-{letter}-xxxxxx`, in the letters' order.
    Stopped with their engines after."""
    stem = f"{stem}-{uuid.uuid4().hex[:6]}"
    agents = {}
    for letter in letters:
        name = f"{stem}-{letter}"
        _host, token = host_token_issue(name=name, actor=None)
        agents[letter] = AgentProcess(
            name, tmp_path / f"{letter}-state", tmp_path / f"{letter}.log", panel_url=panel_url, token=token
        ).start()
    try:
        for agent in agents.values():
            agent.wait_registered()
        yield agents
    finally:
        for agent in agents.values():  # all told at once, then waited for
            if agent.proc is not None and agent.proc.poll() is None:
                agent.proc.terminate()
        for agent in agents.values():
            agent.stop()
        for agent in agents.values():
            Supervisor(agent.state_dir / agent.name).stop(grace=5)


def wait_ended(rollout: Rollout, timeout: float = 240.0) -> Rollout:
    """The rollout once it ended (succeeded, failed or cancelled); AssertionError with each host's
    state when it is still open after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rollout.refresh_from_db()
        if not rollout.is_open:
            return rollout
        time.sleep(0.3)
    parts = {p.host.name: (p.state, p.message) for p in rollout.hosts.select_related("host")}
    raise AssertionError(f"rollout still {rollout.state}: {parts}")
