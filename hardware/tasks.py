from __future__ import annotations

from celery import shared_task

from .services import telemetry_rollup


@shared_task(ignore_result=True)
def rollup_telemetry() -> dict[str, int]:
    """Beat, on the panel's queue: apply the telemetry retention policy."""
    return telemetry_rollup()
