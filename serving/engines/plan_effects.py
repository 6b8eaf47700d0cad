"""What each knob does to the memory plan: the `plan` of every `KnobSpec`.

An adapter's knob table is the one list of the knobs an engine takes; each spec names here what
its value changes in the planner's engine-neutral settings (`serving.planner.knobs.Settings`,
written into a dict by field name), or says `NO_EFFECT`. The planner walks the adapter's table and
keeps only the maths, so a knob the adapter accepts can never be one the planner refuses.

An effect gets the knob's value as its adapter normalised it (`CheckedAdapter.knob_value`: "0.95"
is 0.95, a choice is one of the engine's), never the value as stored: what the adapter refuses the
planner never reads, and what it accepts the planner reads as the engine does. Only a field inside
a JSON knob is read here (the adapter checks the object, not what its fields mean), raising
EngineConfigError naming it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from serving.engines.base import EngineConfigError, PlanEffect

# vLLM CacheDType (vllm/config/cache.py) -> bytes per element; "auto" = model dtype.
VLLM_KV_DTYPES: dict[str, float | None] = {
    "auto": None,
    "float16": 2.0,
    "fp16": 2.0,
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float32": 4.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_ds_mla": 1.0,
}
# SGLang's --kv-cache-dtype (srt/server_args.py); fp4 packs two values a byte, and the block
# formats add a one-byte scale per block (mxfp8: 32 values; nvfp4, fp4_mx_block16: 16 values).
SGLANG_KV_DTYPES: dict[str, float | None] = {
    "auto": None,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "mxfp8": 1 + 1 / 32,
    "nvfp4": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16,
    "fp4_e2m1": 0.5,
}
# llama.cpp cache types (common/arg.cpp kv_cache_types) -> bytes per element (ggml block sizes:
# q8_0 = 34 B / 32, q4_0 = 18 B / 32, q4_1 = 20 B / 32, q5_0 = 22 B / 32, q5_1 = 24 B / 32,
# iq4_nl = 18 B / 32; ggml/src/ggml.c type_traits).
LLAMA_CACHE_TYPES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}
OLLAMA_KV_TYPES = ("f16", "q8_0", "q4_0")  # Ollama envconfig
# vLLM's --dtype (vllm/config/model.py ModelDType, _STR_DTYPE_TO_TORCH_DTYPE) -> bytes of the dtype
# the model runs in, its weights and (kv_cache_dtype auto) its KV cache; "auto" = the checkpoint's,
# float32 run in 16 bits (the adapter's float32_as_16bit).
VLLM_DTYPES: dict[str, int | None] = {"auto": None, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4}
MAMBA_DTYPES: dict[str, int | None] = {"auto": None, "float32": 4, "float16": 2, "bfloat16": 2}


def no_effect(out: dict[str, Any], name: str, value: object) -> None:
    """A knob that changes no memory (ports, names, parsers' switches, sampling, logging...)."""


NO_EFFECT: PlanEffect = no_effect


def _field_number(name: str, value: object, *, whole: bool) -> float:
    """A number inside a JSON knob (a field the adapter checks as JSON, not as a number), above 0;
    EngineConfigError naming the field."""
    number: float | None = None
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = int(str(value).strip()) if whole else float(value)
        except ValueError:
            number = None
    if number is None or not 0 < number < 1e9:
        kind = "a whole number" if whole else "a number"
        raise EngineConfigError(f"{name} must be {kind} above 0, not {value!r}", field=name)
    return number


# ---- effects ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sets:
    """The knob's value is the planner's setting `setting` (through `read` where the engine's value
    is not yet the setting's: "32k" -> 32,000 tokens). It names the setting, so the planner can
    say which knob of an engine sets what (its findings name the engine's own knob)."""

    setting: str
    read: Callable[[Any], Any] | None = None

    def __call__(self, out: dict[str, Any], name: str, value: object) -> None:
        out[self.setting] = value if self.read is None else self.read(value)


def sets(setting: str, read: Callable[[Any], Any] | None = None) -> Sets:
    return Sets(setting, read)


def kv_dtype(table: Mapping[str, float | None]) -> PlanEffect:
    """A KV cache dtype (one of the engine's choices): bytes per element for K and V from the
    engine's table (None = the model's)."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out["kv_dtype"] = str(value)
        out["kv_bytes_k"] = out["kv_bytes_v"] = table[str(value)]

    return apply


def quantization(out: dict[str, Any], name: str, value: object) -> None:
    """The checkpoint's quantization method as the engine is given it ("none": detected from the
    checkpoint); the planner judges only the methods it knows (rules.py)."""
    out["quantization"] = None if value in ("none", "auto") else str(value)


def speculative_config(out: dict[str, Any], name: str, value: dict[str, Any]) -> None:
    """vLLM's --speculative-config: the method and the tokens drafted a step."""
    out["spec_method"] = str(value.get("method") or "draft_model").lower()  # the adapter asks one of the two
    tokens = value.get("num_speculative_tokens", 1)
    out["spec_tokens"] = int(_field_number(f"{name}.num_speculative_tokens", tokens, whole=True))


def speculative_algorithm(out: dict[str, Any], name: str, value: object) -> None:
    """SGLang's --speculative-algorithm (NEXTN is an MTP head)."""
    out["spec_method"] = "mtp" if value == "NEXTN" else str(value).lower()
    out.setdefault("spec_tokens", 1)


def cpu_offload(out: dict[str, Any], name: str, value: float) -> None:
    """GiB of weights kept in CPU memory, off each GPU."""
    out["cpu_offload_bytes"] = int(value * (1 << 30))


def config_overrides(out: dict[str, Any], name: str, value: dict[str, Any]) -> None:
    """Overrides of the model's config (vLLM hf_overrides, SGLang json_model_override_args): a
    RoPE scaling factor and a native context stretch the context the model serves."""
    nested = value.get("text_config")
    text_cfg: dict[str, Any] = nested if isinstance(nested, dict) else {}
    for source in (value, text_cfg):
        rope = source.get("rope_scaling") or source.get("rope_parameters")
        if isinstance(rope, dict) and rope.get("factor") and rope.get("rope_type", rope.get("type")) != "default":
            out["rope_factor"] = _field_number(f"{name}.rope_scaling.factor", rope["factor"], whole=False)
        if source.get("max_position_embeddings"):
            field = f"{name}.max_position_embeddings"
            out["native_override"] = int(_field_number(field, source["max_position_embeddings"], whole=True))


def model_dtype(table: Mapping[str, int | None]) -> PlanEffect:
    """The dtype the model runs in (one of the engine's choices): bytes per element of its weights
    and activations (None = the engine's default for the checkpoint)."""
    return sets("dtype_bytes", lambda value: table[value])


def mamba_dtype(setting: str) -> PlanEffect:
    """A recurrent state's dtype (one of the engine's choices): bytes per element (None = the model's)."""
    return sets(setting, lambda value: MAMBA_DTYPES[value])


def cache_type(setting: str) -> PlanEffect:
    """llama.cpp's -ctk / -ctv (one of its cache types): bytes per element of the K or V cache."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[setting] = LLAMA_CACHE_TYPES[str(value)]
        out[setting + "_name"] = str(value)

    return apply


def ollama_kv_type(out: dict[str, Any], name: str, value: object) -> None:
    """OLLAMA_KV_CACHE_TYPE: one type for K and V."""
    out["kv_bytes_k"] = out["kv_bytes_v"] = LLAMA_CACHE_TYPES[str(value)]
    out["kv_bytes_k_name"] = out["kv_bytes_v_name"] = str(value)


def gpu_layers(out: dict[str, Any], name: str, value: int | str) -> None:
    """-ngl: layers offloaded to the GPUs (None = all: auto, all)."""
    out["n_gpu_layers"] = value if isinstance(value, int) else None


def flash_attn(out: dict[str, Any], name: str, value: object) -> None:
    """Flash attention as the adapter reads it: llama.cpp's on, off or auto; Ollama's "1" or "0"."""
    out["flash_attn"] = {"1": "on", "0": "off"}.get(str(value), str(value))


def tensor_split(out: dict[str, Any], name: str, value: str) -> None:
    """llama.cpp's -ts ("3,1"): each GPU's share of the offloaded layers (all zero: by free memory)."""
    out["tensor_split"] = tuple(float(part) for part in value.split(","))
