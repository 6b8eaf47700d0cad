"""What each knob does to the memory plan: the `plan` of every `KnobSpec`.

An adapter's knob table is the one list of the knobs an engine takes; each spec names here what
its value changes in the planner's engine-neutral settings (`serving.planner.knobs.Settings`,
written into a dict by field name), or says `NO_EFFECT`. The planner walks the adapter's table and
keeps only the maths, so a knob the adapter accepts can never be one the planner refuses.

An effect reads the knob's value as stored (Ansible writes "0.95") and raises EngineConfigError
naming the knob when it cannot read it; the planner reports that as its input error. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
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
MAMBA_DTYPES: dict[str, int | None] = {"auto": None, "float32": 4, "float16": 2, "bfloat16": 2}
QUANTIZATIONS = frozenset(
    {
        "awq",
        "awq_marlin",
        "gptq",
        "gptq_marlin",
        "fp8",
        "compressed-tensors",
        "mxfp4",
        "modelopt",
        "modelopt_fp4",
        "moe_wna16",
        "bitsandbytes",
        "gguf",
        "fbgemm_fp8",
        "ptpc_fp8",
        "auto-round",
        "inc",
        "quark",
        "torchao",
        "experts_int8",
    }
)


def no_effect(out: dict[str, Any], name: str, value: object) -> None:
    """A knob that changes no memory (ports, names, parsers' switches, sampling, logging...)."""


NO_EFFECT: PlanEffect = no_effect


# ---- value readers (EngineConfigError naming the knob) ---------------------------------------


def _error(message: str, name: str) -> EngineConfigError:
    return EngineConfigError(message, field=name)


def read_int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise _error(f"{name} must be a whole number, not {value!r}", name)
    try:
        number = value if isinstance(value, int) else int(str(value).strip())
    except ValueError:
        raise _error(f"{name} must be a whole number, not {value!r}", name) from None
    if number < minimum:
        raise _error(f"{name} must be at least {minimum}, not {number}", name)
    return number


def read_float(name: str, value: Any, *, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise _error(f"{name} must be a number, not {value!r}", name) from None
    if not (low < number <= high):
        raise _error(f"{name} must be in ({low}, {high}], not {number}", name)
    return number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def read_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _error(f"{name} must be true or false, not {value!r}", name)


def read_text(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | int | float):
        raise _error(f"{name} must be text, not {value!r}", name)
    text = str(value).strip()
    return text or None


def read_json_object(name: str, value: object) -> dict[str, Any] | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise _error(f"{name} is not valid JSON: {exc.msg}", name) from None
        if isinstance(parsed, dict):
            return parsed
    raise _error(f"{name} must be a JSON object, not {value!r}", name)


def read_choice(name: str, value: object, choices: Mapping[str, Any] | frozenset[str] | tuple[str, ...]) -> str:
    text = str(value).strip().lower() if value is not None else ""
    if text not in choices:
        raise _error(f"{name}={value!r} is not one of: {', '.join(sorted(choices))}", name)
    return text


def positive(name: str, value: object) -> int:
    return read_int(name, value)


def share(name: str, value: object) -> float:
    """A share of memory in (0, 1]."""
    return read_float(name, value, low=0.0, high=1.0)


def context_read(parse: Callable[[Any], int | None]) -> Callable[[str, Any], int | None]:
    """The context knob read by the adapter's own reader (`parse`: value -> tokens, None = chosen
    at start), so the planner sizes the context the engine serves."""
    return lambda name, value: parse(value)


# ---- effects ---------------------------------------------------------------------------------


def sets(key: str, read: Callable[[str, Any], Any]) -> PlanEffect:
    """The knob's value, read by `read`, is the setting `key`."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[key] = read(name, value)

    return apply


def kv_dtype(table: Mapping[str, float | None]) -> PlanEffect:
    """A KV cache dtype: bytes per element for K and V from the engine's table (None = the model's)."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        dtype = read_choice(name, value or "auto", table)
        out["kv_dtype"] = dtype
        out["kv_bytes_k"] = out["kv_bytes_v"] = table[dtype]

    return apply


def quantization_of(methods: frozenset[str] | None) -> PlanEffect:
    """The checkpoint's quantization method (None/auto: detected from the checkpoint), one of the
    engine's `methods`; None: any name the adapter's check lets through (the planner judges only
    the methods it knows)."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        text = read_text(name, value)
        if text is None or text.lower() in {"none", "auto"}:
            out["quantization"] = None
            return
        out["quantization"] = read_choice(name, text, methods) if methods is not None else text.lower()

    return apply


quantization = quantization_of(QUANTIZATIONS)  # vLLM's --quantization (vllm/model_executor/layers/quantization)


def speculative_config(out: dict[str, Any], name: str, value: object) -> None:
    """vLLM's --speculative-config: the method and the tokens drafted a step."""
    config = read_json_object(name, value)
    if not config:
        return
    method = config.get("method") or ("draft_model" if config.get("model") else None)
    if not method:
        raise _error(f"{name} needs a 'method' (e.g. mtp, eagle, ngram) or a 'model'", name)
    out["spec_method"] = str(method).lower()
    out["spec_tokens"] = read_int(f"{name}.num_speculative_tokens", config.get("num_speculative_tokens", 1))


def speculative_algorithm(out: dict[str, Any], name: str, value: object) -> None:
    """SGLang's --speculative-algorithm (NEXTN is an MTP head)."""
    text = read_text(name, value)
    if text:
        out["spec_method"] = "mtp" if text.upper() == "NEXTN" else text.lower()
        out.setdefault("spec_tokens", 1)


def cpu_offload(out: dict[str, Any], name: str, value: object) -> None:
    """GiB of weights kept in CPU memory, off each GPU."""
    gib = read_float(name, value, low=-1e-9, high=1e6) if value not in (None, "") else 0.0
    out["cpu_offload_bytes"] = int(gib * (1 << 30))


def config_overrides(out: dict[str, Any], name: str, value: object) -> None:
    """Overrides of the model's config (vLLM hf_overrides, SGLang json_model_override_args): a
    RoPE scaling factor and a native context stretch the context the model serves."""
    overrides: dict[str, Any] = read_json_object(name, value) or {}
    nested = overrides.get("text_config")
    text_cfg: dict[str, Any] = nested if isinstance(nested, dict) else {}
    for source in (overrides, text_cfg):
        rope = source.get("rope_scaling") or source.get("rope_parameters")
        if isinstance(rope, dict) and rope.get("factor") and rope.get("rope_type", rope.get("type")) != "default":
            out["rope_factor"] = read_float(f"{name}.rope_scaling.factor", rope["factor"], low=0.0, high=1e4)
        if source.get("max_position_embeddings"):
            out["native_override"] = read_int(f"{name}.max_position_embeddings", source["max_position_embeddings"])


def mamba_dtype(key: str) -> PlanEffect:
    """A recurrent state's dtype: bytes per element (None = the model's)."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[key] = MAMBA_DTYPES[read_choice(name, value or "auto", MAMBA_DTYPES)]

    return apply


def cache_type(key: str) -> PlanEffect:
    """llama.cpp's -ctk / -ctv: bytes per element of the K or V cache."""

    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[key] = LLAMA_CACHE_TYPES[read_choice(name, value or "f16", LLAMA_CACHE_TYPES)]
        out[key + "_name"] = str(value or "f16").lower()

    return apply


def ollama_kv_type(out: dict[str, Any], name: str, value: object) -> None:
    """OLLAMA_KV_CACHE_TYPE: one type for K and V."""
    kind = read_choice(name, value or "f16", OLLAMA_KV_TYPES)
    out["kv_bytes_k"] = out["kv_bytes_v"] = LLAMA_CACHE_TYPES[kind]
    out["kv_bytes_k_name"] = out["kv_bytes_v_name"] = kind


def gpu_layers(out: dict[str, Any], name: str, value: object) -> None:
    """-ngl: layers offloaded to the GPUs (None = all: auto, all, -1)."""
    text = str(value).strip().lower()
    out["n_gpu_layers"] = None if text in {"auto", "all", "-1"} else read_int(name, value, minimum=0)


def flash_attn(out: dict[str, Any], name: str, value: object) -> None:
    """llama.cpp's -fa (llama.cpp#15746: on|off|auto, aliases 1/0/-1; older builds: a bare switch)."""
    text = str(value).strip().lower()
    mapping = {"on": "on", "1": "on", "true": "on", "off": "off", "0": "off", "false": "off"}
    mapping |= {"auto": "auto", "-1": "auto"}
    if text not in mapping:
        raise _error(f"{name}={value!r} is not one of: on, off, auto", name)
    out["flash_attn"] = mapping[text]


def flash_attention_switch(out: dict[str, Any], name: str, value: object) -> None:
    """OLLAMA_FLASH_ATTENTION: on or off."""
    out["flash_attn"] = "on" if read_bool(name, value) else "off"


def tensor_split(out: dict[str, Any], name: str, value: object) -> None:
    """llama.cpp's -ts: each GPU's share of the offloaded layers."""
    parts = value if isinstance(value, list | tuple) else str(value).replace("/", ",").split(",")
    try:
        split = tuple(float(p) for p in parts if str(p).strip())
    except ValueError:
        raise _error(f"{name} must be numbers like 3,1, not {value!r}", name) from None
    if not split or any(s < 0 for s in split) or sum(split) <= 0:
        raise _error(f"{name} must be non-negative numbers with a positive sum", name)
    out["tensor_split"] = split
