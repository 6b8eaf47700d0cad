"""The front door: a host's serving set and aliases, the inference keys (admins), usage."""

from __future__ import annotations

from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest
from ninja import Router, Status

from api.schemas import AliasIn, AliasList, Error, KeyCreated, KeyIn, KeyList, KeyOut, ServeIn, ServingList, UsageList
from controlpanel.roles import ADMIN, OPERATOR, VIEWER
from deployments.host_serving import revision_memory, served_set
from deployments.models import FrontDoor, InferenceKey
from deployments.services.aliases import alias_delete, alias_list, alias_set
from deployments.services.inference_keys import key_create, key_revoke
from deployments.services.serving_set import serving_mode_set
from deployments.services.usage import usage_totals
from hardware.models import Host

from . import actor, host_for, revision_or_404

hosts = Router(tags=["front door"])
keys = Router(tags=["front door"])
usage = Router(tags=["front door"])


def _serving(host: Host) -> dict[str, Any]:
    door = FrontDoor.objects.filter(host=host).first()
    reported = {r.get("name"): r for r in (door.state if door else []) if isinstance(r, dict)}
    aliases: dict[int, list[str]] = {}
    for alias in alias_list(host):
        aliases.setdefault(alias.revision.number, []).append(alias.name)
    items = []
    for s in served_set(host):
        seen = reported.get(s.name, {})
        memory = revision_memory(s.revision)
        items.append(
            {
                "revision": s.revision.number,
                "name": s.name,
                "mode": str(s.mode),
                "idle_ttl_s": s.idle_ttl_s,
                "active": s.active,
                "aliases": aliases.get(s.revision.number, []),
                "phase": seen.get("phase"),
                "in_flight": seen.get("in_flight"),
                "waiting": seen.get("waiting"),
                "memory_planned": dict(memory.devices),
                "planner_refused": memory.refused,
            }
        )
    return {"items": items, "count": len(items), "reported_at": door.reported_at if door else None}


@hosts.get("{name}/serving/", response={200: ServingList, 404: Error}, summary="What the host's front door serves")
def serving_get(request: HttpRequest, name: str) -> dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    return _serving(host)


@hosts.put(
    "{name}/serving/{number}/",
    response={200: ServingList, 400: Error, 403: Error, 404: Error},
    summary="Serve a revision pinned or on demand, or take it out (mode off); answers the serving set",
)
def serving_put(request: HttpRequest, name: str, number: int, payload: ServeIn) -> dict[str, Any]:
    user, host = host_for(request, name, OPERATOR)
    serving_mode_set(
        revision=revision_or_404(host, number), mode=payload.mode, idle_ttl_s=payload.idle_ttl_s, actor=user
    )
    return _serving(host)


def _aliases(host: Host) -> dict[str, Any]:
    items = [{"name": a.name, "revision": a.revision.number} for a in alias_list(host)]
    return {"items": items, "count": len(items)}


@hosts.get("{name}/aliases/", response={200: AliasList, 404: Error}, summary="The host's aliases")
def aliases_get(request: HttpRequest, name: str) -> dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    return _aliases(host)


@hosts.put(
    "{name}/aliases/{alias}/",
    response={200: AliasList, 400: Error, 403: Error, 404: Error},
    summary="Create an alias or move it to a served revision; answers the aliases",
)
def alias_put(request: HttpRequest, name: str, alias: str, payload: AliasIn) -> dict[str, Any]:
    user, host = host_for(request, name, OPERATOR)
    alias_set(host=host, name=alias, revision=revision_or_404(host, payload.revision), actor=user)
    return _aliases(host)


@hosts.delete(
    "{name}/aliases/{alias}/", response={200: AliasList, 400: Error, 403: Error, 404: Error}, summary="Delete an alias"
)
def alias_remove(request: HttpRequest, name: str, alias: str) -> dict[str, Any]:
    user, host = host_for(request, name, OPERATOR)
    alias_delete(host=host, name=alias, actor=user)
    return _aliases(host)


def _key(key: InferenceKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "prefix": key.prefix,
        "models": key.allowed_models,
        "created_at": key.created_at,
        "created_by": key.created_by.username if key.created_by else None,
        "revoked_at": key.revoked_at,
    }


@keys.get("", response={200: KeyList, 403: Error}, summary="The inference keys (never a key itself)")
def key_list(request: HttpRequest) -> dict[str, Any]:
    actor(request, ADMIN)
    items = [_key(k) for k in InferenceKey.objects.select_related("created_by").order_by("name")]
    return {"items": items, "count": len(items)}


@keys.post("", response={201: KeyCreated, 400: Error, 403: Error}, summary="Make a key; the answer shows it, once")
def key_new(request: HttpRequest, payload: KeyIn) -> Status:
    user = actor(request, ADMIN)
    key, secret = key_create(name=payload.name, models=payload.models, actor=user)
    return Status(201, {**_key(key), "secret": secret})


@keys.post("{key}/revoke/", response={200: KeyOut, 400: Error, 403: Error, 404: Error}, summary="Revoke a key")
def key_revoke_post(request: HttpRequest, key: str) -> dict[str, Any]:
    user = actor(request, ADMIN)
    found = InferenceKey.objects.filter(name=key).first()
    if found is None:
        raise Http404(f"No inference key named {key[:80]!r}.")
    return _key(key_revoke(key=found, actor=user))


GROUPS = {
    "key": ("key",),
    "revision": ("host__name", "model", "revision__number"),
    "day": ("day", "key", "host__name", "model"),
}


@usage.get("", response={200: UsageList, 400: Error}, summary="Front-door usage totals per key, revision or day")
def usage_get(request: HttpRequest, by: Literal["key", "revision", "day"] = "key", days: int = 7) -> dict[str, Any]:
    actor(request, VIEWER)
    if not 1 <= days <= 366:
        raise ValidationError({"days": "days is 1 to 366."})
    rows = usage_totals(by=GROUPS[by], days=days)
    items = [
        {
            "day": r["day"].isoformat() if r.get("day") else None,
            "key": r.get("key"),
            "host": r.get("host__name"),
            "model": r.get("model"),
            "revision": r.get("revision__number"),
            **{c: r[c] or 0 for c in ("requests", "prompt_tokens", "completion_tokens", "errors")},
        }
        for r in rows
    ]
    return {"items": items, "count": len(items), "days": days}
