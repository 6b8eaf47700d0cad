"""Domain rows to the API's plain dicts (one place, so every endpoint shows an object the same way)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from changes.binding import described
from changes.models import ChangeRequest
from changes.services import stale_reasons
from deployments.choices import OperationState
from deployments.models import (
    BenchmarkRun,
    DeploymentRevision,
    ModelVariant,
    Operation,
    SwitchGate,
    active_revision_id_of,
    active_revision_of,
)
from deployments.presenters import launch_for_revision, operation_outcome, operation_result
from deployments.selectors.hosts import HostCard
from deployments.services.benchmarks import benchmark_summary
from deployments.services.gates import gate_of

ENDED = {OperationState.SUCCEEDED, OperationState.FAILED, OperationState.CANCELLED, OperationState.LOST}


def operation_dict(op: Operation) -> dict[str, Any]:
    return {
        "id": str(op.pk),
        "kind": op.kind,
        "host": op.host.name,
        "revision": op.revision.number if op.revision_id and op.revision else None,
        "state": op.state,
        "ended": op.state in ENDED,
        "outcome": operation_outcome(op).label,
        "stage": op.stage,
        "progress": op.progress,
        "error": op.error,
        "result": operation_result(op),
        "requested_by": op.requested_by.username if op.requested_by_id and op.requested_by else None,
        "created_at": op.created_at,
        "started_at": op.started_at,
        "finished_at": op.finished_at,
        "url": reverse("deployments:operation_detail", args=[op.pk]),
        "benchmark": _benchmark_id(op),
    }


def _benchmark_id(op: Operation) -> int | None:
    if op.kind != "benchmark":
        return None
    if hasattr(op, "benchmark_run_pk"):  # read with the operation (deployments.selectors.hosts.host_cards)
        return op.benchmark_run_pk
    return BenchmarkRun.objects.filter(operation=op).values_list("pk", flat=True).first()


def host_dict(card: HostCard) -> dict[str, Any]:
    host = card.host
    serving = card.serving
    return {
        "name": host.name,
        "address": host.address,
        "queue": host.queue,
        "online": host.is_online,
        "offline_reason": card.offline_reason if not host.is_online else "",
        "cpu_only": host.cpu_only,
        "demo": host.is_demo,
        "last_heartbeat": host.last_heartbeat,
        "active_revision": active.number if (active := active_revision_of(host)) else None,
        "serving": serving.serving,
        "serving_status": serving.label,
        "engine_state": host.engine_state if isinstance(host.engine_state, dict) else {},
        "engine_metrics": host.engine_metrics if isinstance(host.engine_metrics, dict) else {},
        "gpus": [
            {
                "index": g.gpu.index,
                "name": g.gpu.name,
                "memory_bytes": g.gpu.memory_bytes,
                "util_pct": g.sample.util_pct if g.sample else None,
                "mem_used_bytes": g.sample.mem_used_bytes if g.sample else None,
                "power_w": g.sample.power_w if g.sample else None,
                "temp_c": g.sample.temp_c if g.sample else None,
                "sampled_at": g.sample.ts if g.sample else None,
            }
            for g in card.gpus
        ],
        "gpus_more": card.gpus_more,
        "operation": operation_dict(card.operation) if card.operation else None,
    }


def model_dict(m: ModelVariant) -> dict[str, Any]:
    return {
        "name": m.name,
        "repo_id": m.repo_id,
        "gguf_file": m.gguf_file,
        "family": m.family,
        "generation": m.generation,
        "format": m.format,
        "quantization": m.quantization,
        "weights_bytes": m.weights_bytes,
        "arch": m.arch if isinstance(m.arch, dict) else {},
        "purpose": m.purpose,  # chat | completions (serving.purpose)
        "demo": m.is_demo,
    }


def revision_dict(r: DeploymentRevision, *, with_argv: bool = True) -> dict[str, Any]:
    launch = launch_for_revision(r) if with_argv else None
    return {
        "host": r.host.name,
        "number": r.number,
        "parent": r.parent.number if r.parent_id and r.parent else None,
        "engine": r.engine,
        "engine_version": r.engine_version,
        "model": r.model_variant.name,
        "knobs": r.knobs if isinstance(r.knobs, dict) else {},
        "env": r.env if isinstance(r.env, dict) else {},
        "served_name": r.served_name,
        "port": r.port,
        "api_key_secret": r.api_key_secret or None,
        "hf_token_secret": r.hf_token_secret or None,
        "tag": r.tag,
        "message": r.message,
        "author": r.author.username if r.author_id and r.author else None,
        "created_at": r.created_at,
        "active": active_revision_id_of(r.host) == r.pk,
        "argv": list(launch.argv) if launch is not None and not launch.error else [],
    }


def benchmark_dict(run: BenchmarkRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "host": run.revision.host.name,
        "revision": run.revision.number,
        "profile": run.profile if isinstance(run.profile, dict) else {},
        "status": run.status,
        "created_at": run.created_at,
        "summary": benchmark_summary(run),
        "results": run.results if isinstance(run.results, dict) else {},
    }


def gate_dict(gate: SwitchGate | None) -> dict[str, Any] | None:
    """A switch's benchmark gate as the API shows it, with the comparison that decided it."""
    if gate is None:
        return None

    def op_id(op: Operation | None) -> str | None:
        return str(op.pk) if op is not None else None

    return {
        "state": gate.state,
        "revision": gate.revision.number,
        "previous": gate.previous.number,
        "profile": gate.profile_label,
        "limits": gate.limits,
        "reason": gate.reason,
        "operations": {
            "baseline": op_id(gate.baseline_op),
            "switch": op_id(gate.switch_op),
            "benchmark": op_id(gate.benchmark_op),
            "rollback": op_id(gate.rollback_op),
        },
        "runs": {"baseline": gate.baseline_run_id, "candidate": gate.candidate_run_id},
        "verdict": gate.verdict or None,
    }


def operation_with_gate(op: Operation) -> dict[str, Any]:
    """operation_dict with the gate the operation is a step of."""
    return {**operation_dict(op), "gate": gate_dict(gate_of(op))}


def change_dict(change: ChangeRequest, *, comments: bool = False) -> dict[str, Any]:
    """A change request as the API answers it (changes/)."""
    out: dict[str, Any] = {
        "id": change.pk,
        "host": change.host.name,
        "kind": change.kind,
        "params": change.params if isinstance(change.params, dict) else {},
        "summary": change.summary,
        "state": change.state,
        "author": change.author.username if change.author else None,
        "decided_by": change.decided_by.username if change.decided_by else None,
        "stale": stale_reasons(change),
        "bound": described(change.bound),
        "operation": str(change.operation_id) if change.operation_id else None,
        "rollout": change.rollout_id,
        "scheduled": change.scheduled_id,
        "created_at": change.created_at,
        "decided_at": change.decided_at,
        "url": change.get_absolute_url(),
    }
    if comments:
        out["comments"] = [
            {
                "author": c.author.username if c.author else None,
                "verdict": c.verdict,
                "body": c.body,
                "created_at": c.created_at,
            }
            for c in change.comments.select_related("author")
        ]
    return out
