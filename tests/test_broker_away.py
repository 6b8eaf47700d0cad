"""The broker (Redis) going away under a real agent, as a restart or the OOM killer leaves it:
nothing a person asked for is lost, refused with a 500 or run twice.

- Asked while the broker is away: the request answers at once, the operation stays queued with
  the reason in its log, and the re-send of stranded operations sends it once the broker is back.
- Dropped in the middle of a task, back only after the task ended (its acknowledgement fails):
  the agent lives on and takes the next operation; the message left unacknowledged, handed back
  later as the visibility timeout would, does nothing (the operation row is the truth).

Each test runs its own redis-server (tests/support/private_redis.py), with an append-only file as
docker-compose runs it: the machine's shared Redis is never killed."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from controlpanel.broker import host_unacked_keys
from deployments.choices import OperationState
from deployments.models import Operation
from deployments.services.operations import RESEND_AFTER, operations_resend_stranded
from deployments.services.switch import probe_request, switch_request
from tests.support.operations import wait_done
from tests.support.private_redis import PrivateRedis, panel_broker
from tests.support.receivers import wait_for

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def broker(tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A private Redis for the panel and the agent `lab` starts (ask for it before `lab`)."""
    server = PrivateRedis(tmp_path_factory.mktemp("redis"), appendonly=True).start()
    with panel_broker(server.admin_url, monkeypatch):
        yield server
    server.stop()


def resend_stranded() -> list[Operation]:
    """Beat's sweep, as it runs once an operation has waited RESEND_AFTER."""
    return operations_resend_stranded(now=timezone.now() + RESEND_AFTER + timedelta(seconds=1))


def test_an_operation_asked_while_the_broker_is_away_stays_queued_and_runs_once_it_is_back(
    broker: PrivateRedis, lab: Any, operator: User
) -> None:
    host = lab["host"]
    broker.kill()
    client = Client()
    client.force_login(operator)

    asked = time.monotonic()
    response = client.post(reverse("hardware:host_probe", args=[host.name]))
    waited = time.monotonic() - asked

    op = Operation.objects.get(host=host, kind="probe")
    assert response.status_code == 302, response.content[:500]  # not a 500
    assert response.url == reverse("deployments:operation_detail", args=[op.pk])
    assert waited < 15, f"the request waited {waited:.1f} s for the broker"
    assert op.state == OperationState.QUEUED
    assert "the broker is unreachable" in op.log and "sent again once the broker is back" in op.log
    assert "the broker is unreachable" in client.get(response.url).content.decode()  # the person sees why

    assert resend_stranded() == []  # still away: nothing sent, nothing failed
    assert Operation.objects.get(pk=op.pk).state == OperationState.QUEUED

    broker.start()  # back on its port
    assert [o.pk for o in resend_stranded()] == [op.pk]
    op = wait_done(op, 90)  # the agent reconnected and ran it
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert lab["agent"].proc.poll() is None


def test_a_broker_lost_mid_task_loses_nothing_and_runs_nothing_twice(
    broker: PrivateRedis, lab: Any, operator: User
) -> None:
    host, agent = lab["host"], lab["agent"]
    op = switch_request(revision=lab["rev"]("mid-task", 2048), actor=operator)
    wait_for(lambda: Operation.objects.get(pk=op.pk).state != OperationState.QUEUED, 60, "the agent to begin")
    broker.kill()  # mid-switch: the agent's acknowledgement, at its end, finds no broker
    op = wait_done(op, 120)  # its reports go over HTTP: the switch ends all the same
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    time.sleep(3.0)  # the agent tries to acknowledge, and to reconnect, while the broker is away
    assert agent.proc.poll() is None, agent.log_tail()
    broker.start()

    # The agent lives on and takes the next operation (it reconnected by itself).
    probe = wait_done(probe_request(host=host, actor=operator), 120)
    assert probe.state == OperationState.SUCCEEDED, probe.log + probe.error

    # The switch's message, never acknowledged, comes back (as it would after the visibility
    # timeout): the agent finds its operation ended and does nothing.
    ended = Operation.objects.get(pk=op.pk)
    admin = broker.admin()
    keys = host_unacked_keys(host.queue)

    def unacked() -> dict[str, Any]:
        return {tag: json.loads(raw) for tag, raw in admin.hgetall(keys["unacked_key"]).items()}

    def others() -> list[str]:
        return [raw["headers"]["id"] for raw, _, _ in unacked().values() if raw["headers"]["id"] != str(op.pk)]

    # The probe's report reaches the panel over HTTP just before its message is acknowledged:
    # once it is, nothing but the switch's own message may be left unacknowledged.
    wait_for(lambda: not others(), 30, "only the switch's message left unacknowledged")
    left = unacked()
    mine = [(tag, raw) for tag, (raw, _, _) in left.items() if raw["headers"]["id"] == str(op.pk)]
    if not mine:  # acknowledged on the reconnected connection: send the late copy ourselves
        from controlpanel.celery import app

        app.send_task("agent.switch", kwargs={"op_id": str(op.pk)}, queue=host.queue, task_id=str(op.pk))
    for tag, raw in mine:
        admin.hdel(keys["unacked_key"], tag)
        admin.zrem(keys["unacked_index_key"], tag)
        admin.lpush(host.queue, json.dumps(raw))
    wait_for(lambda: agent.log_tail(400).count("already handled") >= 1, 60, "the late copy to be taken")
    wait_for(lambda: admin.llen(host.queue) == 0 and not admin.hlen(keys["unacked_key"]), 30, "nothing left")
    again = Operation.objects.get(pk=op.pk)
    assert (again.state, again.finished_at, again.log) == (ended.state, ended.finished_at, ended.log)
    assert Operation.objects.filter(host=host, kind="switch").count() == 1
    assert agent.proc.poll() is None


def test_a_broker_away_past_the_retries_leaves_the_message_to_redis_and_frees_the_worker(
    tmp_path: Any,
) -> None:
    """The acknowledgement's last resort (controlpanel.celery.acknowledge): the broker stays away
    past the retries; the worker's prefetch slot is freed all the same (it takes tasks again once
    the broker is back) and the message stays unacknowledged in Redis, for the visibility timeout
    to hand back."""
    from kombu import Connection

    from controlpanel.celery import acknowledge

    server = PrivateRedis(tmp_path, appendonly=True).start()
    try:
        with Connection(server.admin_url) as conn:
            conn.SimpleQueue("ack-test").put({"op_id": "x"})
            conn.default_channel.basic_qos(0, 1, False)  # one at a time, as every worker here takes them
            queue = conn.SimpleQueue("ack-test")
            message = queue.get(timeout=5)
            qos = message.channel.qos
            assert not qos.can_consume()  # the slot is held until the acknowledgement
            server.kill()
            started = time.monotonic()
            assert acknowledge(message, conn.connection_errors, retry_s=2.0) is False
            assert time.monotonic() - started < 10
            assert qos.can_consume()  # freed: the worker consumes again once reconnected
        server.start()
        admin = server.admin()
        assert admin.hlen("unacked") == 1 and admin.llen("ack-test") == 0  # Redis still holds it, unacknowledged
    finally:
        server.stop()
