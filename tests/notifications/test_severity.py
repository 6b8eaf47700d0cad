"""What a notification says about how bad it is: a switch the host refused before it stopped
anything is its own event ("Switch refused: r2 still serving"), not "Switch failed"; and the JSON
webhook's "type" follows the event's severity (Apprise's notify_type), where it was always "info".
Real sends through Apprise to a local JSON webhook; the worker's part is `delivery_send`."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.presenters import operation_outcome
from notifications.choices import DeliveryState, EventKind
from notifications.events import operation_event, presence_event
from notifications.services import channel_create, delivery_send, notifications_dispatch, rule_create
from tests.hardware.factories import HostFactory
from tests.support.receivers import WebhookReceiver

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = {"revision": 3, "reason": "port 8080 is held by another program", "refused": True, "rolled_back": False}


class _Op:
    """A switch as the agent API leaves it at its end (hostagent/operations/switch.py's shapes)."""

    pk = "00000000-0000-0000-0000-00000000000f"
    kind = "switch"

    def __init__(self, host: Any, state: str, result: dict[str, Any], error: str) -> None:
        self.host, self.state, self.result, self.error = host, state, result, error
        self.params = {"revision": 3, "previous": 2}

    def get_state_display(self) -> str:
        return self.state.capitalize()


@pytest.fixture
def hook(settings: Any) -> Any:
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with WebhookReceiver() as receiver:
        yield receiver


def _sent(admin_user: Any, hook: Any, event: Any, kinds: list[str]) -> dict[str, Any]:
    channel = channel_create(name=f"ops-{len(hook.received)}", url=f"json://127.0.0.1:{hook.port}/h", actor=admin_user)
    rule_create(channel=channel, host=None, events=kinds, actor=admin_user)
    [delivery] = notifications_dispatch(event=event)
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.DELIVERED
    return hook.received[-1]["json"]


def test_a_refused_switch_says_the_old_revision_still_serves_as_a_warning(admin_user, hook):
    host = HostFactory(name="gpu-box-1")
    op = _Op(host, "failed", REFUSED, "r3 was refused on the host before anything was stopped: port 8080 ...")
    event = operation_event(op)
    assert event is not None and event.kind == EventKind.SWITCH_REFUSED
    got = _sent(admin_user, hook, event, [EventKind.SWITCH_REFUSED])
    assert got["type"] == "warning"
    assert got["title"] == "[gpu-box-1] Switch refused (the old revision kept serving) (r3)"
    assert got["message"].splitlines()[0] == (
        "Switch refused: r2 still serving (gpu-box-1 refused r3 before anything was stopped)."
    )
    assert "failed" not in got["title"].lower()
    # The operation's own page says the same.
    outcome = operation_outcome(op)  # type: ignore[arg-type]
    assert outcome.label == "Refused, r2 still serving" and "r2 is still serving" in outcome.note


def test_the_webhook_type_follows_the_events_severity(admin_user, hook):
    host = HostFactory(name="gpu-box-1")
    failed = operation_event(_Op(host, "failed", {"revision": 3, "rolled_back": False}, "did not come up"))
    assert failed is not None and failed.kind == EventKind.SWITCH_FAILED
    assert _sent(admin_user, hook, failed, [EventKind.SWITCH_FAILED])["type"] == "failure"
    assert _sent(admin_user, hook, presence_event(host, online=False), [EventKind.HOST_OFFLINE])["type"] == "failure"
    assert _sent(admin_user, hook, presence_event(host, online=True), [EventKind.HOST_ONLINE])["type"] == "success"
