"""Notifications on the panel's own queue (NOTIFICATIONS_QUEUE, the panel's `default`)."""

from __future__ import annotations

from celery import shared_task


@shared_task(ignore_result=True, acks_late=True, soft_time_limit=120, time_limit=150)
def deliver_notification(delivery_id: str) -> str:
    """Send one recorded notification through its channel."""
    from .services import delivery_send

    return str(delivery_send(delivery_id=delivery_id))


@shared_task(ignore_result=True)
def check_host_presence() -> int:
    """Beat: notice hosts going offline and coming back."""
    from .services import hosts_presence_check

    return len(hosts_presence_check())
