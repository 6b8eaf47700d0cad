"""Requesting a switch (and a probe): planner preflight, host lock, enqueue. Start and Stop, which
record whether the host should serve at all, are deployments.services.serving's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import ADMIN, OPERATOR, ensure_role, has_role
from deployments.choices import ModelFormat, OperationKind
from deployments.models import DeploymentRevision, Operation, active_revision_of
from deployments.planning import revision_plan
from hardware.models import Host
from hardware.review import Approval, approval_stamp, review_check, reviewed
from serving.engines.registry import get_adapter
from serving.planner import PlanInputError

from .dispatch import operation_dispatch
from .gates import GateRequest, gate_open, gate_params
from .host_models import download_active, downloadable, host_model_of
from .operations import operation_create
from .preflight import format_check
from .serving_set import switch_set_refusals

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


class PlanRefused(ValidationError):
    """The planner found errors; carries the report so callers can show the findings."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


class WeightsMissing(ValidationError):
    """The revision's model came from a hub repository and its files are not on the host yet."""


def _weights_on_host(revision: DeploymentRevision) -> None:
    """A model imported by repository id is downloaded first, as its own operation, so the switch
    never stops the serving engine to wait for (or fail on) a download."""
    variant = revision.model_variant
    if (
        get_adapter(revision.engine).fetches_own_weights
        or downloadable(variant)
        or variant.format == ModelFormat.OLLAMA
    ):
        return
    if host_model_of(host=revision.host, variant=variant) is not None:
        return
    running = download_active(host=revision.host, variant=variant)
    state = f" (its download is {running.state}: wait for it)" if running else ": download it to the host first"
    raise WeightsMissing(f"{variant.name} is not on {revision.host.name}'s disk{state}.")


@reviewed
@transaction.atomic
def switch_request(
    *,
    revision: DeploymentRevision,
    override_reason: str = "",
    gate: GateRequest | None = None,
    actor: AbstractUser | None,
    approval: Approval | None = None,
) -> Operation:
    """Ask the revision's host to switch to it.

    The planner runs first: error findings block, unless an admin overrides with a reason
    (recorded on the operation and in the audit log). The host lock then refuses a second
    switch while one is queued or running. With a `gate`, the switch must then hold up under
    a benchmark against the previous revision (deployments.services.gates); the operation
    answered is the gate's first: the switch, or the previous revision's run to compare with.
    On a host that requires review a person's switch (gate included) opens a change request
    instead (ChangeRequested, hardware.review); `approval`: the approved request
    running, recorded on the operation beside the author (`actor`).
    """
    ensure_role(actor, OPERATOR)
    host = revision.host
    cannot = format_check(revision)
    if cannot is not None:
        raise ValidationError(f"Switching {host.name} to r{revision.number} is refused: {cannot.message}")
    _weights_on_host(revision)
    try:
        report = revision_plan(revision).checked()
    except PlanInputError as exc:
        raise ValidationError({exc.field or "knobs": str(exc)}) from exc
    errors = [f for f in report.findings if f.severity == "error"]
    override = override_reason.strip()
    if errors:
        if not override:
            summary = "; ".join(f"{f.code}: {f.message}" for f in errors)
            raise PlanRefused(f"The planner refused r{revision.number}: {summary}", report)
        if not has_role(actor, ADMIN):
            raise ValidationError("Only an admin may override the planner.")
    elif override:
        override = ""  # nothing to override
    breaks = switch_set_refusals(host, revision)
    if breaks:
        raise ValidationError(
            f"Switching {host.name} to r{revision.number} would give its front door a serving set it refuses: "
            + "; ".join(breaks)
            + ". Change the serving set first (host page, front door: another mode, or off), or switch to a "
            "revision on a free port (New revision from this picks one)."
        )
    # Read now, not from the revision's cached host: another switch may have moved it since.
    previous = active_revision_of(Host.objects.select_related("deployment__active_revision").get(pk=host.pk))
    params: dict[str, Any] = {
        "revision": revision.number,
        "previous": previous.number if previous else None,
        "planner": {
            "errors": [f.code for f in errors],
            "warnings": [f.code for f in report.findings if f.severity == "warning"],
        },
    }
    if override:
        params["override_reason"] = override
    now = f" (now r{previous.number})" if previous else ""
    proposal = {"revision": revision.number, "override_reason": override} | gate_params(gate)
    review_check(
        host=host,
        kind=OperationKind.SWITCH,
        params=proposal,
        summary=f"Switch {host.name} to r{revision.number}{now}",
        actor=actor,
        approval=approval,
    )
    params |= approval_stamp(approval)
    if gate is not None:
        return gate_open(revision=revision, previous=previous, gate=gate, switch_params=params, actor=actor)
    return operation_create(
        kind=OperationKind.SWITCH,
        host=host,
        revision=revision,
        params=params,
        enqueue=operation_dispatch,
        actor=actor,
    )


@transaction.atomic
def probe_request(*, host: Host, actor: AbstractUser | None) -> Operation:
    ensure_role(actor, OPERATOR)
    return operation_create(kind=OperationKind.PROBE, host=host, enqueue=operation_dispatch, actor=actor)
