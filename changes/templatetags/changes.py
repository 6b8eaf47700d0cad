"""Template tags other apps' pages use to show a protected host (no import of this app from theirs)."""

from __future__ import annotations

from typing import Any

from django import template

from changes.selectors import pending_for_host, timed_pending
from changes.services import host_requires_review
from hardware.models import Host

register = template.Library()


@register.simple_tag
def review_required(host: Host) -> bool:
    """Whether a person's change to `host` opens a change request (the buttons say "Request review")."""
    return isinstance(host, Host) and host_requires_review(host)


@register.inclusion_tag("changes/_awaiting_review.html")
def awaiting_review(host: Host | None = None) -> dict[str, Any]:
    """The schedule list's changes with a time that wait for a review (not scheduled until approved)."""
    return {"timed": timed_pending(host=host if isinstance(host, Host) else None)}


@register.inclusion_tag("changes/_host_review.html", takes_context=True)
def host_review_card(context: dict[str, Any], host: Host) -> dict[str, Any]:
    return {
        "host": host,
        "required": host_requires_review(host),
        "pending": pending_for_host(host),
        "is_admin": context.get("is_admin", False),
        "csrf_token": context.get("csrf_token"),
    }
