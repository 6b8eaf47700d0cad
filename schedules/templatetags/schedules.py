"""Scheduling on other apps' pages: a host's window and upcoming changes (the host page), and the
"when" choice of a change (the switch confirmation, the alias form)."""

from __future__ import annotations

from typing import Any

from django import template

from hardware.models import Host
from schedules import selectors, services
from schedules.forms import WhenForm
from schedules.kinds import describe

register = template.Library()


@register.inclusion_tag("schedules/_host_schedule.html", takes_context=True)
def host_schedule(context: template.Context, host: Host) -> dict[str, Any]:
    return {
        "host": host,
        "window": services.window_of(host),
        "next": services.next_window(host),
        "days": selectors.upcoming_by_day(host=host),
        "can_operate": context.get("can_operate"),
    }


@register.inclusion_tag("schedules/_when.html")
def when_fields(host: Host, when: WhenForm | None = None, now: bool = False) -> dict[str, Any]:
    """The `when` choice and the `at` field (`now`: offer "now" too, checked unless the form says
    otherwise), with the host's next maintenance window in words."""
    return {"host": host, "when": when, "next": services.next_window(host), "offer_now": now}


@register.filter
def change_summary(change: Any) -> str:
    """A scheduled change in words ("switch to r5")."""
    return describe(getattr(change, "kind", ""), getattr(change, "params", None))
