"""A rollout over three hosts, end to end: three real host agents on this machine (each its own
Celery worker on its own queue, its own data folder and engine port, no key to the panel), the
panel as the live server on the real PostgreSQL, real Redis, real llama-server with the real
Gemma 3 270M.

The change moves every host to the package's GGUF, which carries no chat template, recorded as a
chat model. The hosts a and c pass a template to the engine themselves (a knob of their current
revision, which the derived revision keeps); host b does not, so its new revision answers in the
wrong chat format and the switch's verification refuses it: b's switch fails and b is rolled back.
(Gemma 3 270M is a base model: under Gemma's own template it writes the question back, which the
chat gate refuses too; under a question/answer template it continues with an answer, which passes.
Every host's first revision serves the suite's copy for completions, as it is.) Waves
of one: the canary a keeps the change, b's wave fails and is put back, c is never touched.

Only the canary's start, b's failed start and b's way back run an engine: every host's first
revision is recorded as what it serves without starting it (nothing runs yet, as on a host
whose engine was stopped)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from deployments.models import DeploymentRevision, ModelVariant, Operation
from deployments.services.revisions import revision_mark_active
from hardware.models import Host
from hardware.services import host_tags_set
from hostagent.runtime.supervisor import Supervisor
from rollouts.models import RolloutHost
from rollouts.services import rollout_start
from tests.rollouts.conftest import active_number, revisions_of, running_agents, wait_ended
from tests.support.agent import AgentProcess
from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path, gemma_package_path
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
ARCH = {"architecture": "gemma3", "num_layers": 18}
# A question/answer prompt: the base model answers after "Answer:" (measured: ' “I love you”\n\nQuestion: ...')
# instead of writing the question back, so the chat gate passes it, as it would a model that knows the format.
QA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}Question: "
    "{{ message['content'] | trim }}\n{% else %}Answer: {{ message['content'] | trim }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Answer:{% endif %}"
)


@pytest.fixture
def trio(tmp_path: Path, live_server: Any) -> Any:
    """Three hosts with their agents running, tagged `trio`, named so that a < b < c."""
    with running_agents(tmp_path, live_server.url, "abc", "trio") as agents:
        yield agents


def test_a_rollout_whose_second_wave_fails_keeps_the_canary_rolls_the_wave_back_and_leaves_the_rest(
    trio: dict[str, AgentProcess], operator: Any, tmp_path: Path
) -> None:
    chat = ModelVariant.objects.create(
        name=f"gemma-chat-{uuid.uuid4().hex[:6]}",
        format="gguf",
        gguf_file=gemma_model_path(),
        arch=ARCH,
        purpose=GEMMA_PURPOSE,
    )
    plain = ModelVariant.objects.create(
        name=f"gemma-plain-{uuid.uuid4().hex[:6]}",
        format="gguf",
        gguf_file=gemma_package_path(),
        arch=ARCH,
        purpose="chat",
    )
    template = tmp_path / "qa.jinja"  # under every agent's model folders (their data folders' parent)
    template.write_text(QA_TEMPLATE)
    hosts = {}
    for letter, agent in trio.items():
        host = Host.objects.get(name=agent.name)
        host_tags_set(host=host, tags=["trio"], actor=operator)
        own_template = {} if letter == "b" else {"chat_template_file": str(template)}
        first = make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=chat,
            served_name="gemma",
            port=free_port(),
            knobs={"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0, "threads": 1, **own_template},
            message="gemma with its template",
            actor=operator,
        )
        revision_mark_active(revision=first, actor=operator)
        hosts[letter] = host

    rollout = rollout_start(
        group="trio",
        kind="revision",
        change={"model": plain.name, "message": "the package's own GGUF"},
        batch_size=1,
        actor=operator,
    )
    rollout = wait_ended(rollout)

    parts = {p.host.name[-1]: p for p in RolloutHost.objects.filter(rollout=rollout).select_related("operation")}
    assert rollout.state == "failed" and f"{hosts['b'].name}" in rollout.error, rollout.error
    assert [parts[x].wave for x in "abc"] == [0, 1, 2]
    # The canary keeps the change: its engine serves the new revision.
    assert parts["a"].state == "done" and active_number(hosts["a"]) == 2
    running = Supervisor(trio["a"].state_dir / trio["a"].name).status()
    assert running.running and running.revision_label == "r2"
    # The failed wave is rolled back: b's new revision came up in the wrong chat format, and b
    # serves its first revision again.
    b_switch = parts["b"].operation
    assert parts["b"].state == "failed" and b_switch.result["rolled_back"] is True, b_switch.log[-2000:]
    assert "<|im_end|>" in b_switch.log or "chat format" in b_switch.error, b_switch.error
    assert active_number(hosts["b"]) == 1
    back = Supervisor(trio["b"].state_dir / trio["b"].name).status()
    assert back.running and back.revision_label == "r1"
    # The rest is untouched: no new revision, no operation, nothing started.
    assert parts["c"].state == "pending" and revisions_of(hosts["c"]) == [1]
    assert not Operation.objects.filter(host=hosts["c"]).exists()
    assert not Supervisor(trio["c"].state_dir / trio["c"].name).status().running
    assert DeploymentRevision.objects.get(host=hosts["a"], number=2).model_variant_id == plain.pk
    assert not RolloutHost.objects.filter(claimed=True).exists()
