"""Benchmarks: request a run of a host's active revision, record it, compare runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from deployments.choices import OperationKind
from deployments.models import BenchmarkRun, DeploymentRevision, Operation, active_revision_of
from deployments.selectors.benchmarks import previous_benchmark_run
from hardware.models import Host
from notifications.events import benchmark_event
from notifications.services import notify
from serving.benchmarking import stats
from serving.benchmarking.profiles import BenchmarkProfile, equivalent_commands, get_profile

from .dispatch import operation_dispatch
from .operations import operation_create

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


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
        # The numbers given, by the profile field each sets (from_dict makes concurrency a tuple).
        given = {
            "concurrency": concurrency,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "num_requests": requests,
            "request_rate": request_rate,
        }
        custom = {field: value for field, value in given.items() if value is not None}
        if name and not custom and not slos:
            return get_profile(name)
        data = {**get_profile(name or "quick").to_dict(), **custom, "name": name or "custom"}
        if slos:
            data["slos"] = dict(slos)
        return BenchmarkProfile.from_dict(data)
    except (KeyError, ValueError, TypeError) as exc:
        raise ValidationError({"profile": str(exc).strip("'\"")}) from exc


@transaction.atomic
def benchmark_request(
    *, host: Host, profile: BenchmarkProfile, actor: AbstractUser | None, revision: DeploymentRevision | None = None
) -> Operation:
    """Benchmark what the host serves (its active revision). Runs on the host's own queue."""
    ensure_role(actor, OPERATOR)
    return benchmark_enqueue(host=host, profile=profile, revision=revision, actor=actor)


def benchmark_enqueue(
    *,
    host: Host,
    profile: BenchmarkProfile,
    actor: AbstractUser | None,
    revision: DeploymentRevision | None = None,
    params: dict[str, Any] | None = None,
) -> Operation:
    """benchmark_request without the role check, for a run the panel queues on someone's behalf
    (a switch's benchmark gate, authorised when the switch was asked for). `params` adds to the
    operation's own."""
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
        params={**(params or {}), "profile": profile.to_dict(), "revision": revision.number},
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
    # slower than the previous revision's run: the rules' thresholds decide
    notify(benchmark_event(run, previous_benchmark_run(run)))
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
    keys = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "decode_tokens_per_s", "engine_decode_tokens_per_s")
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
        "profile_label": run.profile_label,
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


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _samples(run: BenchmarkRun, label: Any, sample: Callable[[dict[str, Any]], float | None]) -> list[float]:
    """One figure per successful request of a level, from the raw timings the run kept."""
    out = []
    for record in run.raw if isinstance(run.raw, list) else []:
        if isinstance(record, dict) and record.get("level") == label and record.get("ok"):
            value = _number(sample(record))
            if value is not None:
                out.append(value)
    return out


def _per_s(record: dict[str, Any], count: Any) -> float | None:
    e2e, n = _number(record.get("e2e_ms")), _number(count)
    return n / (e2e / 1000.0) if e2e and n is not None else None


def _spread(level: dict[str, Any], key: str) -> float | None:
    """p50..p90 of one latency of a level, in its own unit."""
    figures = level.get(key) if isinstance(level.get(key), dict) else {}
    p50, p90 = _number(figures.get("p50")), _number(figures.get("p90"))
    return p90 - p50 if p50 is not None and p90 is not None else None


def _relative_spread(level: dict[str, Any]) -> float | None:
    """The end-to-end latency's p50..p90 spread relative to its p50: how much a stream's rate varies."""
    spread = _spread(level, "e2e_ms")
    p50 = _number((level.get("e2e_ms") or {}).get("p50")) if isinstance(level.get("e2e_ms"), dict) else None
    return spread / p50 if spread is not None and p50 else None


# (row, path to the figure in a level, per-request sample, the latency whose spread is its noise)
_COMPARED: tuple[tuple[str, tuple[str, ...], Callable[[dict[str, Any]], float | None], str | None], ...] = (
    ("output tok/s", ("output_tokens_per_s",), lambda r: _per_s(r, r.get("output_tokens")), None),
    ("requests/s", ("requests_per_s",), lambda r: _per_s(r, 1), None),
    ("TTFT p50 ms", ("ttft_ms", "p50"), lambda r: r.get("ttft_ms"), "ttft_ms"),
    ("TTFT p99 ms", ("ttft_ms", "p99"), lambda r: r.get("ttft_ms"), "ttft_ms"),
    ("TPOT p50 ms", ("tpot_ms", "p50"), lambda r: r.get("tpot_ms"), "tpot_ms"),
    ("E2E p90 ms", ("e2e_ms", "p90"), lambda r: r.get("e2e_ms"), "e2e_ms"),
)


def _within_noise(
    a: BenchmarkRun, b: BenchmarkRun, la: dict[str, Any], lb: dict[str, Any], compared: tuple[Any, ...]
) -> tuple[bool | None, str]:
    """Whether a row's change is within the two runs' own noise, and on what that rests."""
    _, path, sample, latency = compared
    va, vb = (_number(_dig(level, path)) for level in (la, lb))
    samples_a, samples_b = _samples(a, la.get("label"), sample), _samples(b, lb.get("label"), sample)
    if latency is not None:
        spreads = [_spread(level, latency) for level in (la, lb)]
    else:  # a throughput: its noise is a stream's, the end-to-end latency's relative spread
        relative = [_relative_spread(level) for level in (la, lb)]
        spreads = [r * va for r in relative if r is not None and va is not None]
    spread = max((x for x in spreads if x is not None), default=None)
    noise = stats.within_noise(va, vb, samples_a=samples_a, samples_b=samples_b, spread=spread)
    if noise is None:
        return None, ""
    if stats.rank_sum_z(samples_a, samples_b) is not None:
        return noise, f"rank-sum test on {len(samples_a)} + {len(samples_b)} requests"
    return noise, "the runs' p50..p90 spread"


def _dig(level: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = level
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def benchmark_compare(a: BenchmarkRun, b: BenchmarkRun) -> list[dict[str, Any]]:
    """Per matching level (same label), the deltas of the headline figures from run a to run b,
    each with both sides' sample size (completed requests) and whether the change is within the
    runs' own noise (`noise`: True, False, or None when nothing tells; `noise_basis` says how)."""
    levels_b = {lvl.get("label"): lvl for lvl in (b.results or {}).get("levels", [])}
    rows = []
    for la in (a.results or {}).get("levels", []):
        lb = levels_b.get(la.get("label"))
        if lb is None:
            continue
        for compared in _COMPARED:
            va, vb = _dig(la, compared[1]), _dig(lb, compared[1])
            noise, basis = _within_noise(a, b, la, lb, compared)
            rows.append(
                {
                    "level": la.get("label"),
                    "metric": compared[0],
                    "a": va,
                    "b": vb,
                    "change": _rel(va, vb),
                    "n_a": la.get("completed"),
                    "n_b": lb.get("completed"),
                    "noise": noise,
                    "noise_basis": basis,
                }
            )
    ja, jb = (a.results or {}).get("joules_per_output_token"), (b.results or {}).get("joules_per_output_token")
    if ja is not None or jb is not None:
        rows.append(
            {
                "level": "run",
                "metric": "J per output token",
                "a": ja,
                "b": jb,
                "change": _rel(ja, jb),
                "n_a": None,
                "n_b": None,
                "noise": None,
                "noise_basis": "",
            }
        )
    return rows
