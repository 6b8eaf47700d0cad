"""Rollouts across hosts: start one over a host tag (now, or with `at`/`window` scheduled as a
switch is), follow it, pause, resume, cancel; and a host's tags (its groups)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import Http404, HttpRequest
from ninja import Field, Router, Schema, Status

from api.schemas import Error, GateIn, ScheduledOut, WhenIn
from api.serialize import gate_dict
from controlpanel.roles import OPERATOR, VIEWER
from deployments.services.gates import gate_params
from hardware.services import host_tags_set
from rollouts import selectors
from rollouts.models import Rollout
from rollouts.services import change_from_input, rollout_cancel, rollout_pause, rollout_resume, rollout_start
from schedules.choices import ChangeKind
from schedules.services import change_schedule

from . import acted, actor, host_for, listed
from .schedules import scheduled_dict

router = Router(tags=["rollouts"])
hosts = Router(tags=["hosts"])


class TagsIn(Schema):
    tags: list[str] = Field(description="The host's groups; replaces the ones it has.")


class TagsOut(Schema):
    host: str
    tags: list[str]


class RolloutIn(WhenIn):
    group: str = Field(description="A host tag: every host carrying it takes part.")
    kind: str = Field("revision", description="`revision` (a new revision on each host) or `alias` (an alias move).")
    set: dict[str, Any] | None = Field(None, description="revision: knobs set on each host's current revision.")
    set_env: dict[str, str] | None = Field(None, description="revision: variables set on it.")
    model: str | None = Field(None, description="revision: a model's name to move every host to.")
    message: str = Field("", description="revision: each new revision's message.")
    alias: str = Field("", description="alias: the alias to move ...")
    tag: str = Field("", description="alias: ... to the revision with this tag on each host.")
    batch_size: int = Field(1, description="Hosts per wave after the canary.")
    canary: str = Field("", description="The host that goes first (default: the first by name).")
    gate: GateIn | None = Field(
        None,
        description="revision: a benchmark gate the canary's switch carries; the next wave starts once it passed, "
        "and a canary it rolls back stops the rollout (the comparison is in the canary's `gate`).",
    )


class RolloutHostOut(Schema):
    host: str
    wave: int
    state: str
    previous: int | None
    target: int | None
    operation: str | None
    message: str
    gate: dict[str, Any] | None = Field(
        None,
        description="The canary's benchmark gate, when the rollout carries one: state, limits, operations and "
        "the comparison that decided it (`verdict`), as an operation's `gate`.",
    )


class RolloutOut(Schema):
    id: int
    group: str
    kind: str
    change: dict[str, Any]
    batch_size: int
    gate: dict[str, Any] | None = Field(None, description="The gate the canary carries: profile and limits.")
    state: str
    error: str
    created_by: str | None
    approved_by: str | None = Field(None, description="Who approved its change request (a protected host)")
    change_request: int | None = Field(None, description="The approved change request it started from")
    created_at: datetime
    finished_at: datetime | None
    hosts: list[RolloutHostOut]


class RolloutList(Schema):
    items: list[RolloutOut]
    count: int


def _dict(rollout: Rollout) -> dict[str, Any]:
    canary_gate = gate_dict(selectors.rollout_canary_gate(rollout=rollout))
    return {
        "id": rollout.pk,
        "group": rollout.group,
        "kind": rollout.kind,
        "change": rollout.change if isinstance(rollout.change, dict) else {},
        "batch_size": rollout.batch_size,
        "gate": rollout.gate if isinstance(rollout.gate, dict) else None,
        "state": rollout.state,
        "error": rollout.error,
        "created_by": rollout.created_by.username if rollout.created_by else None,
        "approved_by": rollout.approved_by.username if rollout.approved_by else None,
        "change_request": rollout.change_request,
        "created_at": rollout.created_at,
        "finished_at": rollout.finished_at,
        "hosts": [
            {
                "host": p.host.name,
                "wave": p.wave,
                "state": p.state,
                "previous": p.previous.number if p.previous else None,
                "target": p.target.number if p.target else None,
                "operation": str(p.operation_id) if p.operation_id else None,
                "message": p.message,
                "gate": canary_gate if p.wave == 0 else None,
            }
            for p in selectors.rollout_hosts(rollout=rollout)
        ],
    }


def _rollout(rollout_id: int) -> Rollout:
    try:
        return selectors.rollout_get(pk=rollout_id)
    except Rollout.DoesNotExist:
        raise Http404("No such rollout.") from None


@hosts.put("{name}/tags/", response={200: TagsOut, 400: Error, 403: Error, 404: Error}, summary="Set a host's tags")
def host_tags_put(request: HttpRequest, name: str, payload: TagsIn) -> dict[str, Any]:
    user, host = host_for(request, name, OPERATOR)
    return {"host": host.name, "tags": host_tags_set(host=host, tags=payload.tags, actor=user)}


@router.get("", response=RolloutList, summary="The rollouts, newest first")
def rollout_list(request: HttpRequest) -> dict[str, Any]:
    actor(request, VIEWER)
    return listed(_dict(r) for r in selectors.rollout_list())


@router.post(
    "",
    response={201: RolloutOut, 202: ScheduledOut, 400: Error, 403: Error, 409: Error},
    summary="Start a rollout over a host tag: the canary now, the next waves as each one succeeds "
    "(with `at` or `window`: scheduled, 202 with the scheduled change)",
)
def rollout_new(request: HttpRequest, payload: RolloutIn) -> Status:
    user = actor(request, OPERATOR)
    p = payload
    change = change_from_input(
        p.kind, knobs=p.set, env=p.set_env, model=p.model, message=p.message, alias=p.alias, tag=p.tag
    )
    gate = p.gate.request() if p.gate is not None else None
    params = {"group": p.group, "kind": p.kind, "change": change, "batch_size": p.batch_size, "canary": p.canary}
    when = p.when()
    if when is not None:
        kept = params | gate_params(gate)
        scheduled = change_schedule(kind=ChangeKind.ROLLOUT, host=None, params=kept, **when, actor=user)
        return Status(202, scheduled_dict(scheduled))
    rollout = rollout_start(**params, gate=gate, actor=user)
    return Status(201, _dict(_rollout(rollout.pk)))


@router.get("{rollout_id}/", response={200: RolloutOut, 404: Error}, summary="A rollout and each host's state")
def rollout_get(request: HttpRequest, rollout_id: int) -> dict[str, Any]:
    actor(request, VIEWER)
    return _dict(_rollout(rollout_id))


def _act(request: HttpRequest, rollout_id: int, service: Any) -> dict[str, Any]:
    return _dict(acted(request, service, lambda: _rollout(rollout_id), "rollout"))


ACTED = {200: RolloutOut, 400: Error, 403: Error, 404: Error}


@router.post("{rollout_id}/pause/", response=ACTED, summary="Pause before the next wave")
def rollout_pause_request(request: HttpRequest, rollout_id: int) -> dict[str, Any]:
    return _act(request, rollout_id, rollout_pause)


@router.post("{rollout_id}/resume/", response=ACTED, summary="Resume a paused rollout")
def rollout_resume_request(request: HttpRequest, rollout_id: int) -> dict[str, Any]:
    return _act(request, rollout_id, rollout_resume)


@router.post("{rollout_id}/cancel/", response=ACTED, summary="Cancel: no further wave starts")
def rollout_cancel_request(request: HttpRequest, rollout_id: int) -> dict[str, Any]:
    return _act(request, rollout_id, rollout_cancel)
