"""Operations: status, log, cancel."""

from __future__ import annotations

import uuid
from typing import Any

from django.http import Http404, HttpRequest
from ninja import Router, Status

from api.schemas import Error, OperationLog, OperationOut
from api.serialize import operation_dict, operation_with_gate
from controlpanel.roles import OPERATOR, VIEWER
from deployments.models import Operation
from deployments.services.operations import operation_cancel

from . import actor, row_or_404

router = Router(tags=["operations"])


def _operation(op_id: str) -> Operation:
    try:
        pk = uuid.UUID(op_id)
    except ValueError:
        raise Http404("No such operation.") from None
    return row_or_404(Operation.objects.select_related("host", "revision", "requested_by"), pk, "No such operation.")


@router.get("{op_id}/", response={200: OperationOut, 404: Error}, summary="An operation's state and result")
def operation_get(request: HttpRequest, op_id: str) -> dict[str, Any]:
    actor(request, VIEWER)
    return operation_with_gate(_operation(op_id))


@router.get("{op_id}/log/", response={200: OperationLog, 404: Error}, summary="An operation's log")
def operation_log(request: HttpRequest, op_id: str) -> dict[str, Any]:
    actor(request, VIEWER)
    op = _operation(op_id)
    return {"id": str(op.pk), "state": op.state, "log": op.log}


@router.post(
    "{op_id}/cancel/", response={202: OperationOut, 400: Error, 403: Error, 404: Error}, summary="Ask to cancel"
)
def operation_cancel_request(request: HttpRequest, op_id: str) -> Status:
    user = actor(request, OPERATOR)
    op = operation_cancel(op=_operation(op_id), actor=user)
    return Status(202, operation_dict(op))
