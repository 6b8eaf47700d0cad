"""An engine never holds its agent's token (issue 24), end to end: the real agent (as a GPU host
runs it, the token in its environment), a switch to a real llama-server, and the kernel's view of
both processes' environments (/proc/<pid>/environ, which any process of the same user, the
engine included, may read)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from deployments.choices import OperationState
from deployments.services.switch import switch_request
from hostagent.local import supervisor_for
from hostagent.runtime.strays import ENGINE_OWNER_ENV
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

AGENT_EXTRA = {
    "SOME_RANDOM_VAR": "not-for-engines",
    "AWS_SECRET_ACCESS_KEY": "aws-SeCrEt-of-the-host-0123456789",
    "CONTROLPANEL_PASS_ENV": "LAB_SITE_*",  # the host's own addition to the allowlist
    "LAB_SITE_MIRROR": "https://mirror.lab.example",
}


def environ_of(pid: int) -> tuple[bytes, dict[str, str]]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return raw, {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


@pytest.mark.parametrize("lab", [AGENT_EXTRA], indirect=True)
def test_an_engine_sees_the_allowlist_and_its_revisions_env_never_the_agents_token(lab, operator: User) -> None:
    agent = lab["agent"]
    token = agent.token
    revision = make_revision(
        host=lab["host"],
        engine="llama.cpp",
        model_variant=lab["gemma"],
        served_name="gemma",
        port=lab["port"],
        knobs={"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0},
        env={"OMP_NUM_THREADS": "1"},
        message="an engine with an environment of its own",
        actor=operator,
    )
    op = wait_done(switch_request(revision=revision, actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error  # the allowlist is enough to serve
    engine = supervisor_for(lab["host"].name).status().pid
    assert engine is not None

    raw, env = environ_of(engine)
    assert token.encode() not in raw
    assert [k for k in env if k.startswith("CONTROLPANEL_")] == [ENGINE_OWNER_ENV]
    for name in ("SOME_RANDOM_VAR", "AWS_SECRET_ACCESS_KEY", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"):
        assert name not in env, name
    assert env["OMP_NUM_THREADS"] == "1"  # the revision's own, validated
    assert env["LAB_SITE_MIRROR"] == "https://mirror.lab.example" and env["PATH"] and env["HOME"]

    # The agent was given the token in its environment; once read, it is gone from there too
    # (the engine's parent is the agent: its /proc/<pid>/environ was one read away).
    agent_raw, agent_env = environ_of(agent.proc.pid)
    assert token.encode() not in agent_raw and "CONTROLPANEL_HOST_TOKEN" not in agent_env
    assert agent_env["CONTROLPANEL_URL"] == agent.panel_url
