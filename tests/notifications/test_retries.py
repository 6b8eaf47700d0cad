"""A delivery the channel refuses is sent again after each wait of NOTIFICATIONS_RETRY_S, then
given up; a test message is not; old deliveries are pruned. Real sends to a local JSON webhook
(tests.support.receivers) through Apprise; the worker's part is `delivery_send`, which the task
only calls."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from notifications.choices import DeliveryState
from notifications.events import presence_event
from notifications.models import Delivery
from notifications.services import (
    PENDING_RESEND_AFTER,
    SEND_DEADLINE,
    channel_create,
    channel_test_send,
    deliveries_prune,
    deliveries_retry,
    delivery_send,
    notifications_dispatch,
    rule_create,
)
from tests.hardware.factories import HostFactory
from tests.support.receivers import WebhookReceiver

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def hook(settings: Any) -> Any:
    settings.NOTIFICATIONS_RETRY_S = [60, 300]
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the receiver is on loopback, as a lab's may be
    with WebhookReceiver(status=500) as receiver:
        yield receiver


def _offline_delivery(admin_user: Any, port: int) -> Delivery:
    channel = channel_create(name="ops", url=f"json://127.0.0.1:{port}/hook", actor=admin_user)
    host = HostFactory(name="gpu-box-1")
    rule_create(channel=channel, host=None, events=["host.offline"], actor=admin_user)
    [delivery] = notifications_dispatch(event=presence_event(host, online=False, reason="gone"))
    return delivery


def test_a_refused_delivery_is_sent_again_after_each_wait_until_it_gets_through(admin_user: Any, hook: Any) -> None:
    delivery = _offline_delivery(admin_user, hook.port)
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.RETRY
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.RETRY and delivery.attempts == 1 and "error=500" in delivery.error
    first = delivery.retry_at
    assert first is not None and 55 <= (first - timezone.now()).total_seconds() <= 60

    assert deliveries_retry(now=first - timedelta(seconds=1)) == 0  # not due yet
    assert deliveries_retry(now=first) == 1 and deliveries_retry(now=first) == 0  # taken once
    assert Delivery.objects.get(pk=delivery.pk).state == DeliveryState.PENDING
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.RETRY
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.retry_at is not None
    assert 295 <= (delivery.retry_at - timezone.now()).total_seconds() <= 300  # the next, longer wait

    hook.status = 200  # the receiver is back
    assert deliveries_retry(now=delivery.retry_at) == 1
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.DELIVERED
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.error, delivery.retry_at) == ("delivered", 3, "", None)
    assert len(hook.received) == 3 and all("gpu-box-1" in r["json"]["title"] for r in hook.received)


def test_after_the_last_wait_it_stays_failed_and_the_page_says_how_often(admin_user: Any, hook: Any) -> None:
    delivery = _offline_delivery(admin_user, hook.port)
    client = Client()
    client.force_login(admin_user)
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.RETRY
    page = client.get("/notifications/").content.decode()
    assert "failed, will retry" in page and "try 2 at" in page
    for _ in range(2):
        deliveries_retry(now=timezone.now() + timedelta(hours=1))
        result = delivery_send(delivery_id=delivery.pk)
    assert result == DeliveryState.FAILED and len(hook.received) == 3
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.retry_at is None and "error=500" in delivery.error
    assert deliveries_retry(now=timezone.now() + timedelta(days=1)) == 0
    assert "after 3 tries" in client.get("/notifications/").content.decode()


def test_a_test_message_is_not_sent_again_by_itself(admin_user: Any, hook: Any) -> None:
    channel = channel_create(name="ops", url=f"json://127.0.0.1:{hook.port}/hook", actor=admin_user)
    delivery = channel_test_send(channel=channel, actor=admin_user)
    delivery_send(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED and delivery.retry_at is None
    assert deliveries_retry(now=timezone.now() + timedelta(days=1)) == 0 and len(hook.received) == 1


def test_old_deliveries_are_pruned_but_not_those_still_to_be_sent(admin_user: Any, hook: Any, settings: Any) -> None:
    settings.NOTIFICATIONS_KEPT_DAYS = 30
    delivery = _offline_delivery(admin_user, hook.port)
    old = timezone.now() - timedelta(days=31)
    rows = {}
    for state in (DeliveryState.DELIVERED, DeliveryState.FAILED, DeliveryState.RETRY, DeliveryState.PENDING):
        copy = Delivery.objects.get(pk=delivery.pk)
        copy.pk, copy.state, copy.created_at = None, state, old
        copy.save(force_insert=True)
        rows[state] = copy.pk
    assert deliveries_prune() == 2
    left = set(Delivery.objects.values_list("pk", flat=True))
    assert left == {delivery.pk, rows[DeliveryState.RETRY], rows[DeliveryState.PENDING]}


def test_a_channel_disabled_meanwhile_gets_no_retry(admin_user: Any, hook: Any) -> None:
    from notifications.services import channel_update

    delivery = _offline_delivery(admin_user, hook.port)
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.RETRY
    channel_update(channel=delivery.channel, name="ops", enabled=False, actor=admin_user)
    assert deliveries_retry(now=timezone.now() + timedelta(hours=1)) == 1
    assert delivery_send(delivery_id=delivery.pk) == DeliveryState.FAILED
    delivery.refresh_from_db()
    assert "disabled before the message was sent again" in delivery.error and len(hook.received) == 1


def test_a_send_whose_worker_died_is_retried_and_a_pending_one_whose_message_was_lost_is_queued_again(
    admin_user: Any, hook: Any
) -> None:
    """The row is the truth, not the broker's message (docs/architecture.md): a `sending` row past
    its deadline lost its worker; a `pending` one ten minutes old lost its message. The real panel
    worker SIGKILLed mid-send: tests/test_worker_killed_mid_task.py."""
    hook.status = 200
    delivery = _offline_delivery(admin_user, hook.port)
    Delivery.objects.filter(pk=delivery.pk).update(state=DeliveryState.SENDING, attempts=1,
                                                   retry_at=timezone.now() + SEND_DEADLINE)  # fmt: skip
    deliveries_retry()
    assert Delivery.objects.get(pk=delivery.pk).state == DeliveryState.SENDING  # its worker may still be at it
    deliveries_retry(now=timezone.now() + SEND_DEADLINE + timedelta(seconds=1))
    row = Delivery.objects.get(pk=delivery.pk)
    assert row.state == DeliveryState.RETRY and "worker sending it stopped" in row.error

    lost = Delivery.objects.get(pk=delivery.pk)  # another one, queued; say the broker lost its message
    lost.pk, lost.state, lost.attempts, lost.retry_at, lost.error = None, DeliveryState.PENDING, 0, None, ""
    lost.save(force_insert=True)
    later = timezone.now() + PENDING_RESEND_AFTER + timedelta(seconds=1)
    deliveries_retry(now=later - timedelta(minutes=5))
    assert Delivery.objects.get(pk=lost.pk).retry_at is None  # not yet: it may still be in a long queue
    deliveries_retry(now=later)
    assert Delivery.objects.get(pk=lost.pk).retry_at == later + PENDING_RESEND_AFTER  # queued again, next look then
    assert delivery_send(delivery_id=lost.pk) == DeliveryState.DELIVERED
    assert delivery_send(delivery_id=lost.pk) == "skipped"  # the first message, if it shows up: nothing twice
    assert len(hook.received) == 1
