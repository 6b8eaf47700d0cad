"""The agent's port to the panel (hostagent.panel.HttpPanel) against the real panel over HTTP
(the live server): an operation's end waits in the outbox while the panel refuses or is away,
and goes through, once, when it answers again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from deployments.services.operations import operation_create
from hardware.credentials import host_token_issue, host_token_revoke
from hostagent.panel import HttpPanel, PanelAway
from serving.agent_reports import Heartbeat, Hello, OperationEnd
from tests.support.llama import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_end_refused_for_a_revoked_token_waits_and_goes_with_the_new_one(
    live_server: Any, tmp_path: Path, operator: User
) -> None:
    host, old = host_token_issue(name="porthost", actor=None)
    outbox = tmp_path / "outbox"
    panel = HttpPanel(live_server.url, old, outbox_dir=outbox, report_patience=0.5)
    assert panel.hello() == Hello(host="porthost", queue=host.queue)
    op = operation_create(kind=OperationKind.PROBE, host=host, actor=operator)
    order = panel.begin(str(op.pk), worker="agent@porthost")
    assert order is not None and order.kind == "probe" and order.host.name == "porthost"
    assert panel.progress(str(op.pk), stage="probing", progress=0.5, log="reading NVML") is False

    host_token_revoke(host=host, actor=None)
    panel.finish(str(op.pk), OperationEnd(state="succeeded", result={"gpus": 0}))
    assert [p.name.split("-")[-1] for p in outbox.glob("*.json")] == ["finish.json"]
    assert Operation.objects.get(pk=op.pk).state == OperationState.RUNNING
    assert panel.flush() == 0  # still refused: kept

    _host, new = host_token_issue(name="porthost", actor=None)
    restarted = HttpPanel(live_server.url, new, outbox_dir=outbox)
    assert restarted.flush() == 1 and not list(outbox.glob("*.json"))
    op = Operation.objects.get(pk=op.pk)
    assert op.state == OperationState.SUCCEEDED and op.result == {"gpus": 0} and "reading NVML" in op.log
    assert restarted.flush() == 0


def test_progress_lines_said_while_the_panel_is_away_arrive_with_the_end(
    live_server: Any, tmp_path: Path, operator: User
) -> None:
    host, token = host_token_issue(name="awayhost", actor=None)
    op = operation_create(kind=OperationKind.PROBE, host=host, actor=operator)
    HttpPanel(live_server.url, token, outbox_dir=tmp_path / "o1").begin(str(op.pk), worker="w")

    away = HttpPanel(f"http://127.0.0.1:{free_port()}", token, outbox_dir=tmp_path / "o2", report_patience=0.2)
    assert away.progress(str(op.pk), log="line said while away") is False
    with pytest.raises(PanelAway):
        away.heartbeat(Heartbeat(engine_state={}))
    away.finish(str(op.pk), OperationEnd(state="failed", error="probe failed"))
    kept = [p.name.split("-")[-1] for p in (tmp_path / "o2").glob("*.json")]
    assert kept == ["finish.json"]

    back = HttpPanel(live_server.url, token, outbox_dir=tmp_path / "o2")
    assert back.flush() == 1
    op = Operation.objects.get(pk=op.pk)
    assert op.state == OperationState.FAILED and op.error == "probe failed"
    assert op.result["log_kept_while_away"] == "line said while away"
