"""Serving after a restart, end to end: the real agent (Celery worker on its own queue, real
Redis), the panel as a real HTTP server, real llama-server with the real Gemma 3 270M model.

A reboot is played as it leaves a host: the agent SIGKILLed and the engine SIGKILLed with it
(its state folder still names the dead engine). When the agent starts again, the host serves
its active revision again by itself, recorded as an operation; after Stop it does not, and
Start brings it back.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from deployments.services.serving import start_request, stop_request
from deployments.services.switch import switch_request
from hardware.models import Host
from hostagent.local import supervisor_for
from hostagent.runtime.processes import is_alive
from tests.deployments.test_switch_celery import served_models
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def _reboot(lab: dict[str, Any], n: int) -> None:
    """Kill the agent and its engine as a power cut would, then start the agent again."""
    lab["agent"].kill()
    status = supervisor_for(lab["host"].name).status()
    if status.running:
        os.killpg(status.pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while is_alive(status.pid or 0) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not supervisor_for(lab["host"].name).status().running
    lab["agent"] = lab["agent"].sibling(lab["tmp"] / f"agent-{n}.log").start()
    lab["agent"].wait_registered()  # its registration has decided whether to start anything


def _launches(host: Host) -> list[Operation]:
    return list(Operation.objects.filter(host=host, kind=OperationKind.LAUNCH).order_by("created_at"))


def test_after_a_reboot_the_host_serves_its_active_revision_again_by_itself(lab, operator: User) -> None:
    revision = lab["rev"]("gemma at 2k", 2048)
    assert wait_done(switch_request(revision=revision, actor=operator)).state == OperationState.SUCCEEDED
    _reboot(lab, 2)
    [op] = _launches(lab["host"])
    op = wait_done(op)
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert op.revision == revision and op.requested_by is None and op.params["reason"] == "restore"
    assert "starting r1" in op.log and "again after a restart" in op.log
    assert served_models(lab["port"]) == ["gemma"]
    status = supervisor_for(lab["host"].name).status()
    assert status.running and status.revision_id == str(revision.pk)
    assert "starting r1 again" in lab["agent"].log_tail(200)  # the agent's banner says so


def test_a_stopped_host_stays_stopped_after_a_reboot_until_start(lab, operator: User) -> None:
    revision = lab["rev"]("gemma at 2k", 2048)
    assert wait_done(switch_request(revision=revision, actor=operator)).state == OperationState.SUCCEEDED
    host = Host.objects.get(pk=lab["host"].pk)
    assert wait_done(stop_request(host=host, actor=operator)).state == OperationState.SUCCEEDED
    _reboot(lab, 2)
    assert _launches(lab["host"]) == []
    assert not supervisor_for(lab["host"].name).status().running
    op = wait_done(start_request(host=Host.objects.get(pk=lab["host"].pk), actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert op.requested_by == operator and served_models(lab["port"]) == ["gemma"]
