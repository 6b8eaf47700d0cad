"""What goes into the planner: the request, GGUF KV facts, and the typed input error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deployments.arch import ModelArch
from deployments.planner.gpus import GpuSpec

ENGINES = ("vllm", "llama.cpp", "ollama", "sglang")
GPU_SPLIT_ENGINES = ("vllm", "sglang")  # tensor/pipeline parallel engines
LAYER_SPLIT_ENGINES = ("llama.cpp", "ollama")  # GGUF engines that split layers over GPUs


class PlanInputError(ValueError):
    """Bad input to the planner (unknown knob, bad value, unknown engine). CLI exit code 2.

    `field` names the knob or input so a form can show the message beside it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class GgufKvFacts:
    """What llama.cpp's own KV estimate needs, read from a GGUF header.

    Per-layer tuples have one entry per block (`{arch}.block_count`). A layer with
    head_count_kv 0 keeps no KV cache (recurrent layer in hybrids).
    """

    architecture: str  # general.architecture, e.g. "gemma3"
    n_layer: int
    head_count_kv: tuple[int, ...]
    key_length: int
    value_length: int
    swa_layers: tuple[bool, ...] = ()  # True = sliding-window layer; () = none
    sliding_window: int | None = None
    context_length: int | None = None  # n_ctx_train
    file_type: int | None = None  # general.file_type (llama_ftype)
    file_size: int | None = None  # bytes on disk (all shards)
    # recurrent state (llama-hparams.cpp n_embd_r/n_embd_s), per recurrent layer
    ssm_conv_kernel: int | None = None
    ssm_inner_size: int | None = None
    ssm_state_size: int | None = None
    ssm_group_count: int | None = None
    recurrent_layers: tuple[bool, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GgufKvFacts:
        values = dict(data)
        for key in ("head_count_kv", "swa_layers", "recurrent_layers"):
            if key in values:
                values[key] = tuple(values[key] or ())
        return cls(**values)


@dataclass(frozen=True)
class PlanRequest:
    """Everything the planner judges. Knob names are the engine's flags with underscores."""

    arch: ModelArch
    engine: str  # "vllm" | "llama.cpp" | "ollama" | "sglang"
    gpus: tuple[GpuSpec, ...]
    engine_version: str = ""  # "" = latest known
    knobs: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    weights_bytes: int | None = None  # checkpoint weights on disk (GGUF: file size)
    checkpoint_quant: str | None = None  # quantization_config.quant_method, e.g. "compressed-tensors"
    quant_bits: int | None = None
    gguf: GgufKvFacts | None = None
    vision: bool | None = None  # image input wanted; None = the model's default
    recommended_reasoning_parser: str | None = None
    recommended_tool_parser: str | None = None
    min_engine_versions: Mapping[str, str] = field(default_factory=dict)  # engine -> version
    packages: Mapping[str, str] = field(default_factory=dict)  # e.g. {"transformers": "4.57.1"}
