"""Reads for the notifications page."""

from __future__ import annotations

from django.db.models import QuerySet

from .models import Channel, Delivery, Rule

RECENT = 50


def channel_list() -> QuerySet[Channel]:
    return Channel.objects.order_by("name")


def rule_list() -> QuerySet[Rule]:
    return Rule.objects.select_related("channel", "host").order_by("channel__name", "created_at")


def delivery_list(*, limit: int = RECENT) -> list[Delivery]:
    return list(Delivery.objects.order_by("-created_at")[:limit])
