"""Requesting a switch (and a probe): planner preflight, host lock, enqueue. Start and Stop, which
record whether the host should serve at all, are deployments.services.serving's."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import ADMIN, OPERATOR, ensure_role, has_role
from deployments.choices import ModelFormat, OperationKind
from deployments.models import DeploymentRevision, Operation, active_revision_of
from hardware.models import Host
from serving.engines.registry import get_adapter
from serving.planner import PlanInputError

from .dispatch import operation_dispatch
from .operations import operation_create
from .planning import plan_for_revision


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
    from .host_models import download_active, downloadable, host_model_of

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


@transaction.atomic
def switch_request(
    *,
    revision: DeploymentRevision,
    override_reason: str = "",
    actor: Any,
) -> Operation:
    """Ask the revision's host to switch to it.

    The planner runs first: error findings block, unless an admin overrides with a reason
    (recorded on the operation and in the audit log). The host lock then refuses a second
    switch while one is queued or running.
    """
    ensure_role(actor, OPERATOR)
    host = revision.host
    _weights_on_host(revision)
    try:
        report = plan_for_revision(revision)
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
    previous = active_revision_of(host)
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
    return operation_create(
        kind=OperationKind.SWITCH,
        host=host,
        revision=revision,
        params=params,
        enqueue=operation_dispatch,
        actor=actor,
    )


@transaction.atomic
def probe_request(*, host: Host, actor: Any) -> Operation:
    ensure_role(actor, OPERATOR)
    return operation_create(kind=OperationKind.PROBE, host=host, enqueue=operation_dispatch, actor=actor)
