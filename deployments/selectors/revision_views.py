"""DeploymentRevision rows -> the pure `RevisionView` that diffs and client exports read."""

from __future__ import annotations

from typing import Any

from deployments.models import DeploymentRevision, ModelVariant
from deployments.presenters import Launch, launch_for_revision, report_for_revision
from serving.diffing import RevisionDiff, RevisionView, diff_revisions

from .memory import memory_for_diff

MODEL_FIELDS = (
    "name",
    "repo_id",
    "gguf_file",
    "family",
    "generation",
    "format",
    "quantization",
    "quant_method",
    "quant_bits",
    "weights_bytes",
    "arch",
    "tool_call_parser",
    "chat_template_tools",
    "reasoning_parser",
    "thinking",
    "sampling_presets",
    "min_engine_versions",
    "mmproj_file",
    "purpose",
)


def model_dict(model: ModelVariant) -> dict[str, Any]:
    return {name: getattr(model, name) for name in MODEL_FIELDS}


def effective_served_name(revision: DeploymentRevision, launch: Launch | None = None) -> str:
    """What clients send as "model": the revision's name, else the adapter's default."""
    if revision.served_name:
        return revision.served_name
    launch = launch or launch_for_revision(revision)
    return launch.served_name or revision.model_variant.name


def benchmark_items(revision: DeploymentRevision) -> list[dict[str, Any]]:
    return [
        {
            "profile_name": r.profile_name,
            "profile": r.profile,
            "status": r.status,
            "results": r.results,
            "created_at": r.created_at,
        }
        for r in revision.benchmark_runs.order_by("-created_at")
    ]


def _measured_context(items: list[dict[str, Any]]) -> int | None:
    for item in items:
        value = (item.get("results") or {}).get("served_context")
        if isinstance(value, int) and value > 0:
            return value
    return None


def revision_view(
    revision: DeploymentRevision, *, planner: bool = True, benchmarks: bool = True, memory: bool = True
) -> RevisionView:
    report = report_for_revision(revision)[0] if planner else None
    items = benchmark_items(revision) if benchmarks else []
    launch = launch_for_revision(revision)
    return RevisionView(
        number=revision.number,
        tag=revision.tag,
        engine=revision.engine,
        engine_version=revision.engine_version,
        served_name=effective_served_name(revision, launch),
        port=revision.port,
        knobs=dict(revision.knobs or {}),
        env=dict(revision.env or {}),
        api_key_secret=revision.api_key_secret,
        hf_token_secret=revision.hf_token_secret,
        message=revision.message,
        author=revision.author.username if revision.author else "",
        created_at=revision.created_at.isoformat(),
        model=model_dict(revision.model_variant),
        planner=report,
        benchmarks=tuple(items),
        argv=tuple(launch.argv) if not launch.error else None,
        served_context=_measured_context(items),
        memory=memory_for_diff(revision) if memory else {},
    )


def changes_between(old: DeploymentRevision, new: DeploymentRevision) -> RevisionDiff:
    return diff_revisions(revision_view(old), revision_view(new))
