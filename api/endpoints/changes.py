"""Change requests of protected hosts: list, open, read, approve, reject, and the other
decisions (ask for changes, re-confirm, withdraw, comment) (docs/change-requests.md)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from api.schemas import CHANGE_ANSWERS, ChangeIn, ChangeList, ChangeOut, DecisionIn, Error, VerdictIn
from api.serialize import change_dict
from changes.models import ChangeRequest
from changes.selectors import change_list
from changes.services import change_approve, change_decide, change_open, change_reject
from controlpanel.roles import OPERATOR, VIEWER

from . import actor, host_filter, host_for, listed, row_or_404

router = Router(tags=["change requests"])
LIST_LIMIT = 500


def _change(change_id: int) -> ChangeRequest:
    rows = ChangeRequest.objects.select_related("host", "author", "decided_by")
    return row_or_404(rows, change_id, f"No change request #{change_id}.")


@router.get("", response={200: ChangeList, 404: Error}, summary="Change requests: pending ones, or all")
def changes_list(request: HttpRequest, host: str = "", state: str = "pending") -> dict[str, Any]:
    actor(request, VIEWER)
    found = host_filter(host)
    return listed(change_dict(c) for c in change_list(host=found, pending=state != "all")[:LIST_LIMIT])


@router.post(
    "",
    response={201: ChangeOut, 400: Error, 403: Error, 404: Error, 409: Error},
    summary="Propose a switch, an alias move or a serving-set change for review (on any host)",
)
def changes_open(request: HttpRequest, payload: ChangeIn) -> Status:
    user, host = host_for(request, payload.host, OPERATOR)
    params: dict[str, Any] = {"revision": payload.revision}
    if payload.kind == "alias":
        params["name"] = payload.name
    elif payload.kind == "serving":
        params |= {"mode": payload.mode, "idle_ttl_s": payload.idle_ttl_s}
    elif payload.kind == "switch":
        params["override_reason"] = payload.override_reason
    change = change_open(host=host, kind=payload.kind, params=params, when=payload.when(), actor=user)
    return Status(201, change_dict(change, comments=True))


@router.get("{change_id}/", response={200: ChangeOut, 404: Error}, summary="One change request, with its comments")
def changes_get(request: HttpRequest, change_id: int) -> dict[str, Any]:
    actor(request, VIEWER)
    return change_dict(_change(change_id), comments=True)


@router.post("{change_id}/approve/", response=CHANGE_ANSWERS, summary="Approve it: the change runs now")
def changes_approve(request: HttpRequest, change_id: int, payload: DecisionIn) -> dict[str, Any]:
    user = actor(request, OPERATOR)
    change = change_approve(change=_change(change_id), comment=payload.comment, actor=user)
    return change_dict(_change(change.pk), comments=True)


@router.post("{change_id}/reject/", response=CHANGE_ANSWERS, summary="Reject it: nothing changes")
def changes_reject(request: HttpRequest, change_id: int, payload: DecisionIn) -> dict[str, Any]:
    user = actor(request, OPERATOR)
    change = change_reject(change=_change(change_id), comment=payload.comment, actor=user)
    return change_dict(_change(change.pk), comments=True)


@router.post(
    "{change_id}/decide/",
    response=CHANGE_ANSWERS,
    summary="Any decision: comment, approve, request_changes, reject, reconfirm (author), withdraw (author)",
)
def changes_decide(request: HttpRequest, change_id: int, payload: VerdictIn) -> dict[str, Any]:
    user = actor(request, OPERATOR)
    change = change_decide(change=_change(change_id), verdict=payload.verdict, comment=payload.comment, actor=user)
    return change_dict(_change(change.pk), comments=True)
