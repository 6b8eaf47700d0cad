"""A GPU host's agent with no key to the panel, end to end: real agent process (Celery worker
on its own queue), real Redis, the panel as a real HTTP server (the live server on the real
PostgreSQL), real llama-server with the real Gemma 3 270M model.

The agent's environment holds the broker URL, the panel's URL and its own host token, and no
database URL and no secret key; it registers, heartbeats, switches to a revision whose API key
is a host secret (the engine then refuses requests without it) and benchmarks it.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from deployments.choices import OperationState
from deployments.models import BenchmarkRun, DeploymentRevision, MeasuredMemory, ModelVariant, active_revision_id_of
from deployments.planning import revision_memory
from deployments.services.benchmarks import benchmark_request, profile_from_input
from deployments.services.secrets import secret_set
from deployments.services.switch import switch_request
from hardware.models import Host
from hostagent.local import supervisor_for
from serving.diffing import fmt
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
API_KEY = "sk-e2e-only-the-engine-and-its-host-know-0123"


@pytest.mark.parametrize("lab", [{"CONTROLPANEL_TELEMETRY_INTERVAL_S": "1"}], indirect=True)
def test_an_agent_without_database_or_secret_key_registers_switches_with_a_secret_and_benchmarks(
    lab, operator: User, admin_user: User
) -> None:
    agent = lab["agent"]
    env = agent.process_environment()
    assert "DATABASE_URL" not in env and "DJANGO_SECRET_KEY" not in env
    # Given the token in its environment, the agent keeps it in memory only (test_engine_env_e2e.py).
    assert "CONTROLPANEL_HOST_TOKEN" not in env and env["CONTROLPANEL_URL"].startswith("http://")
    assert f"Agent for {lab['host'].name}" in agent.log_tail()

    # Registered from its own probe, and heartbeating.
    host = Host.objects.get(pk=lab["host"].pk)
    assert host.last_probe_at is not None and host.model_dirs
    first = host.last_heartbeat
    deadline = time.monotonic() + 15
    while Host.objects.get(pk=host.pk).last_heartbeat == first and time.monotonic() < deadline:
        time.sleep(0.2)
    assert Host.objects.get(pk=host.pk).last_heartbeat > first

    # A switch whose API key is a host secret: the agent gets it from the panel for this launch.
    secret_set(host=host, name="engine-key", value=API_KEY, actor=admin_user)
    # Its size as an import records it (the planner's weights): memory is planned against measured below.
    ModelVariant.objects.filter(pk=lab["gemma"].pk).update(weights_bytes=Path(lab["gemma"].gguf_file).stat().st_size)
    lab["gemma"].refresh_from_db()
    from tests.support.revisions import make_revision

    revision = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=lab["gemma"],
        served_name="gemma",
        port=lab["port"],
        knobs={"ctx_size": "2048", "parallel": 1, "n_gpu_layers": 0},  # as the form and the API type it
        api_key_secret="engine-key",
        message="gemma behind an API key",
        actor=operator,
    )
    op = wait_done(switch_request(revision=revision, actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == revision.pk
    url = f"http://127.0.0.1:{lab['port']}/v1/models"
    assert httpx.get(url, timeout=5).status_code == 401  # the engine enforces the key
    served = httpx.get(url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5)
    assert served.status_code == 200 and served.json()["data"][0]["id"] == "gemma"
    assert API_KEY not in op.log + str(op.result)
    # The revision page's command is what the host runs (issue 25: one serving spec), its
    # worker's own llama-server (reported by its agent) included.
    from deployments.presenters import launch_for_revision

    running = supervisor_for(host.name).status().argv
    shown = launch_for_revision(DeploymentRevision.objects.get(pk=revision.pk)).argv
    assert running == shown and "--ctx-size" in running

    # Memory planned against measured: the agent's telemetry reports the engine's resident memory
    # (RSS, a CPU host), stored beside the planner's weights + KV cache and shown on its page.
    # The first reading may come from while the engine was still loading (CI saw 63 MB of a
    # 253 MB plan): the row keeps the peak, so wait for a reading taken once the weights are in.
    planned = revision_memory(DeploymentRevision.objects.get(pk=revision.pk)).devices["ram"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = MeasuredMemory.objects.filter(revision=revision, device="ram").first()
        if seen is not None and seen.peak_bytes > 0.5 * planned:
            break
        time.sleep(0.2)
    measured = MeasuredMemory.objects.get(revision=revision, device="ram")
    assert measured.planned_bytes == planned and measured.peak_bytes >= measured.latest_bytes > 0
    print(f"gemma 3 270M on llama-server, ctx 2048: planned {planned:,} bytes, RSS {measured.peak_bytes:,} bytes")
    assert 0.5 * planned < measured.peak_bytes < 2.0 * planned  # the weights are most of both
    admin_client = Client()
    admin_client.force_login(admin_user)
    page = admin_client.get(f"/hosts/{host.name}/revisions/{revision.number}/").content.decode()
    assert 'data-device="ram"' in page and fmt.exact_bytes(planned) in page

    # A benchmark through the key, measured on the host, stored on the panel.
    profile = profile_from_input(name="quick", concurrency=[1], requests=2, input_tokens=32, output_tokens=8)
    bench = wait_done(benchmark_request(host=Host.objects.get(pk=host.pk), profile=profile, actor=operator), 120)
    assert bench.state == OperationState.SUCCEEDED, bench.log + bench.error
    run = BenchmarkRun.objects.get(operation=bench)
    assert run.status == "completed" and run.results["levels"] and run.raw
    assert bench.result["benchmark_run"] == run.pk

    # Nothing the agent keeps on disk holds the key (its engine log aside, which it masks).
    for path in agent.state_dir.rglob("*"):
        if path.is_file() and not path.name.endswith(".log"):
            assert API_KEY not in path.read_text(errors="replace"), path


def test_a_message_forged_onto_this_hosts_queue_for_another_hosts_operation_does_nothing(
    lab, operator: User, admin_user: User
) -> None:
    """Anyone with the broker can put a message on host.<lab>; the lab's agent asks the panel
    with its own token, the panel answers 404 for the other host's operation, nothing runs."""
    from controlpanel.celery import app
    from deployments.choices import OperationKind
    from deployments.models import Operation
    from deployments.services.operations import operation_create
    from hardware.credentials import host_token_issue
    from tests.support.revisions import make_revision

    other, _token = host_token_issue(name=f"other-{lab['host'].name}", actor=admin_user)
    Host.objects.filter(pk=other.pk).update(model_dirs=Host.objects.get(pk=lab["host"].pk).model_dirs)
    other.refresh_from_db()
    secret_set(host=other, name="engine-key", value=API_KEY, actor=admin_user)
    theirs = make_revision(
        host=other,
        engine="llama.cpp",
        model_variant=lab["gemma"],
        served_name="gemma",
        port=lab["port"],
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        api_key_secret="engine-key",
        message="the other host's revision",
        actor=operator,
    )
    op = operation_create(kind=OperationKind.SWITCH, host=other, revision=theirs, actor=operator)
    app.send_task("agent.switch", kwargs={"op_id": str(op.pk)}, queue=lab["host"].queue)

    deadline = time.monotonic() + 30
    while "not this host's" not in lab["agent"].log_tail(200) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "not this host's" in lab["agent"].log_tail(200)
    op = Operation.objects.get(pk=op.pk)
    assert op.state == OperationState.QUEUED and op.log == "" and op.worker == ""
    assert not supervisor_for(lab["host"].name).status().running  # nothing was started for it
    assert API_KEY not in lab["agent"].log_tail(500)
