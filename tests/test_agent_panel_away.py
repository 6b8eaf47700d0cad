"""The panel goes away (killed, then started again) while a host's agent benchmarks: nothing the
agent measured is lost. Real panel (gunicorn on the real PostgreSQL), real agent, real Redis,
real llama-server.

While the panel is away the agent keeps the benchmark's result and the engine's metrics in its
outbox; the panel's reaper gives the operation up as `lost` meanwhile; when the panel is back,
the agent sends what it kept and the operation ends with the host's word and every figure.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.choices import OperationState
from deployments.models import BenchmarkRun, ModelVariant, Operation
from deployments.services.benchmarks import benchmark_request, profile_from_input
from deployments.services.operations import operations_mark_lost
from deployments.services.switch import switch_request
from hardware.credentials import host_token_issue
from hardware.models import EngineSample, Host
from hostagent.local import supervisor_for
from tests.support.agent import AgentProcess
from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path
from tests.support.operations import wait_done
from tests.support.panel import PanelServer
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def _until(check: Any, timeout: float, what: str, *logs: Any) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n" + "\n---\n".join(log() for log in logs))


def test_a_panel_restart_loses_no_result_or_telemetry(tmp_path: Path, catalog: None, operator: User, settings) -> None:
    name = f"away-{int(time.time() * 1000) % 10**8}"
    state = tmp_path / "state"
    settings.HOST_STATE_DIR = state
    panel = PanelServer(free_port(), tmp_path / "panel.log").start()
    _host, token = host_token_issue(name=name, actor=None)
    agent = AgentProcess(
        name,
        state,
        tmp_path / "agent.log",
        panel_url=panel.url,
        token=token,
        extra_env={"CONTROLPANEL_AGENT_REPORT_PATIENCE_S": "2"},
    ).start()
    try:
        agent.wait_registered()
        host = Host.objects.get(name=name)
        gemma = ModelVariant.objects.create(
            name=f"gemma-{name}", format="gguf", gguf_file=gemma_model_path(), purpose=GEMMA_PURPOSE
        )
        revision = make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=gemma,
            served_name="gemma",
            port=free_port(),
            knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0, "metrics": True},
            message="gemma with metrics",
            actor=operator,
        )
        switched = wait_done(switch_request(revision=revision, actor=operator))
        assert switched.state == OperationState.SUCCEEDED, switched.log + switched.error

        profile = profile_from_input(name="quick", concurrency=[1], requests=4, input_tokens=32, output_tokens=32)
        op = benchmark_request(host=Host.objects.get(pk=host.pk), profile=profile, actor=operator)
        _until(lambda: " in all" in Operation.objects.get(pk=op.pk).stage, 90, "the benchmark", agent.log_tail)

        panel.kill()
        away_since = datetime.now(tz=UTC)
        outbox = state / name / "outbox"
        _until(lambda: list(outbox.glob("*-finish.json")), 300, "the result kept in the outbox", agent.log_tail)
        # The panel's beat reaper (another process, still up) gives the silent operation up meanwhile.
        Operation.objects.filter(pk=op.pk).update(heartbeat_at=datetime(2000, 1, 1, tzinfo=UTC))
        assert [o.pk for o in operations_mark_lost(reason="the worker stopped reporting")] == [op.pk]
        time.sleep(3)  # engine metrics read while the panel is away wait in the outbox too
        kept = list(outbox.glob("*-telemetry.json"))
        back_since = datetime.now(tz=UTC)

        panel = PanelServer(panel.port, tmp_path / "panel2.log").start()
        _until(lambda: not list(outbox.glob("*.json")), 60, "the outbox to empty", agent.log_tail, panel.log_tail)

        op.refresh_from_db()
        assert op.state == OperationState.SUCCEEDED, (op.state, op.error, op.log[-2000:])
        assert op.result["reported_after_lost"] is True and op.result["status"] == "completed"
        run = BenchmarkRun.objects.get(operation=op)
        assert run.status == "completed" and run.raw and run.results["levels"][0]["completed"] == 4
        assert kept, "the engine's metrics were kept while the panel was away"
        during = EngineSample.objects.filter(host=host, ts__gte=away_since, ts__lt=back_since)
        assert during.count() >= len(kept)
    finally:
        agent.stop()
        panel.kill()
        supervisor_for(name).stop(grace=5)
