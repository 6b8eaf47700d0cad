"""A real panel worker SIGKILLed in the middle of a task: the task is neither lost nor run twice.

The decision (docs/architecture.md, "Tasks and acknowledgements"): acks_late, no redelivery on a
lost worker, a visibility timeout above the longest task, and the task's row as the truth. Here
the worker (its main process and its pool, as the OOM killer or a power cut leaves it) dies while
sending a notification to a channel that has not answered yet; a new worker starts. The broker
gives the message back only after the visibility timeout (hours): the beat's sweep over the
Delivery rows finds the send past its deadline and sends it again, once."""

from __future__ import annotations

import os
import signal
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from notifications.choices import DeliveryState, EventKind
from notifications.models import Delivery
from notifications.secrets import url_encrypt
from notifications.services import SEND_DEADLINE, channel_create, deliveries_retry
from notifications.tasks import deliver_notification
from tests.support.panel_worker import PanelWorker
from tests.support.receivers import SilentReceiver, WebhookReceiver, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]
LOOPBACK = "127.0.0.0/8"


def test_a_panel_worker_killed_mid_send_loses_nothing_and_sends_once(
    tmp_path: Any, settings: Any, admin_user: Any
) -> None:
    queue = f"acks-test-{uuid.uuid4().hex[:8]}"
    settings.NOTIFICATIONS_QUEUE = queue
    settings.NOTIFICATIONS_ALLOWED_NETWORKS = [LOOPBACK]
    env = {"CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS": LOOPBACK}
    first = PanelWorker(queue, tmp_path / "worker-1.log", extra_env=env).start()
    second = None
    try:
        with SilentReceiver() as silent, WebhookReceiver() as hook:
            url = f"json://127.0.0.1:{silent.port}/hook?rto=60&cto=5"
            channel = channel_create(name="ops", url=url, actor=admin_user)
            delivery = Delivery.objects.create(
                channel=channel, channel_name="ops", event=EventKind.SWITCH_ROLLED_BACK, title="rolled back", body="b"
            )
            deliver_notification.apply_async(kwargs={"delivery_id": str(delivery.pk)}, queue=queue,
                                             task_id=str(delivery.pk))  # fmt: skip
            wait_for(lambda: silent.accepted, 30, "the worker to reach the channel")
            assert Delivery.objects.get(pk=delivery.pk).state == DeliveryState.SENDING

            assert first.proc is not None
            os.killpg(first.proc.pid, signal.SIGKILL)  # the worker and its pool, mid-send
            first.proc.wait(10)
            channel.url_ciphertext = url_encrypt(f"json://127.0.0.1:{hook.port}/hook")  # the channel answers now
            channel.save(update_fields=["url_ciphertext"])
            second = PanelWorker(queue, tmp_path / "worker-2.log", extra_env=env).start()

            deliveries_retry()  # its deadline has not passed: the send may still be under way elsewhere
            assert Delivery.objects.get(pk=delivery.pk).state == DeliveryState.SENDING

            later = timezone.now() + SEND_DEADLINE + timedelta(seconds=1)
            deliveries_retry(now=later)  # past the deadline: its worker is dead, it is tried again
            row = Delivery.objects.get(pk=delivery.pk)
            assert row.state == DeliveryState.RETRY and "worker sending it stopped" in row.error
            deliveries_retry(now=row.retry_at)  # its retry is due: queued, the new worker sends it
            wait_for(lambda: Delivery.objects.get(pk=delivery.pk).state == DeliveryState.DELIVERED, 30, "the resend")
            assert len(hook.received) == 1
            assert hook.received[0]["json"]["title"] == "rolled back"
            assert Delivery.objects.get(pk=delivery.pk).attempts == 2

            deliveries_retry(now=later + timedelta(hours=1))  # nothing left to recover: no second send
            deliver_notification.apply_async(kwargs={"delivery_id": str(delivery.pk)}, queue=queue,
                                             task_id=str(delivery.pk))  # fmt: skip
            wait_for(lambda: f"[{delivery.pk}] succeeded" in second.log_tail(200), 30, "the late message")
            assert len(hook.received) == 1  # the killed worker's message, redelivered late, does nothing
    finally:
        first.stop()
        if second is not None:
            second.stop()
