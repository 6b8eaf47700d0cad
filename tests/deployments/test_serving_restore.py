"""Serving is desired state: an agent that registers with no engine running gets its host's
active revision started again, once, unless someone pressed Stop or the last start failed.

The agent's side is the real agent API (a host token, HTTP through Django's test client);
the engine end to end is tests/test_serving_restore_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.urls import reverse

from core.models import AuditEvent
from deployments.choices import OperationKind, OperationState
from deployments.models import Deployment, ModelVariant, Operation
from deployments.services.operations import HostBusyError, operation_create
from deployments.services.revisions import revision_mark_active
from deployments.services.serving import start_request, stop_request
from hardware.credentials import host_token_issue
from hardware.models import Host
from notifications.models import Delivery
from notifications.services import channel_create, rule_create
from tests.support.revisions import make_revision
from tests.test_agent_api import Agent

pytestmark = pytest.mark.django_db
STOPPED = {"running": False, "phase": "stopped"}


@pytest.fixture
def box(catalog: None, admin_user: User, operator: User) -> dict[str, Any]:
    """A host whose last switch applied r1, its agent (by token), and no operation running."""
    host, token = host_token_issue(name="box", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    revision = make_revision(host=host, engine="vllm", model_variant=variant, message="r1", actor=operator)
    revision_mark_active(revision=revision, actor=operator, reason="switch")
    return {"host": host, "agent": Agent(token), "revision": revision}


def _register(box: dict[str, Any], engine_state: dict[str, Any]) -> dict[str, Any]:
    answer = box["agent"].post("register", {"facts": {}, "inventory": {"gpus": []}, "engine_state": engine_state})
    assert answer.status_code == 200, answer.content
    return answer.json()


def _launches(host: Host) -> list[Operation]:
    return list(Operation.objects.filter(host=host, kind=OperationKind.LAUNCH).order_by("created_at"))


def _fail(box: dict[str, Any], op: Operation) -> None:
    """The host ends the start as failed, as hostagent/operations/switch.py reports it."""
    agent = box["agent"]
    assert agent.post(f"operations/{op.pk}/begin", {"worker": "agent@box"}).json()["begun"]
    result = {"revision": 1, "previous": None, "reason": "the engine exited with code 1", "rolled_back": False}
    error = "r1 did not come up (the engine exited with code 1); nothing serves until it is started again."
    assert agent.post(f"operations/{op.pk}/finish", {"state": "failed", "result": result, "error": error}).json() == {
        "recorded": True
    }


def test_an_agent_back_with_no_engine_gets_its_active_revision_started_once(
    box: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=False) as sent:
        answer = _register(box, STOPPED)
    [op] = _launches(box["host"])
    assert op.revision == box["revision"] and op.state == OperationState.QUEUED and op.requested_by is None
    assert op.params["reason"] == "restore" and answer["restore"] == {
        "operation": str(op.pk),
        "revision": 1,
        "revision_id": str(box["revision"].pk),  # the agent's door holds requests for it until the start ends
    }
    assert len(sent) == 1  # queued for the host's agent
    assert AuditEvent.objects.filter(action="operation.launch", host=box["host"], actor=None).exists()
    # A second report racing the first (or the first heartbeat after it) queues nothing more.
    assert _register(box, STOPPED)["restore"] is None
    assert len(_launches(box["host"])) == 1


def test_nothing_is_started_while_the_engine_runs_or_another_operation_holds_the_host(
    box: dict[str, Any], operator: User
) -> None:
    running = {"running": True, "healthy": True, "revision_id": str(box["revision"].pk), "revision_label": "r1"}
    assert _register(box, running)["restore"] is None
    # A switch asked for while the agent was away: it decides what runs.
    queued = operation_create(kind=OperationKind.SWITCH, host=box["host"], revision=box["revision"], actor=operator)
    assert _register(box, STOPPED)["restore"] is None
    assert _launches(box["host"]) == [] and Operation.objects.get(pk=queued.pk).state == OperationState.QUEUED


def test_a_host_that_never_served_or_was_stopped_on_purpose_stays_stopped(box: dict[str, Any], operator: User) -> None:
    fresh, token = host_token_issue(name="fresh", actor=None)
    assert Agent(token).post("register", {"facts": {}, "engine_state": STOPPED}).json()["restore"] is None
    stop = stop_request(host=box["host"], actor=operator)
    assert Deployment.objects.get(host=box["host"]).serving is False
    assert AuditEvent.objects.filter(action="host.serving", host=box["host"], actor=operator).exists()
    Operation.objects.filter(pk=stop.pk).update(state=OperationState.SUCCEEDED)
    assert _register(box, STOPPED)["restore"] is None
    assert _launches(box["host"]) == [] and _launches(fresh) == []


def test_start_serves_again_and_the_next_restart_restores(box: dict[str, Any], operator: User) -> None:
    stop = stop_request(host=box["host"], actor=operator)
    with pytest.raises(HostBusyError):  # Stop still running: Start waits for it
        start_request(host=box["host"], actor=operator)
    assert Deployment.objects.get(host=box["host"]).serving is False
    Operation.objects.filter(pk=stop.pk).update(state=OperationState.SUCCEEDED)
    op = start_request(host=box["host"], actor=operator)
    assert op.kind == OperationKind.LAUNCH and op.requested_by == operator and op.params["reason"] == "start"
    assert Deployment.objects.get(host=box["host"]).serving is True
    Operation.objects.filter(pk=op.pk).update(state=OperationState.SUCCEEDED)
    assert _register(box, STOPPED)["restore"] is not None  # serving again: restored after a restart


def test_start_needs_an_active_revision_and_a_stopped_engine(box: dict[str, Any], operator: User) -> None:
    fresh, _ = host_token_issue(name="fresh", actor=None)
    with pytest.raises(ValidationError, match="no active revision"):
        start_request(host=fresh, actor=operator)
    _register(box, {"running": True, "healthy": True, "revision_id": str(box["revision"].pk)})
    with pytest.raises(ValidationError, match="already runs"):
        start_request(host=Host.objects.get(pk=box["host"].pk), actor=operator)
    assert not Operation.objects.exists()


def test_a_failed_restore_is_notified_and_not_tried_again_until_start(
    box: dict[str, Any], admin_user: User, operator: User, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    channel = channel_create(name="ops", url="json://127.0.0.1:9/hook", actor=admin_user)
    rule_create(channel=channel, host=None, events=["switch.failed"], actor=admin_user)
    _register(box, STOPPED)
    [op] = _launches(box["host"])
    with django_capture_on_commit_callbacks(execute=True):
        _fail(box, op)
    op.refresh_from_db()
    assert op.state == OperationState.FAILED and "did not come up" in op.error
    delivery = Delivery.objects.get(channel=channel)
    assert delivery.event == "switch.failed"
    assert "Start of r1 on box after the host restarted failed" in delivery.title + delivery.body
    # The agent restarts again (a crash loop, a reboot): no second attempt, no second message.
    for _ in range(2):
        assert _register(box, STOPPED)["restore"] is None
    assert len(_launches(box["host"])) == 1
    # Start is the way back; after it, restarts restore again.
    again = start_request(host=box["host"], actor=operator)
    Operation.objects.filter(pk=again.pk).update(state=OperationState.SUCCEEDED)
    assert _register(box, STOPPED)["restore"] is not None


def test_operator_starts_and_stops_from_the_host_page_viewer_cannot(
    client: Any, box: dict[str, Any], operator: User, viewer: User, django_capture_on_commit_callbacks: Any
) -> None:
    host = box["host"]
    _register(box, {"running": True, "healthy": True, "revision_id": str(box["revision"].pk)})
    client.force_login(viewer)
    page = client.get(reverse("hardware:host_detail", args=["box"])).content.decode()
    assert reverse("hardware:host_stop", args=["box"]) not in page and "Served again by itself" in page
    assert client.post(reverse("hardware:host_start", args=["box"])).status_code == 403
    assert client.post(reverse("hardware:host_stop", args=["box"])).status_code == 403
    client.force_login(operator)
    page = client.get(reverse("hardware:host_detail", args=["box"])).content.decode()
    assert reverse("hardware:host_stop", args=["box"]) in page
    assert reverse("hardware:host_start", args=["box"]) not in page  # it runs
    with django_capture_on_commit_callbacks(execute=False):
        stopped = client.post(reverse("hardware:host_stop", args=["box"]))
    stop = Operation.objects.get(host=host, kind=OperationKind.STOP)
    assert stopped.url == reverse("deployments:operation_detail", args=[stop.pk])
    Operation.objects.filter(pk=stop.pk).update(state=OperationState.SUCCEEDED)
    _register(box, STOPPED)
    page = client.get(reverse("hardware:host_detail", args=["box"])).content.decode()
    assert "Start r1" in page and "stopped on purpose" in page
    assert reverse("hardware:host_stop", args=["box"]) not in page  # nothing runs, nothing to keep stopped
    with django_capture_on_commit_callbacks(execute=False):
        started = client.post(reverse("hardware:host_start", args=["box"]))
    start = Operation.objects.get(host=host, kind=OperationKind.LAUNCH)
    assert started.url == reverse("deployments:operation_detail", args=[start.pk]) and start.requested_by == operator
    assert AuditEvent.objects.filter(action="operation.launch", host=host, actor=operator).exists()
    again = client.post(reverse("hardware:host_start", args=["box"]), follow=True)
    assert b"Could not start the engine" in again.content and b"is busy" in again.content
