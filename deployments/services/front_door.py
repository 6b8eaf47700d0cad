"""The front door's document for one host (what `GET /agent/v1/serving` answers) and its report.

The document is the host's serving set as a routing table (hostagent.frontdoor.table), each
model with its revision's launch (deployments.agent_api.orders.revision_launch, the engine's
API key resolved: it goes to its own host only), the inference keys' digests and the door's
bounds. Its `version` is a digest of the rest, so an agent asks again cheaply (ETag, 304).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.secrets_mask import mask_text
from deployments.models import FrontDoor, ModelAlias
from deployments.runtime_bridge import runs_on_this_machine
from hardware.models import Host
from serving.binds import FRONT_DOOR_DEFAULT_BIND, is_loopback, split_bind
from serving.engines.registry import get_adapter
from serving.exports import base_url_for

from .inference_keys import key_table
from .planning import planned_or_refused
from .serving_set import door_set
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


def front_door_document(host: Host) -> dict[str, Any]:
    """What the host's front door serves now, with its `version`."""
    from deployments.agent_api.orders import revision_launch
    from deployments.revision_views import effective_served_name

    aliases: dict[int, list[str]] = {}
    for alias in ModelAlias.objects.filter(host=host).order_by("name"):
        aliases.setdefault(alias.revision_id, []).append(alias.name)
    models = []
    for served in door_set(host)[0]:
        revision = served.revision
        launch = revision_launch(revision)
        memory, refused = planned_or_refused(revision)
        if refused and not launch.get("error"):
            # A revision the planner cannot read is one a switch refuses: the door refuses to load
            # it too, saying why, instead of loading it as if it took no memory.
            launch = {**launch, "error": refused}
        config = launch.get("config") or {}
        entry: dict[str, Any] = {}
        threads = _engine_threads(host, revision.engine, config.get("knobs") or {}) if host.cpu_only else None
        if threads is not None:
            entry["threads"] = threads
        models.append(
            {
                "name": served.name,
                "aliases": aliases.get(revision.pk, []),
                "upstream": f"http://127.0.0.1:{revision.port}",
                "upstream_model": effective_served_name(revision),
                "api_key": config.get("api_key") or None,
                "mode": str(served.mode),
                "idle_ttl_s": float(served.idle_ttl_s) if served.idle_ttl_s else None,
                "memory": memory,
                "revision": revision.number,
                "launch": launch,
                **entry,
            }
        )
    door = door_of(host)
    document: dict[str, Any] = {
        "door": {
            "max_waiting": door.max_waiting,
            "max_wait_s": float(door.max_wait_s),
            "drain_timeout_s": float(door.drain_timeout_s),
        },
        "models": models,
        "keys": key_table(),
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return {"version": hashlib.sha256(encoded.encode()).hexdigest()[:32], **document}


def _engine_threads(host: Host, engine: str, knobs: dict[str, Any]) -> int | None:
    """The CPU threads a revision's engine computes with on CPU-only `host`, which the door counts
    as cores of its room (hostagent/frontdoor/scheduler.py): the engine's threads knob as it is
    launched, else its default. llama.cpp's default is every physical core; counted here as all of
    the host's cores (`cpu_cores`, logical, the most the door's room holds): an engine left at its
    default takes the whole host, so two such engines are never loaded side by side sharing cores.
    None (not counted) for an engine whose threads the panel does not read, or a host that has
    not reported its cores."""
    knob = get_adapter(engine).threads_knob
    if not knob:
        return None
    threads = knobs.get(knob)
    if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
        return threads
    return host.cpu_cores or None


@transaction.atomic
def front_door_report(
    *,
    host: Host,
    version: str,
    bind: str,
    state: list[dict[str, Any]],
    usage: list[dict[str, Any]],
    refused: dict[str, str] | None = None,
) -> None:
    """Keep the front door's last state (checked by the agent API) and its usage totals, and the
    table it refused (`refused`: version and reason; None when it serves the panel's): audited
    when a new one is refused, shown on the host page until the door serves the panel's table.
    ValidationError, with nothing kept, when the usage names a key or model the host may not
    book to (usage.usage_record)."""
    usage_record(host=host, rows=usage)  # first: it refuses before anything is kept
    door = FrontDoor.objects.select_for_update().filter(host=host).first() or FrontDoor(host=host)
    door.reported_version, door.bind, door.state = version, bind, state
    door.card = door_card(state)
    door.reported_at = timezone.now()
    _refusal_keep(host, door, refused)
    door.save()


def _refusal_keep(host: Host, door: FrontDoor, refused: dict[str, str] | None) -> None:
    if not refused:
        door.refused_version, door.refused_reason, door.refused_at = "", "", None
        return
    reason = mask_text(refused.get("reason") or "")[:500] or "no reason given"
    if (refused.get("version") or "", reason) == (door.refused_version, door.refused_reason):
        return  # the same refusal, reported again
    door.refused_version, door.refused_reason = refused.get("version") or "", reason
    door.refused_at = door.reported_at
    audit_record(
        action="door.table_refused",
        summary=f"{host.name}'s front door refused its serving table and keeps the previous one: {reason}",
        host=host,
        data={"version": door.refused_version, "reason": reason, "served_version": door.reported_version},
        actor=None,
    )


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
        planned, refused = planned_or_refused(served.revision)
        rows.append(
            {
                "served": served,
                "name": served.name,
                "phase": seen.get("phase") or ("not reported" if door and door.reported_at else "–"),
                "in_flight": seen.get("in_flight"),
                "waiting": seen.get("waiting"),
                "idle_s": seen.get("idle_s") if seen.get("phase") == "loaded" and not seen.get("in_flight") else None,
                "planned": sum(planned.values()) or None,
                "planner_refused": refused,
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
