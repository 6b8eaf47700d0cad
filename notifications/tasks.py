"""Notifications on the panel's own queue (NOTIFICATIONS_QUEUE, the panel's `default`)."""

from __future__ import annotations

from celery import shared_task

from .services import deliveries_prune, deliveries_retry, delivery_send, hosts_presence_check


@shared_task(ignore_result=True, acks_late=True, soft_time_limit=120, time_limit=150)
def deliver_notification(delivery_id: str) -> str:
    """Send one recorded notification through its channel."""
    return str(delivery_send(delivery_id=delivery_id))


@shared_task(ignore_result=True)
def check_host_presence() -> int:
    """Beat: notice hosts going offline and coming back."""
    return len(hosts_presence_check())


@shared_task(ignore_result=True)
def retry_notifications() -> int:
    """Beat: send again the deliveries whose retry is due."""
    return deliveries_retry()


@shared_task(ignore_result=True)
def prune_notifications() -> int:
    """Beat: forget deliveries older than NOTIFICATIONS_KEPT_DAYS."""
    return deliveries_prune()
