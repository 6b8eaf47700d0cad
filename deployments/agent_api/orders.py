"""What a host needs for an operation, as serving.wire's typed values: the order an agent
receives when it begins one (`Order`), and the launch of one of its own revisions
(`RevisionLaunch`, with that revision's API key, which only this host is ever given)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from deployments.models import DeploymentRevision, Operation, Secret, active_revision_id_of
from deployments.runtime_bridge import revision_host_facts, revision_spec
from hardware.models import Host
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.launch import engine_config
from serving.launch import served_context as launch_context
from serving.planner import PlanInputError
from serving.wire import GpuBrief, HostBrief, Order, PlannedMemory, RevisionLaunch


def served_context(revision: DeploymentRevision) -> int | None:
    """The context one request can use on the server: the launch's answer (serving.launch)."""
    return launch_context(revision_spec(revision)).per_sequence


def _planned(revision: DeploymentRevision) -> PlannedMemory:
    """The planner's figures, once: bytes per device ("gpuN", or "ram" on a CPU-only host), and
    the weights and KV cache bytes a CPU-only host's preflight checks. A switch to a revision the
    planner cannot read is refused before it is queued; a rollback to one, or its restore after a
    restart, is not: then no bytes, and why."""
    from deployments.services.planning import memory_need, plan_for_revision, planned_memory, planner_refusal

    try:
        report: Any = plan_for_revision(revision)
    except PlanInputError as exc:
        weights, kv = memory_need(revision, None)
        return PlannedMemory(weights=weights, kv=kv, refused=planner_refusal(revision, exc))
    weights, kv = memory_need(revision, report)
    return PlannedMemory(devices=planned_memory(revision, report), weights=weights, kv=kv)


def launch_of(revision: DeploymentRevision) -> RevisionLaunch:
    """The launch of `revision` as its own host runs it: its serving spec, the host's copy of the
    weights, the planner's memory, its served context and its API key resolved. The agent calls
    serving.launch.launch on the same spec with its own facts."""
    error, api_key = "", None
    if revision.api_key_secret:
        from deployments.services.secrets import secret_reveal

        try:
            api_key = secret_reveal(host=revision.host, name=revision.api_key_secret)
        except Secret.DoesNotExist:  # a secret deleted since
            error = f"the secret {revision.api_key_secret} is not set on this host"
        except ValidationError as exc:  # made under another key
            error = "; ".join(exc.messages)
    spec, facts = revision_spec(revision), revision_host_facts(revision)
    try:
        engine_config(spec, facts)
    except EngineConfigError as exc:  # stored before the engine's rule existed: the host refuses it
        error = error or f"{exc.field + ': ' if exc.field else ''}{exc}"
    variant = revision.model_variant
    copy = facts.local_weights if not get_adapter(revision.engine).fetches_own_weights else None
    return RevisionLaunch(
        id=revision.pk,
        number=revision.number,
        spec=spec,
        local_weights=copy,
        # The imported size of a GGUF file (the host's preflight compares its copy's size).
        weights_bytes=variant.weights_bytes if not copy or variant.format == "gguf" else None,
        memory=_planned(revision),
        served_context=served_context(revision),
        api_key=api_key,
        error=error,
    )


def revision_launch(revision: DeploymentRevision) -> dict[str, Any]:
    """`launch_of(revision)` as plain JSON (GET revisions/<id>/launch, the front door's document).
    Until the panel's one projection builds the front door's document, that document still reads
    the engine's knobs and API key from `config` (deployments.services.front_door); agents ignore it."""
    launch = launch_of(revision)
    try:
        knobs = get_adapter(launch.engine).launch_knobs(launch.spec.knobs, launch.spec.model)
    except EngineConfigError:
        knobs = {}
    return launch.to_dict() | {"config": {"knobs": knobs, "api_key": launch.api_key}}


def host_brief(host: Host) -> HostBrief:
    return HostBrief(
        name=host.name,
        cpu_only=host.cpu_only,
        nvml_available=host.nvml_available,
        engine_installs=host.engine_installs if isinstance(host.engine_installs, dict) else {},
        gpus=tuple(GpuBrief(index=g.index, name=g.name) for g in host.gpus.order_by("index")),
    )


def operation_order(op: Operation) -> dict[str, Any]:
    """Everything the host needs to carry out `op` (one of its own operations): Order.to_dict()."""
    host = op.host
    revision = (
        DeploymentRevision.objects.select_related("model_variant", "host").get(pk=op.revision_id)
        if op.revision_id
        else None
    )
    previous = None
    active_id = active_revision_id_of(host)
    if op.kind in ("switch", "rollback") and active_id:
        active = DeploymentRevision.objects.select_related("model_variant", "host").get(pk=active_id)
        previous = launch_of(active)
    hub_token = None
    secret = op.params.get("token_secret") if op.kind == "download" else None
    if secret:
        # A gated repository's token, for this host's own download only (never stored in clear).
        # Checked again here: an admin may have unmarked it since the download was asked for.
        from deployments.services.secrets import hub_token_reveal

        try:
            hub_token = hub_token_reveal(host=host, name=str(secret))
        except (Secret.DoesNotExist, ValidationError):
            hub_token = None
    order = Order(
        id=str(op.pk),
        kind=op.kind,
        host=host_brief(host),
        params=dict(op.params or {}),
        revision=launch_of(revision) if revision is not None else None,
        previous=previous,
        hub_token=hub_token,
    )
    return order.to_dict()


def operation_brief(op: Operation) -> dict[str, Any]:
    return {"id": str(op.pk), "kind": op.kind, "state": op.state, "created_at": op.created_at.isoformat()}
