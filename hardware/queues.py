"""Celery queue names: one queue per GPU host; control-plane work goes to `default`."""

from __future__ import annotations

from django.utils.text import slugify

DEFAULT_QUEUE = "default"


def host_queue_name(host_name: str) -> str:
    return f"host.{slugify(host_name)}"
