"""A host's events from the real things, end to end: the real agent (its Celery worker, real
Redis) against the panel as a real HTTP server, a real llama-server with the real Gemma 3 270M
model, and the panel's real Celery worker sending to a real local webhook.

An engine SIGKILLed is restarted by the agent's watchdog; an agent SIGKILLed and started again
says its previous run did not end cleanly (a clean stop says nothing); an agent whose front door
cannot listen says the door is down, with why. Each is on the host's events page, newest first,
and a rule that watches it sends it."""

from __future__ import annotations

import html
import os
import signal
import socket
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from deployments.choices import OperationState
from deployments.services.switch import switch_request
from hardware.models import HostEvent
from hardware.services import host_event_record
from hostagent.local import supervisor_for
from hostagent.runtime.processes import is_alive
from notifications.choices import EventKind
from notifications.services import channel_create, rule_create
from tests.support.operations import wait_done
from tests.support.panel_worker import PanelWorker
from tests.support.receivers import WebhookReceiver, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]
LOOPBACK = "127.0.0.0/8"
PANEL = "https://panel.lab.example"
WATCHDOG_EVERY_S = {"CONTROLPANEL_WATCHDOG_INTERVAL_S": "1"}

# A port some other program listens on before the agent starts: its front door cannot have it.
_TAKEN = socket.socket()
_TAKEN.bind(("127.0.0.1", 0))
_TAKEN.listen()
TAKEN_PORT = _TAKEN.getsockname()[1]


@pytest.fixture(scope="module")
def worker(django_db_setup: Any, tmp_path_factory: Any) -> Any:
    queue = f"events-test-{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {"CONTROLPANEL_URL": PANEL, "CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS": LOOPBACK}
    panel_worker = PanelWorker(queue, log, extra_env=env).start()
    yield panel_worker
    panel_worker.stop()


@pytest.fixture
def hook(settings: Any, worker: PanelWorker, admin_user: User) -> Any:
    """A webhook and a channel to it; the test adds the rules."""
    settings.NOTIFICATIONS_QUEUE = worker.queue
    settings.CONTROLPANEL_URL = PANEL
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = [LOOPBACK]
    with WebhookReceiver() as receiver:
        url = f"json://127.0.0.1:{receiver.port}/"
        yield receiver, channel_create(name=f"ops-{uuid.uuid4().hex[:6]}", url=url, actor=admin_user)


def _events(host: Any, kind: str) -> list[HostEvent]:
    return list(HostEvent.objects.filter(host=host, kind=kind))


def _page(user: User, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    return html.unescape(response.content.decode())


@pytest.mark.engine
@pytest.mark.parametrize("lab", [WATCHDOG_EVERY_S], indirect=True)
def test_a_crashed_engine_restarted_by_the_watchdog_is_a_host_event_a_rule_sends(lab, hook, operator, admin_user):
    host, (hook, channel) = lab["host"], hook
    rule_create(channel=channel, host=host, events=[EventKind.WATCHDOG_RESTARTED], actor=admin_user)
    revision = lab["rev"]("gemma at 2k", 2048)
    assert wait_done(switch_request(revision=revision, actor=operator)).state == OperationState.SUCCEEDED
    os.killpg(supervisor_for(host.name).status().pgid, signal.SIGKILL)  # the engine crashes
    [restarted] = wait_for(lambda: _events(host, "watchdog.restarted"), 90, "the watchdog's restart")
    assert restarted.revision == "r1" and restarted.summary == f"The watchdog restarted the engine on {host.name}."
    page = _page(operator, f"/hosts/{host.name}/events/?kind=watchdog.restarted")
    assert restarted.summary in page and restarted.reason[:40] in page
    wait_for(lambda: hook.received, 30, "the watchdog's message")
    [message] = [r["json"] for r in hook.received]
    assert message["title"] == f"[{host.name}] Watchdog restarted the engine (r1)" and message["type"] == "warning"


def test_a_killed_agent_started_again_is_a_host_event_a_clean_stop_is_not(lab, hook, operator, admin_user) -> None:
    host, (hook, channel) = lab["host"], hook
    rule_create(channel=channel, host=host, events=[EventKind.AGENT_RESTARTED], actor=admin_user)
    host_event_record(host=host, kind=HostEvent.Kind.DOOR_UP, summary="an older event")
    # A clean stop and start: nothing to report.
    lab["agent"].stop()
    lab["agent"] = lab["agent"].sibling(lab["tmp"] / "agent-2.log").start()
    lab["agent"].wait_registered()  # after its registration and what it had to report
    assert _events(host, "agent.restarted") == []
    # The agent is killed (the OOM killer, kill -9) and started again: its previous run did not end cleanly.
    killed_pid = lab["agent"].proc.pid
    lab["agent"].kill()
    assert not is_alive(killed_pid)
    lab["agent"] = lab["agent"].sibling(lab["tmp"] / "agent-3.log").start()
    lab["agent"].wait_registered()
    [again] = wait_for(lambda: _events(host, "agent.restarted"), 30, "the agent's restart event")
    assert f"pid {killed_pid}" in again.reason and "it was killed or it crashed" in again.reason
    assert again.summary == f"{host.name}'s agent started again after its previous run was killed or crashed."

    # The events page, newest first, and filtered by kind; the host page's last few link to it.
    page = _page(operator, f"/hosts/{host.name}/events/")
    assert page.index(again.summary) < page.index("an older event")
    assert f"pid {killed_pid}" in page
    only = _page(operator, f"/hosts/{host.name}/events/?kind=agent.restarted")
    assert again.summary in only and "an older event" not in only
    host_page = _page(operator, f"/hosts/{host.name}/")
    assert again.summary in host_page and f"/hosts/{host.name}/events/" in host_page

    # The rule sent it, with its reason and a link to the events page.
    wait_for(lambda: hook.received, 30, "the agent's message")
    [message] = [r["json"] for r in hook.received]
    assert message["title"] == f"[{host.name}] Agent restarted after it was killed or crashed"
    assert f"pid {killed_pid}" in message["message"] and f"{PANEL}/hosts/{host.name}/events/" in message["message"]


@pytest.mark.parametrize("lab", [{"CONTROLPANEL_FRONT_DOOR_BIND": f"127.0.0.1:{TAKEN_PORT}"}], indirect=True)
def test_a_front_door_that_cannot_listen_is_down_with_why(lab, hook, operator, admin_user) -> None:
    host, (hook, channel) = lab["host"], hook
    [first] = wait_for(lambda: _events(host, "door.down"), 30, "the door-down event")  # at the agent's start
    rule_create(channel=channel, host=None, events=[EventKind.DOOR_DOWN], actor=admin_user)
    lab["agent"].stop()  # started again (the port still taken): down again, and now a rule watches it
    lab["agent"] = lab["agent"].sibling(lab["tmp"] / "agent-2.log").start()
    lab["agent"].wait_registered()
    down = wait_for(lambda: _events(host, "door.down")[1:] and _events(host, "door.down")[0], 30, "a second one")
    assert f"cannot listen on 127.0.0.1:{TAKEN_PORT}" in down.reason and "in use" in down.reason
    assert (
        down.reason == first.reason
        and down.summary == f"{host.name}'s front door is down: clients of its endpoint get no answer."
    )
    page = _page(operator, f"/hosts/{host.name}/events/?kind=door.down")
    assert down.summary in page and f"127.0.0.1:{TAKEN_PORT}" in page
    wait_for(lambda: hook.received, 30, "the door-down message")
    [message] = [r["json"] for r in hook.received]
    assert message["title"] == f"[{host.name}] Front door down" and message["type"] == "failure"
    assert "in use" in message["message"]
