"""The planner's RAM figure for a llama.cpp revision of a GGUF on a CPU-only host (bench and tests)."""

from __future__ import annotations

from typing import Any

from deployments.importers.gguf_header import read_gguf_header
from serving.planner import PlanRequest, plan
from serving.planner.report import FitReport


def cpu_plan(knobs: dict[str, Any], model: str) -> FitReport:
    """plan() for `model` (a GGUF path) with these llama.cpp knobs on a host with no GPU."""
    imported = read_gguf_header(model)
    request = PlanRequest(
        arch=imported.arch, engine="llama.cpp", gpus=(), knobs=knobs, weights_bytes=imported.file_size, gguf=imported.kv
    )
    return plan(request)


def planner_ram(knobs: dict[str, Any], model: str) -> dict[str, int]:
    """The planner's host-RAM parts and "total" (FitReport.ram_parts)."""
    return dict(cpu_plan(knobs, model).ram_parts)
