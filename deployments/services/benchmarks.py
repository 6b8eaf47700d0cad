"""Benchmarks: request a run of a host's active revision, record it, compare runs."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from deployments.benchmarking.profiles import BenchmarkProfile, equivalent_commands, get_profile
from deployments.choices import OperationKind
from deployments.models import BenchmarkRun, DeploymentRevision, Operation, active_revision_of
from hardware.models import Host
from notifications.events import benchmark_event
from notifications.services import notify

from .dispatch import operation_dispatch
from .operations import operation_create


def profile_from_input(
    *,
    name: str | None = None,
    concurrency: list[int] | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    requests: int | None = None,
    request_rate: float | None = None,
    slos: dict[str, float] | None = None,
) -> BenchmarkProfile:
    """A named profile, or a custom one from explicit numbers; ValidationError on bad input.

    `slos` ({"ttft_ms": 500, "tpot_ms": 50, "e2e_ms": ...}) adds goodput: requests/s that met every one.
    """
    try:
        custom = (concurrency, input_tokens, output_tokens, requests, request_rate)
        if name and not any(v is not None for v in custom) and not slos:
            return get_profile(name)
        base = get_profile(name) if name else get_profile("quick")
        data = base.to_dict()
        data["name"] = name or "custom"
        if concurrency is not None:
            data["concurrency"] = list(concurrency)
        if input_tokens is not None:
            data["input_tokens"] = input_tokens
        if output_tokens is not None:
            data["output_tokens"] = output_tokens
        if requests is not None:
            data["num_requests"] = requests
        if request_rate is not None:
            data["request_rate"] = request_rate
        if slos:
            data["slos"] = dict(slos)
        return BenchmarkProfile.from_dict(data)
    except (KeyError, ValueError, TypeError) as exc:
        raise ValidationError({"profile": str(exc).strip("'\"")}) from exc


@transaction.atomic
def benchmark_request(
    *, host: Host, profile: BenchmarkProfile, actor: Any, revision: DeploymentRevision | None = None
) -> Operation:
    """Benchmark what the host serves (its active revision). Runs on the host's own queue."""
    ensure_role(actor, OPERATOR)
    active = active_revision_of(host)
    revision = revision or active
    if revision is None:
        raise ValidationError(f"{host.name} serves no revision yet: switch to one before benchmarking.")
    if active is None or revision.pk != active.pk:
        serving = f"r{active.number}" if active else "nothing"
        raise ValidationError(
            f"r{revision.number} is not what {host.name} serves ({serving}): switch to it first, so the numbers "
            "belong to the revision they are stored under."
        )
    return operation_create(
        kind=OperationKind.BENCHMARK,
        host=host,
        revision=revision,
        params={"profile": profile.to_dict(), "revision": revision.number},
        enqueue=operation_dispatch,
        actor=actor,
    )


def benchmark_run_start(*, op: Operation, gpus: list[dict[str, Any]]) -> BenchmarkRun:
    revision = op.revision
    assert revision is not None
    run, _ = BenchmarkRun.objects.get_or_create(
        operation=op,
        defaults={
            "revision": revision,
            "profile_name": op.params["profile"]["name"],
            "profile": op.params["profile"],
            "engine": revision.engine,
            "engine_version": revision.engine_version,
            "gpus": gpus,
            "status": "running",
        },
    )
    return run


def benchmark_run_record(*, run: BenchmarkRun, result: dict[str, Any]) -> BenchmarkRun:
    """Store the results; raw per-request timings go apart from the per-level aggregates."""
    raw: list[dict[str, Any]] = []
    levels = []
    for level in result.get("levels", []):
        level = dict(level)
        for record in level.pop("requests", []):
            raw.append({"level": level.get("label"), **record})
        levels.append(level)
    run.results = {**{k: v for k, v in result.items() if k != "levels"}, "levels": levels}
    run.raw = raw
    run.status = result.get("status", "failed")
    run.energy_j = result.get("energy_j")
    run.finished_at = timezone.now()
    run.save(update_fields=["results", "raw", "status", "energy_j", "finished_at"])
    notify(benchmark_event(run))  # slower than the previous revision's run: the rules' thresholds decide
    return run


def benchmark_export(run: BenchmarkRun) -> dict[str, Any]:
    """The run as JSON a user can keep: profile, exact revision and engine, GPUs, results, raw."""
    revision = run.revision
    profile = BenchmarkProfile.from_dict(run.profile)
    base_url = f"http://{revision.host.address}:{revision.port}"
    served = (run.results or {}).get("model") or revision.served_name or revision.model_variant.name
    return {
        "host": revision.host.name,
        "revision": revision.number,
        "tag": revision.tag,
        "engine": run.engine,
        "engine_version": run.engine_version,
        "model": revision.model_variant.name,
        "gpus": run.gpus,
        "profile": run.profile,
        "status": run.status,
        "created_at": run.created_at.isoformat(),
        "results": run.results,
        "raw": run.raw,
        "equivalent_commands": equivalent_commands(profile, base_url=base_url, model=served),
    }


def level_summary(level: dict[str, Any]) -> dict[str, Any]:
    """The figures the CLI's --json and the comparison use, per level."""
    keys = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
    summary = {k: {p: (level.get(k) or {}).get(p) for p in ("mean", "p50", "p90", "p99")} for k in keys}
    for k in (
        "output_tokens_per_s",
        "total_tokens_per_s",
        "requests_per_s",
        "completed",
        "failed",
        "goodput_requests_per_s",
        "concurrency",
        "rate",
        "label",
    ):
        summary[k] = level.get(k)
    return summary


def benchmark_summary(run: BenchmarkRun) -> dict[str, Any]:
    results = run.results or {}
    return {
        "id": run.pk,
        "revision": run.revision.number,
        "profile": run.profile_name,
        "status": run.status,
        "levels": [level_summary(level) for level in results.get("levels", [])],
        "energy_j": results.get("energy_j"),
        "avg_power_w": results.get("avg_power_w"),
        "joules_per_output_token": results.get("joules_per_output_token"),
        "tokens_per_wh": results.get("tokens_per_wh"),
        "spec_acceptance_rate": results.get("spec_acceptance_rate"),
        "client_cpu_s_per_1k_tokens": results.get("client_cpu_s_per_1k_tokens"),
        "reason": results.get("reason", ""),
    }


def _rel(old: float | None, new: float | None) -> float | None:
    if old in (None, 0) or new is None:
        return None
    return (new - old) / old


def benchmark_compare(a: BenchmarkRun, b: BenchmarkRun) -> list[dict[str, Any]]:
    """Per matching level (same label), the deltas of the headline figures from run a to run b."""
    levels_b = {lvl.get("label"): lvl for lvl in (b.results or {}).get("levels", [])}
    rows = []
    for la in (a.results or {}).get("levels", []):
        lb = levels_b.get(la.get("label"))
        if lb is None:
            continue
        for key, path in (
            ("output tok/s", ("output_tokens_per_s",)),
            ("requests/s", ("requests_per_s",)),
            ("TTFT p50 ms", ("ttft_ms", "p50")),
            ("TTFT p99 ms", ("ttft_ms", "p99")),
            ("TPOT p50 ms", ("tpot_ms", "p50")),
            ("E2E p90 ms", ("e2e_ms", "p90")),
        ):
            va, vb = la, lb
            for part in path:
                va = (va or {}).get(part) if isinstance(va, dict) else None
                vb = (vb or {}).get(part) if isinstance(vb, dict) else None
            rows.append({"level": la.get("label"), "metric": key, "a": va, "b": vb, "change": _rel(va, vb)})
    ja, jb = (a.results or {}).get("joules_per_output_token"), (b.results or {}).get("joules_per_output_token")
    if ja is not None or jb is not None:
        rows.append({"level": "run", "metric": "J per output token", "a": ja, "b": jb, "change": _rel(ja, jb)})
    return rows
