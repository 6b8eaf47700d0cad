"""An agent killed and started again finds the on-demand engine its front door had loaded still
running: the new door counts it loaded at once, found by revision as the pinned one is, and
serves it without a second engine or a reload (the real panel, agent and llama-servers)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from openai import OpenAI

from bench.bench_frontdoor import metric
from deployments.choices import OperationState
from deployments.services.aliases import alias_set
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from hostagent.local import state_dir
from hostagent.runtime.supervisor import Supervisor
from tests.support.llama import free_port
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

from .test_front_door_e2e import DOOR, DOOR_PORT, listed, phases, until

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
ASK = [{"role": "user", "content": "Say hello."}]


@pytest.mark.parametrize("lab", [DOOR], indirect=True)
def test_an_on_demand_engine_still_running_after_an_agent_restart_is_adopted_not_reloaded(
    lab: dict[str, Any], operator: User
) -> None:
    host = lab["host"]
    r1 = lab["rev"]("pinned", 1024, threads=1)
    r2 = make_revision(
        host=host, engine="llama.cpp", model_variant=lab["gemma"], served_name="gemma-wide", port=free_port(),
        knobs=dict(ctx_size=2048, parallel=1, n_gpu_layers=0, threads=1), message="on demand", actor=operator,
    )  # fmt: skip
    op = wait_done(switch_request(revision=r1, actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    serving_mode_set(revision=r2, mode="on-demand", idle_ttl_s=None, actor=operator)
    alias_set(host=host, name="fast", revision=r2, actor=operator)
    until("the door serves fast", lambda: "fast" in listed())
    client = OpenAI(base_url=f"http://127.0.0.1:{DOOR_PORT}/v1", api_key="none", max_retries=0, timeout=120)
    assert client.chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-wide"
    engine = Supervisor(state_dir(host.name) / "ondemand" / f"r{r2.pk}")
    before = engine.status()
    assert before.running and before.pid

    lab["agent"].kill()  # the door dies with it; the engines run in sessions of their own
    lab["agent"] = lab["agent"].sibling(lab["tmp"] / "agent-2.log").start()
    lab["agent"].wait_registered()
    until("the new door serves fast", lambda: "fast" in listed())
    assert phases()["gemma-wide-r2"] == "loaded"  # before any request asked for it
    assert "gemma-wide-r2 (pid" in lab["agent"].log_tail(200) and "adopted" in lab["agent"].log_tail(200)

    assert client.chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma-wide"
    after = engine.status()
    assert after.running and after.pid == before.pid  # the same engine, not a second one
    loads = metric(f"http://127.0.0.1:{DOOR_PORT}", "frontdoor_loads_total", model="gemma-wide-r2")
    assert loads == 0  # and no load: the first request went straight through
