""" "What can this host run": every catalog model x valid layout x a few context lengths."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serving.arch import ModelArch
from serving.engines.registry import get_adapter
from serving.planner.findings import Severity
from serving.planner.fit import plan
from serving.planner.gpus import GpuSpec
from serving.planner.inputs import GPU_SPLIT_ENGINES, GgufKvFacts, PlanInputError, PlanRequest
from serving.planner.knobs import knob_of
from serving.planner.layouts import layouts

DEFAULT_CONTEXTS = (8192, 32768, 131072)
# Findings that say "runs, but close to the edge" rather than "cannot run".
_TIGHT_CODES = {"kv.concurrency_short"}


@dataclass(frozen=True)
class CatalogModel:
    """One model variant as the table needs it (built from a ModelVariant by the caller)."""

    name: str
    arch: ModelArch
    weights_bytes: int | None  # None: the planner estimates them
    engine: str = "vllm"
    checkpoint_quant: str | None = None
    quant_bits: int | None = None  # with checkpoint_quant, what the planner sizes unrecorded weights by
    quant_group_size: int | None = None
    quantization: str | None = None  # the catalog's label ("awq-int4", "Q6_K_XL")
    gguf: GgufKvFacts | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"kv_cache_dtype": "fp8"}
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WhatFitsCell:
    model: str
    engine: str
    layout: str  # "TP=2 x PP=1" or "layer split over 3 GPUs"
    gpus_used: int
    context: int
    verdict: str  # "fits" | "tight" | "no"
    reason: str  # main finding's message ("" when it simply fits)
    concurrent_full_length: int | None
    kv_pool_tokens: int | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _verdict(report: Any, context: int) -> tuple[str, str]:
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    if errors:
        return "no", errors[0].message
    tight = [f for f in report.findings if f.code in _TIGHT_CODES]
    seqs = report.max_concurrent_full_length
    if tight or (seqs is not None and seqs < 2):
        reason = tight[0].message if tight else f"only {seqs} sequence(s) of {context:,} tokens fit at once"
        return "tight", reason
    return "fits", ""


def what_fits(
    gpus: Sequence[GpuSpec],
    models: Sequence[CatalogModel],
    *,
    contexts: Sequence[int] = DEFAULT_CONTEXTS,
    engine_version: str = "",
    max_num_seqs: int = 4,
) -> list[WhatFitsCell]:
    """One cell per (model, valid layout, context). The planner runs once per cell."""
    gpus = tuple(gpus)
    env_p2p = {"NCCL_P2P_DISABLE": "1"} if any(g.p2p is False for g in gpus) else {}
    cells: list[WhatFitsCell] = []
    for model in models:
        if model.engine in GPU_SPLIT_ENGINES:
            options = [
                (
                    {knob_of(model.engine, "tp"): tp, knob_of(model.engine, "pp"): pp},
                    f"TP={tp} x PP={pp}",
                    tp * pp,
                    gpus,
                )
                for tp, pp in layouts(model.arch, len(gpus))
            ]
        else:
            options = [
                ({}, f"layer split over {n} GPU{'s' if n > 1 else ''}", n, gpus[:n]) for n in range(1, len(gpus) + 1)
            ]
        for layout_knobs, label, n_used, host in options:
            for context in contexts:
                knobs = dict(model.knobs) | layout_knobs
                knobs |= get_adapter(model.engine).context_for(context, max_num_seqs)
                request = PlanRequest(
                    arch=model.arch,
                    engine=model.engine,
                    engine_version=engine_version,
                    gpus=tuple(host),
                    knobs=knobs,
                    env=dict(env_p2p) | dict(model.env),
                    weights_bytes=model.weights_bytes,
                    checkpoint_quant=model.checkpoint_quant,
                    quant_bits=model.quant_bits,
                    quant_group_size=model.quant_group_size,
                    quantization=model.quantization,
                    gguf=model.gguf,
                )
                try:
                    report = plan(request)
                except PlanInputError as exc:
                    cells.append(
                        WhatFitsCell(model.name, model.engine, label, n_used, context, "no", str(exc), None, None)
                    )
                    continue
                verdict, reason = _verdict(report, context)
                cells.append(
                    WhatFitsCell(
                        model.name,
                        model.engine,
                        label,
                        n_used,
                        context,
                        verdict,
                        reason,
                        report.max_concurrent_full_length,
                        report.kv_pool_tokens,
                    )
                )
    return cells
