"""The pure planner: model architecture + quantization + GPUs + knobs -> fit report.

No Django, no Celery, no httpx, no I/O. Call `plan(PlanRequest(...))`; bad input raises
`PlanInputError`. `what_fits(gpus, models)` renders the "what can this host run" table.
"""

from __future__ import annotations

from serving.planner.findings import Finding, Severity
from serving.planner.fit import plan
from serving.planner.gpus import GpuSpec, catalog_gpu, catalog_host
from serving.planner.inputs import GgufKvFacts, PlanInputError, PlanRequest, WeightFacts
from serving.planner.layouts import layouts, tp_problems, valid_tp_sizes
from serving.planner.report import FitReport
from serving.planner.whatfits import CatalogModel, WhatFitsCell, what_fits

__all__ = [
    "CatalogModel",
    "Finding",
    "FitReport",
    "GgufKvFacts",
    "GpuSpec",
    "PlanInputError",
    "PlanRequest",
    "Severity",
    "WeightFacts",
    "WhatFitsCell",
    "catalog_gpu",
    "catalog_host",
    "layouts",
    "plan",
    "tp_problems",
    "valid_tp_sizes",
    "what_fits",
]
