"""The fit report (what plan() returns) and the computed context the rules read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from serving.engines.registry import get_adapter
from serving.planner.findings import Finding, Severity
from serving.planner.gpus import GpuSpec
from serving.planner.inputs import PlanRequest
from serving.planner.knobs import Settings
from serving.planner.kv import LayerCounts
from serving.planner.memory import HostRam, Overheads


@dataclass(frozen=True)
class FitReport:
    """How a model and its knobs fit the GPUs. Byte counts are ints; None = unknown."""

    engine: str
    tp: int
    pp: int
    gpus_used: int
    gpus_present: int
    weights_bytes_per_gpu: int | None
    kv_bytes_per_token: int | None  # all GPUs together
    kv_bytes_per_token_per_gpu: int | None
    state_bytes_per_sequence_per_gpu: int | None  # GDN/Mamba + sliding-window, constant per sequence
    kv_pool_bytes_per_gpu: int | None
    kv_pool_tokens: int | None
    kv_cache_bytes: int | None  # KV memory the engine allocates, all GPUs
    max_model_len: int | None
    max_concurrent_full_length: int | None
    max_context_one_sequence: int | None
    max_num_seqs: int | None
    block_size: int | None
    overheads_per_gpu: dict[str, int] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    # Set when no checkpoint size was known and the weights were estimated from the architecture.
    weights_estimate: dict[str, Any] | None = None
    layout: str = ""  # in the engine's own words (layouts.describe_layout)
    # A CPU-only llama.cpp layout: the host RAM the engine holds once serving (memory.HostRam: weights,
    # KV cache, compute and output buffers, the process's own; the prompt cache's limit beside it).
    ram_bytes: int | None = None
    ram_parts: dict[str, int] = field(default_factory=dict)

    @property
    def has_errors(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)

    @property
    def gpu_utilisation(self) -> float:
        return self.gpus_used / self.gpus_present if self.gpus_present else 0.0

    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def finding(self, code: str) -> Finding | None:
        return next((f for f in self.findings if f.code == code), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "tensor_parallel_size": self.tp,
            "pipeline_parallel_size": self.pp,
            "gpus_used": self.gpus_used,
            "gpus_present": self.gpus_present,
            "gpu_utilisation": round(self.gpu_utilisation, 4),
            "weights_bytes_per_gpu": self.weights_bytes_per_gpu,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "state_bytes_per_sequence_per_gpu": self.state_bytes_per_sequence_per_gpu,
            "kv_pool_bytes_per_gpu": self.kv_pool_bytes_per_gpu,
            "kv_pool_tokens": self.kv_pool_tokens,
            "kv_cache_bytes": self.kv_cache_bytes,
            "max_model_len": self.max_model_len,
            "max_concurrent_full_length": self.max_concurrent_full_length,
            "max_context_one_sequence": self.max_context_one_sequence,
            "max_num_seqs": self.max_num_seqs,
            "concurrency_knob": get_adapter(self.engine).concurrency_knob,  # what max_num_seqs is called there
            "block_size": self.block_size,
            "overheads_per_gpu": dict(self.overheads_per_gpu),
            "findings": [f.to_dict() for f in self.findings],
            "has_errors": self.has_errors,
            "weights_estimate": dict(self.weights_estimate) if self.weights_estimate else None,
            "layout": self.layout,
            "ram_bytes": self.ram_bytes,
            "ram_parts": dict(self.ram_parts),
        }


@dataclass
class Context:
    """Everything computed for one request; the rules read it and add findings."""

    request: PlanRequest
    settings: Settings
    gpus: tuple[GpuSpec, ...]  # the GPUs the engine can see
    gpus_present: int
    used: tuple[GpuSpec, ...] = ()  # the GPUs the layout occupies
    counts: LayerCounts | None = None
    gpu_memory: int = 0  # per GPU (the smallest used GPU)
    budget_per_gpu: int | None = None  # memory the engine may use per GPU
    weights_per_gpu: int | None = None
    overheads: Overheads = field(default_factory=Overheads)
    per_token_gpu: float | None = None
    per_token_total: float | None = None
    state_per_seq_gpu: int = 0
    pool_per_gpu: int | None = None
    block: int = 1
    max_model_len: int | None = None
    native_context: int | None = None
    max_num_seqs: int | None = None
    batched_tokens: int | None = None
    hybrid_block: int | None = None
    full_len_seqs: int | None = None
    max_ctx_one: int | None = None
    pool_tokens: int | None = None
    kv_cache_bytes: int | None = None
    vision_on: bool = False
    weights_estimate: Any = None  # planner.weights.WeightsEstimate when the weights were estimated
    host_ram: HostRam | None = None  # a CPU-only layout's host RAM (llama.cpp, vLLM's CPU build)
    findings: list[Finding] = field(default_factory=list)

    def add(self, severity: Severity, code: str, message: str, fix: str = "") -> None:
        self.findings.append(Finding(severity, code, message, fix))
