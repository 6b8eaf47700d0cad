"""Hosts with their GPUs, live state and running operation; the switch."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from api.schemas import OPERATION_QUEUED, Error, HostEventList, HostList, HostOut, SwitchIn
from api.serialize import host_dict, operation_with_gate
from controlpanel.roles import OPERATOR, VIEWER
from deployments.selectors import hosts as selectors
from deployments.selectors import revision_numbered
from deployments.services.switch import switch_request
from hardware.models import HostEvent
from hardware.selectors import host_event_list
from notifications.choices import severity

from . import actor, host_for

router = Router(tags=["hosts"])
EVENTS_MOST = 500  # events one answer lists


@router.get("", response=HostList, summary="The hosts, with GPUs, live state and the running operation")
def host_list(request: HttpRequest) -> dict[str, Any]:
    actor(request, VIEWER)
    items = [host_dict(card) for card in selectors.host_cards()]
    return {"items": items, "count": len(items)}


@router.get("{name}/", response={200: HostOut, 404: Error}, summary="One host")
def host_get(request: HttpRequest, name: str) -> dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    return host_dict(selectors.host_cards(hosts=type(host).objects.filter(pk=host.pk))[0])


@router.get(
    "{name}/events/",
    response={200: HostEventList, 400: Error, 404: Error},
    summary="The host's events, newest first (agent restarted, watchdog, refused table, door down/up, offline)",
)
def host_events(request: HttpRequest, name: str, kind: str = "", limit: int = 50) -> Status | dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    if kind and kind not in HostEvent.Kind.values:
        return Status(400, {"detail": f"kind must be one of {', '.join(HostEvent.Kind.values)}."})
    if not 1 <= limit <= EVENTS_MOST:
        return Status(400, {"detail": f"limit must be 1 to {EVENTS_MOST}."})
    events = host_event_list(host=host, kind=kind)
    items = [
        {
            "id": e.pk,
            "kind": e.kind,
            "label": e.get_kind_display(),
            "severity": severity(e.kind),
            "at": e.at,
            "summary": e.summary,
            "reason": e.reason,
            "revision": e.revision,
        }
        for e in events[:limit]
    ]
    return {"items": items, "count": events.count()}


@router.post(
    "{name}/switch/",
    response=OPERATION_QUEUED,
    summary="Switch the host to one of its revisions; answers with the operation to follow",
)
def host_switch(request: HttpRequest, name: str, payload: SwitchIn) -> Status:
    user, host = host_for(request, name, OPERATOR)
    revision = revision_numbered(host, payload.revision)
    gate = payload.gate.request() if payload.gate is not None else None
    op = switch_request(revision=revision, override_reason=payload.override_reason, gate=gate, actor=user)
    return Status(202, operation_with_gate(op))
