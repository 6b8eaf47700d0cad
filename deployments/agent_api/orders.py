"""What a host needs for an operation, as plain JSON: the order an agent receives when it
begins one, and the launch of one of its own revisions (with that revision's API key, which
only this host is ever given)."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.exceptions import ValidationError

from deployments.models import DeploymentRevision, Operation, Secret, active_revision_id_of
from deployments.runtime_bridge import engine_config_for_revision, revision_host_facts, revision_spec
from hardware.models import Host
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.launch import served_context as launch_context
from serving.planner import PlanInputError


def served_context(revision: DeploymentRevision) -> int | None:
    """The context one request can use on the server: the launch's answer (serving.launch)."""
    return launch_context(revision_spec(revision)).per_sequence


def _memory_need(revision: DeploymentRevision) -> dict[str, int | None] | None:
    """Weights and KV cache bytes a CPU-only host holds in RAM (the planner's figures)."""
    if not revision.host.cpu_only:
        return None
    from deployments.services.planning import plan_for_revision
    from deployments.services.preflight import memory_need

    try:
        report: Any = plan_for_revision(revision)
    except PlanInputError:  # a switch to it was refused for this; a rollback or a restore is not
        report = None
    weights, kv = memory_need(revision, report)
    return {"weights": weights, "kv": kv}


def _memory_planned(revision: DeploymentRevision) -> dict[str, int] | None:
    """The planner's bytes per GPU (`gpuN`) on a GPU host: the host's preflight compares them with
    what NVML says is free (hostagent.preflight.gpu_memory_checks)."""
    if revision.host.cpu_only:
        return None
    from deployments.services.planning import planned_or_refused

    # A switch to a revision the planner cannot read is refused before it is queued (and the front
    # door's document refuses it); a rollback to one, or its restore after a restart, is not.
    return planned_or_refused(revision)[0] or None


def revision_launch(revision: DeploymentRevision) -> dict[str, Any]:
    """The launch of `revision`: its serving spec (serving.launch.RevisionSpec) and the engine
    config it makes (the host's copy of downloaded weights swapped in; the bind address and
    executable are the host's to add), its API key resolved, and the facts the host's
    preflight checks. The agent calls serving.launch.launch on the same spec."""
    error = ""
    facts = revision_host_facts(revision)
    try:
        config = dataclasses.asdict(engine_config_for_revision(revision, resolve_secrets=True, facts=facts))
    except (Secret.DoesNotExist, ValidationError) as exc:  # a secret deleted or made under another key
        missing = f"the secret {revision.api_key_secret} is not set on this host"
        error = missing if isinstance(exc, Secret.DoesNotExist) else "; ".join(exc.messages)
        config = dataclasses.asdict(engine_config_for_revision(revision, facts=facts))
        config["api_key"] = None
    except EngineConfigError as exc:  # stored before the engine's rule existed: the host refuses it
        error = f"{exc.field + ': ' if exc.field else ''}{exc}"
        config = {}
    for local in ("host", "binary", "gpu_indices"):
        config.pop(local, None)
    variant = revision.model_variant
    model = {
        "gguf_file": variant.gguf_file,
        "mmproj_file": variant.mmproj_file,
        "repo_id": variant.repo_id,
        "weights_bytes": variant.weights_bytes,
    }
    copy = facts.local_weights if not get_adapter(revision.engine).fetches_own_weights else None
    if copy:
        # The copy a download put on this host's disk: the engine opens it, not the hub's name.
        model.update(gguf_file=copy if variant.format == "gguf" else "", repo_id=copy)
        model["weights_bytes"] = variant.weights_bytes if variant.format == "gguf" else None
    return {
        "id": revision.pk,
        "number": revision.number,
        "label": f"r{revision.number}",
        "engine": revision.engine,
        "engine_version": revision.engine_version,
        "spec": revision_spec(revision).to_dict(),
        "local_weights": copy,
        "config": config,
        "model": model,
        "served_context": served_context(revision),
        "memory_need": _memory_need(revision),
        "memory_planned": _memory_planned(revision),
        "installs": revision.host.engine_installs if isinstance(revision.host.engine_installs, dict) else {},
        "error": error,
    }


def host_facts(host: Host) -> dict[str, Any]:
    return {
        "name": host.name,
        "cpu_only": host.cpu_only,
        "nvml_available": host.nvml_available,
        "engine_installs": host.engine_installs if isinstance(host.engine_installs, dict) else {},
        "gpus": [{"index": g.index, "name": g.name} for g in host.gpus.order_by("index")],
    }


def operation_order(op: Operation) -> dict[str, Any]:
    """Everything the host needs to carry out `op` (one of its own operations)."""
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
        previous = revision_launch(active)
    order: dict[str, Any] = {
        "id": str(op.pk),
        "kind": op.kind,
        "params": op.params,
        "host": host_facts(host),
        "revision": revision_launch(revision) if revision is not None else None,
        "previous": previous,
    }
    secret = op.params.get("token_secret") if op.kind == "download" else None
    if secret:
        # A gated repository's token, for this host's own download only (never stored in clear).
        # Checked again here: an admin may have unmarked it since the download was asked for.
        from deployments.services.secrets import hub_token_reveal

        try:
            order["hub_token"] = hub_token_reveal(host=host, name=str(secret))
        except (Secret.DoesNotExist, ValidationError):
            order["hub_token"] = None
    return order


def operation_brief(op: Operation) -> dict[str, Any]:
    return {"id": str(op.pk), "kind": op.kind, "state": op.state, "created_at": op.created_at.isoformat()}
