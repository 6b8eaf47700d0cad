"""Benchmarks: start one on what a host serves, follow it, read and compare results."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from api.schemas import OPERATION_QUEUED, BenchmarkCompareOut, BenchmarkIn, BenchmarkOut, Error
from api.serialize import benchmark_dict, operation_dict
from controlpanel.roles import OPERATOR, VIEWER
from deployments.models import BenchmarkRun
from deployments.services.benchmarks import benchmark_compare, benchmark_request, profile_from_input

from . import actor, host_for, row_or_404

host_router = Router(tags=["benchmarks"])
router = Router(tags=["benchmarks"])


def _run(run_id: int) -> BenchmarkRun:
    return row_or_404(BenchmarkRun.objects.select_related("revision__host"), run_id, f"No benchmark run #{run_id}.")


@host_router.post(
    "{name}/benchmarks/",
    response=OPERATION_QUEUED,
    summary="Benchmark what the host serves; answers with the operation (its `benchmark` is the run's id)",
)
def benchmark_start(request: HttpRequest, name: str, payload: BenchmarkIn) -> Status:
    user, host = host_for(request, name, OPERATOR)
    profile = profile_from_input(
        name=payload.profile,
        concurrency=payload.concurrency,
        input_tokens=payload.input_tokens,
        output_tokens=payload.output_tokens,
        requests=payload.requests,
        request_rate=payload.request_rate,
        slos=payload.slos,
    )
    return Status(202, operation_dict(benchmark_request(host=host, profile=profile, actor=user)))


@host_router.get("{name}/benchmarks/", response={200: list[BenchmarkOut], 404: Error}, summary="A host's runs")
def benchmark_list(request: HttpRequest, name: str) -> list[dict[str, Any]]:
    _, host = host_for(request, name, VIEWER)
    runs = BenchmarkRun.objects.filter(revision__host=host).select_related("revision__host").order_by("-created_at")
    return [benchmark_dict(r) for r in runs[:200]]


@router.get("{run_id}/", response={200: BenchmarkOut, 404: Error}, summary="One run with its results")
def benchmark_get(request: HttpRequest, run_id: int) -> dict[str, Any]:
    actor(request, VIEWER)
    return benchmark_dict(_run(run_id))


@router.get(
    "compare/{a}/{b}/",
    response={200: BenchmarkCompareOut, 404: Error},
    summary="Per concurrency level, the headline figures from run a to run b and their relative change",
)
def benchmark_compare_runs(request: HttpRequest, a: int, b: int) -> dict[str, Any]:
    actor(request, VIEWER)
    return {"a": a, "b": b, "rows": benchmark_compare(_run(a), _run(b))}
