"""What a host needs for an operation: the order an agent receives when it begins one
(serving.wire.Order), each revision in it as deployments.host_serving projects it (its API key
resolved: the order goes to the revision's own host only)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from deployments.host_serving import revision_launch
from deployments.models import DeploymentRevision, Operation, Secret, active_revision_id_of
from deployments.services.secrets import hub_token_reveal
from hardware.models import Host
from serving.wire import GpuBrief, HostBrief, Order


def host_brief(host: Host) -> HostBrief:
    return HostBrief(
        name=host.name,
        cpu_only=host.cpu_only,
        nvml_available=host.nvml_available,
        engine_installs=host.engine_installs if isinstance(host.engine_installs, dict) else {},
        gpus=tuple(GpuBrief(index=g.index, name=g.name) for g in host.gpus.order_by("index")),
    )


def _revision(pk: int) -> DeploymentRevision:
    revision: DeploymentRevision = DeploymentRevision.objects.select_related("model_variant", "host").get(pk=pk)
    return revision


def operation_order(op: Operation) -> dict[str, Any]:
    """Everything the host needs to carry out `op` (one of its own operations): `Order.to_dict()`."""
    host = op.host
    active_id = active_revision_id_of(host)
    previous = active_id if op.kind in ("switch", "rollback") and active_id else None
    hub_token = None
    secret = op.params.get("token_secret") if op.kind == "download" else None
    if secret:
        # A gated repository's token, for this host's own download only (never stored in clear).
        # Checked again here: an admin may have unmarked it since the download was asked for.
        try:
            hub_token = hub_token_reveal(host=host, name=str(secret))
        except (Secret.DoesNotExist, ValidationError):
            hub_token = None
    order = Order(
        id=str(op.pk),
        kind=op.kind,
        host=host_brief(host),
        params=op.params,
        revision=revision_launch(_revision(op.revision_id), host_bound=True) if op.revision_id else None,
        previous=revision_launch(_revision(previous), host_bound=True) if previous else None,
        hub_token=hub_token,
    )
    return order.to_dict()


def operation_brief(op: Operation) -> dict[str, Any]:
    return {"id": str(op.pk), "kind": op.kind, "state": op.state, "created_at": op.created_at.isoformat()}
