"""What goes into the planner: the request, GGUF KV facts, and the typed input error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypedDict

from serving.arch import (
    MAX_CONTEXT,
    MAX_CONV_KERNEL,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_NAME,
    MAX_WIDTH,
    ArchFactError,
    ModelArch,
    check_int,
    check_text,
)
from serving.planner.errors import PlanInputError as PlanInputError  # re-exported: callers import it here
from serving.planner.gpus import GpuSpec

ENGINES = ("vllm", "llama.cpp", "ollama", "sglang")
GPU_SPLIT_ENGINES = ("vllm", "sglang")  # tensor/pipeline parallel engines
LAYER_SPLIT_ENGINES = ("llama.cpp", "ollama")  # GGUF engines that split layers over GPUs


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
    def checked(cls, data: Mapping[str, Any]) -> GgufKvFacts:
        """Strict: every fact typed and in range, per-layer lists one entry per layer.

        Raises ArchFactError naming the first bad fact (importers, before anything is stored)."""
        if not isinstance(data, Mapping):
            raise ArchFactError("GGUF facts must be an object", fact="gguf_kv")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ArchFactError(f"{sorted(map(str, unknown))[0]!r} is not a GGUF fact", fact="gguf_kv")
        values: dict[str, Any] = {}
        for name in _GGUF_REQUIRED:
            if data.get(name) is None:
                raise ArchFactError(f"the GGUF facts lack {name}", fact=name)
        values["architecture"] = check_text(data["architecture"], most=MAX_NAME, label="architecture")
        for name, (least, most) in _GGUF_INTS.items():
            if data.get(name) is not None:
                values[name] = check_int(data[name], least=least, most=most, label=name)
        n_layer = values["n_layer"]
        for name, kind in _GGUF_PER_LAYER.items():
            raw = data.get(name)
            if raw is None or (name != "head_count_kv" and raw in ([], ())):
                continue
            if not isinstance(raw, list | tuple) or len(raw) != n_layer:
                raise ArchFactError(f"{name} must list one value for each of the {n_layer:,} layers", fact=name)
            if kind is bool:
                if not all(isinstance(v, bool) for v in raw):
                    raise ArchFactError(f"{name} must list true or false per layer", fact=name)
                values[name] = tuple(raw)
            else:
                values[name] = tuple(check_int(v, least=0, most=MAX_HEADS, label=name) for v in raw)
        return cls(**values)

    @classmethod
    def from_dict(cls, data: object) -> GgufKvFacts | None:
        """Lenient: whatever is stored -> the facts that are plausible, bad optional ones dropped;
        None (unknown: the planner works from the ModelArch) when a required one is unusable.
        Never raises."""
        if not isinstance(data, Mapping):
            return None
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in list(values):
            try:
                cls.checked({**{k: data.get(k) for k in _GGUF_REQUIRED}, name: values[name]})
            except ArchFactError:
                if name in _GGUF_REQUIRED:
                    return None
                values.pop(name)
            except (TypeError, ValueError):
                return None
        try:
            return cls.checked(values)
        except (ArchFactError, TypeError, ValueError):
            return None


_GGUF_REQUIRED = ("architecture", "n_layer", "head_count_kv", "key_length", "value_length")
_GGUF_INTS: dict[str, tuple[int, int]] = {
    "n_layer": (1, MAX_LAYERS),
    "key_length": (0, MAX_HEAD_DIM),
    "value_length": (0, MAX_HEAD_DIM),
    "sliding_window": (1, MAX_CONTEXT),
    "context_length": (1, MAX_CONTEXT),
    "file_type": (0, 1_023),
    "file_size": (0, 2**50),  # 1 PiB
    "ssm_conv_kernel": (1, MAX_CONV_KERNEL),
    "ssm_inner_size": (1, MAX_WIDTH),
    "ssm_state_size": (1, MAX_HEAD_DIM),
    "ssm_group_count": (0, MAX_HEADS),
}
_GGUF_PER_LAYER: dict[str, type] = {"head_count_kv": int, "swa_layers": bool, "recurrent_layers": bool}


class WeightFacts(TypedDict):
    """What the planner knows of a checkpoint's weights: PlanRequest's fields of the same names."""

    weights_bytes: int | None
    checkpoint_quant: str | None
    quant_bits: int | None
    quant_group_size: int | None
    quantization: str | None
    gguf: GgufKvFacts | None


@dataclass(frozen=True)
class PlanRequest:
    """Everything the planner judges. Knob names are the engine's flags with underscores."""

    arch: ModelArch
    engine: str  # "vllm" | "llama.cpp" | "ollama" | "sglang"
    gpus: tuple[GpuSpec, ...]
    engine_version: str = ""  # "" = latest known
    latest_here: bool = False  # engine_version is what "latest" runs on the host (not a pin): messages say so
    knobs: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    weights_bytes: int | None = None  # checkpoint weights on disk (GGUF: file size)
    checkpoint_quant: str | None = None  # quantization_config.quant_method, e.g. "compressed-tensors"
    quant_bits: int | None = None
    quant_group_size: int | None = None  # AWQ/GPTQ group size (-1: per channel)
    quantization: str | None = None  # the catalog's label: "bf16", "Q4_K_M", "awq-int4"
    gguf: GgufKvFacts | None = None
    vision: bool | None = None  # image input wanted; None = the model's default
    recommended_reasoning_parser: str | None = None
    recommended_tool_parser: str | None = None
    min_engine_versions: Mapping[str, str] = field(default_factory=dict)  # engine -> version
    # The engine venv's distributions, as its host read them: {"transformers": "4.57.1"}; `packages_absent`
    # the ones the host looked for there and did not find. A package in neither is unknown.
    packages: Mapping[str, str] = field(default_factory=dict)
    packages_absent: tuple[str, ...] = ()
