"""The text of a notification: what happened, host, revision, the error line, a link."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from .choices import EventKind
from .events import Event
from .regression import regressions


@dataclass(frozen=True)
class Message:
    title: str
    body: str
    link: str


def absolute(path: str) -> str:
    base = str(getattr(settings, "CONTROLPANEL_URL", "") or "").rstrip("/")
    return f"{base}{path}" if path and base else path


def render(event: Event, *, thresholds: Mapping[str, float], when: datetime) -> Message | None:
    """The message one rule sends for the event; None when, by the rule's thresholds, a
    benchmark did not regress."""
    lines = [event.summary]
    if event.kind == EventKind.BENCHMARK_REGRESSED:
        found = regressions(list(event.comparisons), thresholds)
        if not found:
            return None
        lines += ["Worse than the rule's limits:"] + [f"- {r.line}" for r in found]
    if event.host_name:
        lines.append(f"Host: {event.host_name}")
    if event.revision:
        lines.append(f"Revision: {event.revision}")
    if event.error:
        lines.append(f"Error: {event.error}")
    lines += list(event.details)
    link = absolute(event.link_path)
    if link:
        lines.append(f"Details: {link}")
    lines.append(f"At: {when:%Y-%m-%d %H:%M:%S} UTC")
    label = EventKind(event.kind).label if event.kind in EventKind.values else event.kind
    title = f"[{event.host_name}] {label}" if event.host_name else label
    if event.revision:
        title += f" ({event.revision})"
    return Message(title=title[:250], body="\n".join(lines), link=link[:500])
