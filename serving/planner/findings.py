"""Findings: what the planner tells a person, each with a stable code and a fix."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"  # blocks a launch: it would fail, hang or OOM
    WARNING = "warning"  # it runs, but not as the person expects
    INFO = "info"  # worth knowing (costs, idle capacity)


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # stable, dotted: "tp.attention_heads", "weights.oom", ...
    message: str  # plain words, with the numbers
    fix: str = ""  # a concrete suggestion

    def to_dict(self) -> dict[str, str]:
        return {"severity": str(self.severity), "code": self.code, "message": self.message, "fix": self.fix}


# Stable codes (tests and the UI key on these).
TP_ATTENTION_HEADS = "tp.attention_heads"
TP_KV_HEADS = "tp.kv_heads"
TP_HIDDEN_SIZE = "tp.hidden_size"
TP_INTERMEDIATE = "tp.intermediate_size"
TP_LINEAR_HEADS = "tp.linear_heads"
PP_LAYERS = "pp.layers"
PARALLEL_TOO_MANY_GPUS = "parallel.too_many_gpus"
VLLM_CPU = "vllm.cpu"  # vLLM planned on a CPU-only host: its CPU build's memory model
VLLM_CPU_KV_UNSET = "vllm.cpu_kv_unset"  # ... without a KV cache size: it takes a share of the RAM
VLLM_CPU_BLOCK_SIZE = "vllm.cpu_block_size"  # ... with a block size its CPU attention refuses
VLLM_CPU_KV_SPACE = "vllm.cpu_kv_space"  # ... with a VLLM_CPU_KVCACHE_SPACE it cannot start with
GPUS_IDLE = "gpus.idle"
WEIGHTS_OOM = "weights.oom"
KV_NO_ROOM = "kv.no_room"
KV_CONTEXT_UNBACKED = "kv.context_unbacked"
KV_CONCURRENCY_SHORT = "kv.concurrency_short"
CONTEXT_BEYOND_NATIVE = "context.beyond_native"
HYBRID_BATCHED_TOKENS = "hybrid.batched_tokens_below_block"
QUANT_FLAG_MISMATCH = "quant.flag_mismatch"
ENGINE_UNSUPPORTED_ARCH = "engine.unsupported_arch"
ENGINE_VERSION_FLOOR = "engine.version_floor"
ENGINE_PACKAGE_FLOOR = "engine.package_floor"
ENGINE_PACKAGE_CEILING = "engine.package_ceiling"  # a package too new for what the engine does with this model
ENGINE_GGUF_REMOVED = "engine.gguf_removed"  # a GGUF on a release without a GGUF loader
ENGINE_GGUF_CPU_KERNELS = "engine.gguf_cpu_kernels"  # a quantized GGUF on a CPU build without its kernels
ENGINE_GGUF_CONFIG = "engine.gguf_config"  # a GGUF whose loader reads the model's config.json beside the file
VISION_NO_MMPROJ = "vision.no_mmproj"
PARSER_REASONING_MISSING = "parser.reasoning_missing"
PARSER_TOOL_WRONG = "parser.tool_wrong"
GPU_BLACKWELL_ATTENTION = "gpu.blackwell_attention"
ENV_ATTENTION_BACKEND_IGNORED = "env.attention_backend_ignored"
GPU_P2P_HANG = "gpu.p2p_hang"
MTP_COST = "mtp.cost"
MTP_NO_HEAD = "mtp.no_head"
LLAMA_QUANT_V_NEEDS_FA = "llama.quantized_v_needs_flash_attn"
ARCH_INCOMPLETE = "arch.incomplete"
WEIGHTS_ESTIMATED = "weights.estimated"
WEIGHTS_UNKNOWN = "weights.unknown"
