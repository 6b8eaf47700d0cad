"""The front door's document for one host (what `GET /agent/v1/serving` answers) and its report.

The document (serving.wire.DoorDocument, made by deployments.host_serving) is the host's serving
set, each model with its revision's launch (the engine's API key resolved: it goes to its own host
only), the inference keys' digests and the door's bounds. Its `version` is a digest of the rest,
so an agent asks again cheaply (ETag, 304), and the planner is not run again for a set that did
not change (deployments.planning.revision_plan).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.secrets_mask import mask_text
from deployments.host_serving import door_set, host_serving, revision_memory
from deployments.models import FrontDoor, ModelAlias, active_revision_of
from deployments.runtime_bridge import runs_on_this_machine
from hardware.models import Host, HostEvent
from hardware.services import host_event_record
from notifications.events import host_event
from notifications.services import notify
from serving.agent_reports import TableRefusal, UsageTotal
from serving.binds import FRONT_DOOR_DEFAULT_BIND, is_loopback, split_bind
from serving.exports import base_url_for
from serving.wire import DoorDocument

from .usage import usage_record

STATE_ROWS = 256  # models a report's state may list


def door_of(host: Host) -> FrontDoor:
    door = FrontDoor.objects.filter(host=host).first()
    return door if door is not None else FrontDoor(host=host)


def door_base_url(host: Host, door: FrontDoor) -> tuple[str, str]:
    """Where other machines reach the host's front door: its `/v1` URL at the host's address and
    the port of the door's last report (`bind`; CONTROLPANEL_FRONT_DOOR_BIND's default port when
    it has none), and "" with why not when the door listens on loopback on another machine."""
    try:
        bind_host, port = split_bind(door.bind)
    except ValueError:
        bind_host, port = "", split_bind(FRONT_DOOR_DEFAULT_BIND)[1]
    if is_loopback(bind_host) and not runs_on_this_machine(host):
        return "", (
            f"{host.name}'s front door listens on {door.bind}, which other machines cannot reach "
            f"(set CONTROLPANEL_FRONT_DOOR_BIND=0.0.0.0:{port} on {host.name})"
        )
    return base_url_for(host.address or "127.0.0.1", port), ""


def front_door_document(host: Host) -> DoorDocument:
    """What the host's front door serves now, with its `version` (deployments.host_serving)."""
    return host_serving(host, host_bound=True).document()


@transaction.atomic
def front_door_report(
    *,
    host: Host,
    version: str,
    bind: str,
    state: list[dict[str, Any]],
    usage: Sequence[UsageTotal],
    refused: TableRefusal | None = None,
) -> None:
    """Keep the front door's last state (checked by the agent API) and its usage totals, and the
    table it refused (`refused`: version and reason; None when it serves the panel's): a host
    event (door.table_refused) when a new one is refused, shown on the host page until the door
    serves the panel's table. ValidationError, with nothing kept, when the usage names a key or model the host may not
    book to (usage.usage_record)."""
    usage_record(host=host, rows=usage)  # first: it refuses before anything is kept
    door = FrontDoor.objects.select_for_update().filter(host=host).first() or FrontDoor(host=host)
    door.reported_version, door.bind, door.state = version, bind, state
    door.card = door_card(state)
    door.reported_at = timezone.now()
    _refusal_keep(host, door, refused)
    door.save()


def _refusal_keep(host: Host, door: FrontDoor, refused: TableRefusal | None) -> None:
    if not refused:
        door.refused_version, door.refused_reason, door.refused_at = "", "", None
        return
    reason = mask_text(refused.reason)[:500] or "no reason given"
    if (refused.version, reason) == (door.refused_version, door.refused_reason):
        return  # the same refusal, reported again
    door.refused_version, door.refused_reason = refused.version, reason
    door.refused_at = door.reported_at
    serving = active_revision_of(host)
    row = host_event_record(
        host=host,
        kind=HostEvent.Kind.TABLE_REFUSED,
        summary=f"{host.name}'s front door refused its serving table {door.refused_version or '(no version)'} "
        f"and keeps serving {door.reported_version or 'its previous one'}.",
        reason=reason,
        revision=f"r{serving.number}" if serving else "",
    )
    notify(host_event(row))


def door_card(state: list[dict[str, Any]]) -> dict[str, Any]:
    """The loaded set in a line, from a report's state rows: how many models are loaded (and of
    those idle: nothing in flight), loading (or draining / unloading), requests waiting, the
    planned bytes of what is loaded or loading, and each alias with the model it routes to."""
    rows = [row for row in state if isinstance(row, dict)]
    loaded = [row for row in rows if row.get("phase") == "loaded"]
    busy = [row for row in rows if row.get("phase") in ("loading", "draining", "unloading")]

    def planned(row: dict[str, Any]) -> int:
        memory = row.get("memory")
        return sum(v for v in memory.values() if isinstance(v, int)) if isinstance(memory, dict) else 0

    return {
        "loaded": len(loaded),
        "idle": sum(1 for row in loaded if not row.get("in_flight")),
        "loading": len(busy),
        "waiting": sum(int(row.get("waiting") or 0) for row in rows if isinstance(row.get("waiting"), int)),
        "planned": sum(planned(row) for row in loaded + busy),
        "aliases": sorted(
            [str(alias), str(row.get("name"))]
            for row in rows
            if not row.get("removed")
            for alias in (row.get("aliases") if isinstance(row.get("aliases"), list) else [])
        ),
    }


def front_door_live(host: Host) -> dict[str, Any]:
    """The host page's front-door section: each served revision with the last report's facts."""
    door = FrontDoor.objects.filter(host=host).first()
    reported = {row.get("name"): row for row in (door.state if door else []) if isinstance(row, dict)}
    kept, left = door_set(host)
    left_out = {item.served.revision.pk: item.reason for item in left}
    rows = []
    for served in sorted(kept + [item.served for item in left], key=lambda s: (not s.active, s.revision.number)):
        seen = reported.pop(served.name, None) or {}
        memory = revision_memory(served.revision)
        rows.append(
            {
                "served": served,
                "name": served.name,
                "phase": seen.get("phase") or ("not reported" if door and door.reported_at else "–"),
                "in_flight": seen.get("in_flight"),
                "waiting": seen.get("waiting"),
                "idle_s": seen.get("idle_s") if seen.get("phase") == "loaded" and not seen.get("in_flight") else None,
                "planned": sum(memory.devices.values()) or None,
                "planner_refused": memory.refused,
                "measured": sum(v for v in (seen.get("measured") or {}).values() if isinstance(v, int)) or None,
                "left_out": left_out.get(served.revision.pk, ""),
            }
        )
    leaving = [row for row in reported.values() if row.get("phase") != "unloaded"]
    return {
        "door": door,
        "rows": rows,
        "leaving": leaving,
        "aliases": list(ModelAlias.objects.filter(host=host).select_related("revision").order_by("name")),
        "waiting": sum(r["waiting"] or 0 for r in rows) + sum(int(r.get("waiting") or 0) for r in leaving),
    }
