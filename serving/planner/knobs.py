"""Engine knobs -> one typed, engine-neutral `Settings`.

Knob names are the engines' flags with `-` turned into `_` (vLLM: vllm/engine/arg_utils.py;
llama.cpp: tools/server/README.md / common/arg.cpp; SGLang: sglang/srt/arg_groups). Values may
arrive as strings (Ansible writes "0.95"); they are coerced, and anything unknown or malformed
raises PlanInputError naming the knob.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.planner.inputs import PlanInputError

# vLLM CacheDType (vllm/config/cache.py) -> bytes per element; "auto" = model dtype.
VLLM_KV_DTYPES = {
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
MAMBA_DTYPES = {"auto": None, "float32": 4, "float16": 2, "bfloat16": 2}
VLLM_QUANTIZATIONS = frozenset(
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
SGLANG_KV_DTYPES = {"auto": None, "bf16": 2.0, "bfloat16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}


@dataclass(frozen=True)
class Settings:
    """Engine knobs resolved to what the maths needs (None = the engine's default)."""

    tp: int = 1
    pp: int = 1
    max_model_len: int | None = None  # vLLM/SGLang context; None/auto = the model's native
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    mem_util: float | None = None  # vLLM gpu_memory_utilization / SGLang mem_fraction_static
    kv_dtype: str = "auto"
    kv_bytes_k: float | None = None  # None = model dtype
    kv_bytes_v: float | None = None
    kv_cache_memory_bytes: int | None = None
    quantization: str | None = None  # None = auto-detect
    spec_method: str | None = None
    spec_tokens: int = 0
    cpu_offload_bytes: int = 0
    enforce_eager: bool = False
    language_model_only: bool = False
    prefix_caching: bool | None = None
    rope_factor: float | None = None  # from hf_overrides rope_scaling / rope_parameters
    native_override: int | None = None  # hf_overrides max_position_embeddings
    reasoning_parser: str | None = None
    tool_parser: str | None = None
    attention_backend: str | None = None
    block_size: int | None = None
    mamba_conv_bytes: int | None = None
    mamba_ssm_bytes: int | None = None
    # llama.cpp / Ollama
    ctx_size: int | None = None
    parallel: int | None = None
    n_gpu_layers: int | None = None  # None = all ("auto"/"all"/default)
    flash_attn: str = "auto"
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] = ()
    mmproj: str | None = None
    kv_unified: bool | None = None
    ubatch_size: int = 512
    swa_full: bool = False


# ---- value parsers -------------------------------------------------------------------------


def _int(name: str, value: object, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise PlanInputError(f"{name} must be a whole number, not {value!r}", field=name)
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise PlanInputError(f"{name} must be a whole number, not {value!r}", field=name) from None
    if number < minimum:
        raise PlanInputError(f"{name} must be at least {minimum}, not {number}", field=name)
    return number


def _float(name: str, value: Any, *, low: float, high: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PlanInputError(f"{name} must be a number, not {value!r}", field=name) from None
    if not (low < number <= high):
        raise PlanInputError(f"{name} must be in ({low}, {high}], not {number}", field=name)
    return number


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PlanInputError(f"{name} must be true or false, not {value!r}", field=name)


def _text(name: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | int | float):
        raise PlanInputError(f"{name} must be text, not {value!r}", field=name)
    text = str(value).strip()
    return text or None


def _context(engine: str) -> Callable[[str, Any], int | None]:
    """The engine's context knob read as the engine reads it (its adapter's `context_tokens`:
    vLLM's "32k" = 32,000 and "32K" = 32,768, SGLang's plain int, llama.cpp's 0 = native);
    None = auto / -1 (the largest that fits) or unset. PlanInputError with the engine's reason."""

    def parse(name: str, value: object) -> int | None:
        if value is None:
            return None
        try:
            return get_adapter(engine).context_tokens(value)
        except EngineConfigError as exc:
            raise PlanInputError(str(exc), field=name) from None

    return parse


def _json_obj(name: str, value: object) -> dict[str, Any] | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise PlanInputError(f"{name} is not valid JSON: {exc.msg}", field=name) from None
        if isinstance(parsed, dict):
            return parsed
    raise PlanInputError(f"{name} must be a JSON object, not {value!r}", field=name)


def _choice(name: str, value: object, choices: Mapping[str, Any] | frozenset[str] | tuple[str, ...]) -> str:
    text = str(value).strip().lower() if value is not None else ""
    if text not in choices:
        allowed = ", ".join(sorted(choices))
        raise PlanInputError(f"{name}={value!r} is not one of: {allowed}", field=name)
    return text


# ---- per-engine knob tables ------------------------------------------------------------------

Apply = Callable[[dict[str, Any], str, Any], None]


def _set(key: str, parse: Callable[[str, Any], Any]) -> Apply:
    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[key] = parse(name, value)

    return apply


def _ignore(out: dict[str, Any], name: str, value: object) -> None:
    """Accepted knob that does not change the fit (ports, names, secrets, sampling...)."""


def _pos(name: str, value: object) -> int:
    return _int(name, value)


def _util(name: str, value: object) -> float:
    return _float(name, value, low=0.0, high=1.0)


def _vllm_kv_dtype(out: dict[str, Any], name: str, value: object) -> None:
    dtype = _choice(name, value or "auto", VLLM_KV_DTYPES)
    out["kv_dtype"] = dtype
    out["kv_bytes_k"] = out["kv_bytes_v"] = VLLM_KV_DTYPES[dtype]


def _sglang_kv_dtype(out: dict[str, Any], name: str, value: object) -> None:
    dtype = _choice(name, value or "auto", SGLANG_KV_DTYPES)
    out["kv_dtype"] = dtype
    out["kv_bytes_k"] = out["kv_bytes_v"] = SGLANG_KV_DTYPES[dtype]


def _quantization(out: dict[str, Any], name: str, value: object) -> None:
    text = _text(name, value)
    if text is None or text.lower() in {"none", "auto"}:
        out["quantization"] = None
        return
    out["quantization"] = _choice(name, text, VLLM_QUANTIZATIONS)


def _spec_config(out: dict[str, Any], name: str, value: object) -> None:
    config = _json_obj(name, value)
    if not config:
        return
    method = config.get("method") or ("draft_model" if config.get("model") else None)
    if not method:
        raise PlanInputError(f"{name} needs a 'method' (e.g. mtp, eagle, ngram) or a 'model'", field=name)
    out["spec_method"] = str(method).lower()
    out["spec_tokens"] = _int(f"{name}.num_speculative_tokens", config.get("num_speculative_tokens", 1))


def _sglang_spec(out: dict[str, Any], name: str, value: object) -> None:
    text = _text(name, value)
    if text:
        out["spec_method"] = "mtp" if text.upper() == "NEXTN" else text.lower()
        out.setdefault("spec_tokens", 1)


def _offload(out: dict[str, Any], name: str, value: object) -> None:
    gib = _float(name, value, low=-1e-9, high=1e6) if value not in (None, "") else 0.0
    out["cpu_offload_bytes"] = int(gib * (1 << 30))


def _hf_overrides(out: dict[str, Any], name: str, value: object) -> None:
    overrides: dict[str, Any] = _json_obj(name, value) or {}
    nested = overrides.get("text_config")
    text_cfg: dict[str, Any] = nested if isinstance(nested, dict) else {}
    for source in (overrides, text_cfg):
        rope = source.get("rope_scaling") or source.get("rope_parameters")
        if isinstance(rope, dict) and rope.get("factor") and rope.get("rope_type", rope.get("type")) != "default":
            out["rope_factor"] = _float(f"{name}.rope_scaling.factor", rope["factor"], low=0.0, high=1e4)
        if source.get("max_position_embeddings"):
            out["native_override"] = _int(f"{name}.max_position_embeddings", source["max_position_embeddings"])


def _mamba(key: str) -> Apply:
    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[key] = MAMBA_DTYPES[_choice(name, value or "auto", MAMBA_DTYPES)]

    return apply


def _cache_type(key: str) -> Apply:
    def apply(out: dict[str, Any], name: str, value: object) -> None:
        out[key] = LLAMA_CACHE_TYPES[_choice(name, value or "f16", LLAMA_CACHE_TYPES)]
        out[key + "_name"] = str(value or "f16").lower()

    return apply


def _ngl(out: dict[str, Any], name: str, value: object) -> None:
    text = str(value).strip().lower()
    out["n_gpu_layers"] = None if text in {"auto", "all", "-1"} else _int(name, value, minimum=0)


def _flash_attn(out: dict[str, Any], name: str, value: object) -> None:
    # llama.cpp#15746: on|off|auto, aliases 1/0/-1; older builds: a bare switch (true).
    text = str(value).strip().lower()
    mapping = {"on": "on", "1": "on", "true": "on", "off": "off", "0": "off", "false": "off"}
    mapping |= {"auto": "auto", "-1": "auto"}
    if text not in mapping:
        raise PlanInputError(f"{name}={value!r} is not one of: on, off, auto", field=name)
    out["flash_attn"] = mapping[text]


def _tensor_split(out: dict[str, Any], name: str, value: object) -> None:
    parts = value if isinstance(value, list | tuple) else str(value).replace("/", ",").split(",")
    try:
        split = tuple(float(p) for p in parts if str(p).strip())
    except ValueError:
        raise PlanInputError(f"{name} must be numbers like 3,1, not {value!r}", field=name) from None
    if not split or any(s < 0 for s in split) or sum(split) <= 0:
        raise PlanInputError(f"{name} must be non-negative numbers with a positive sum", field=name)
    out["tensor_split"] = split


def _ollama_kv(out: dict[str, Any], name: str, value: object) -> None:
    kind = _choice(name, value or "f16", ("f16", "q8_0", "q4_0"))  # Ollama envconfig
    out["kv_bytes_k"] = out["kv_bytes_v"] = LLAMA_CACHE_TYPES[kind]
    out["kv_bytes_k_name"] = out["kv_bytes_v_name"] = kind


_COMMON_IGNORED = ("host", "port", "served_model_name", "api_key", "model", "seed", "trust_remote_code")
# SGLang's knobs the planner reads no memory from.
_SGLANG_IGNORED = (
    "disable_radix_cache",
    "enable_metrics",
    "max_total_tokens",
    "speculative_num_draft_tokens",
    "speculative_eagle_topk",
)

VLLM_KNOBS: dict[str, Apply] = {
    "tensor_parallel_size": _set("tp", _pos),
    "pipeline_parallel_size": _set("pp", _pos),
    "max_model_len": _set("max_model_len", _context("vllm")),
    "max_num_seqs": _set("max_num_seqs", _pos),
    "max_num_batched_tokens": _set("max_num_batched_tokens", _pos),
    "gpu_memory_utilization": _set("mem_util", _util),
    "kv_cache_dtype": _vllm_kv_dtype,
    "kv_cache_memory_bytes": _set("kv_cache_memory_bytes", _pos),
    "quantization": _quantization,
    "speculative_config": _spec_config,
    "cpu_offload_gb": _offload,
    "enforce_eager": _set("enforce_eager", _bool),
    "language_model_only": _set("language_model_only", _bool),
    "enable_prefix_caching": _set("prefix_caching", _bool),
    "hf_overrides": _hf_overrides,
    "reasoning_parser": _set("reasoning_parser", _text),
    "tool_call_parser": _set("tool_parser", _text),
    "attention_backend": _set("attention_backend", _text),
    "block_size": _set("block_size", _pos),
    "mamba_cache_dtype": _mamba("mamba_conv_bytes"),
    "mamba_ssm_cache_dtype": _mamba("mamba_ssm_bytes"),
    "enable_auto_tool_choice": _ignore,
    "enable_chunked_prefill": _ignore,
    "disable_custom_all_reduce": _ignore,
    "enable_expert_parallel": _ignore,
    "limit_mm_per_prompt": _ignore,
    "dtype": _ignore,
    "generation_config": _ignore,
    "chat_template": _ignore,
    "max_logprobs": _ignore,
    **dict.fromkeys(_COMMON_IGNORED, _ignore),
}

SGLANG_KNOBS: dict[str, Apply] = {
    "tp_size": _set("tp", _pos),
    "tensor_parallel_size": _set("tp", _pos),
    "pp_size": _set("pp", _pos),
    "pipeline_parallel_size": _set("pp", _pos),
    "context_length": _set("max_model_len", _context("sglang")),
    "max_model_len": _set("max_model_len", _context("sglang")),
    "max_running_requests": _set("max_num_seqs", _pos),
    "max_num_seqs": _set("max_num_seqs", _pos),
    "chunked_prefill_size": _set("max_num_batched_tokens", _pos),
    "mem_fraction_static": _set("mem_util", _util),
    "kv_cache_dtype": _sglang_kv_dtype,
    "quantization": _quantization,
    "speculative_algorithm": _sglang_spec,
    "speculative_num_steps": _set("spec_tokens", _pos),
    "reasoning_parser": _set("reasoning_parser", _text),
    "tool_call_parser": _set("tool_parser", _text),
    "attention_backend": _set("attention_backend", _text),
    **dict.fromkeys(_COMMON_IGNORED + _SGLANG_IGNORED, _ignore),
}

LLAMA_KNOBS: dict[str, Apply] = {
    "ctx_size": _set("ctx_size", _context("llama.cpp")),
    "parallel": _set("parallel", lambda n, v: _int(n, v, minimum=-1)),
    "n_gpu_layers": _ngl,
    "gpu_layers": _ngl,
    "cache_type_k": _cache_type("kv_bytes_k"),
    "cache_type_v": _cache_type("kv_bytes_v"),
    "flash_attn": _flash_attn,
    "split_mode": _set("split_mode", lambda n, v: _choice(n, v, ("none", "layer", "row", "tensor"))),
    "tensor_split": _tensor_split,
    "mmproj": _set("mmproj", _text),
    "kv_unified": _set("kv_unified", _bool),
    "ubatch_size": _set("ubatch_size", _pos),
    "swa_full": _set("swa_full", _bool),
    "batch_size": _ignore,
    "threads": _ignore,
    "threads_batch": _ignore,
    "jinja": _ignore,
    "main_gpu": _ignore,
    "alias": _ignore,
    "reasoning_format": _ignore,
    "reasoning_budget": _ignore,
    "chat_template": _ignore,
    "cont_batching": _ignore,
    "metrics": _ignore,
    "n_predict": _ignore,
    "load_mode": _ignore,
    "no_mmap": _ignore,
    "mlock": _ignore,
    "fit": _ignore,
    "no_mmproj": _ignore,
    "verbosity": _ignore,
    # The adapter's own knobs that change no memory: a revision the adapter accepts must plan
    # (the H200 run's revisions set log_verbosity 4 to see the llama_kv_cache lines).
    "log_verbosity": _ignore,
    "chat_template_file": _ignore,
    **dict.fromkeys(_COMMON_IGNORED, _ignore),
}

OLLAMA_KNOBS: dict[str, Apply] = {
    "num_ctx": _set("ctx_size", _context("ollama")),
    "context_length": _set("ctx_size", _context("ollama")),
    "num_parallel": _set("parallel", _pos),
    "kv_cache_type": _ollama_kv,
    "flash_attention": _set("flash_attn", lambda n, v: "on" if _bool(n, v) else "off"),
    "num_gpu": _ngl,
    "keep_alive": _ignore,
    "max_loaded_models": _ignore,
    **dict.fromkeys(_COMMON_IGNORED, _ignore),
}

KNOB_TABLES: dict[str, dict[str, Apply]] = {
    "vllm": VLLM_KNOBS,
    "sglang": SGLANG_KNOBS,
    "llama.cpp": LLAMA_KNOBS,
    "ollama": OLLAMA_KNOBS,
}


def parse_settings(engine: str, knobs: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Validate and resolve knobs for `engine`; PlanInputError on unknown names or bad values."""
    table = KNOB_TABLES.get(engine)
    if table is None:
        raise PlanInputError(f"unknown engine {engine!r}; expected one of {', '.join(KNOB_TABLES)}", field="engine")
    out: dict[str, Any] = {}
    merged: dict[str, Any] = {}
    adapter = get_adapter(engine)
    # Settings an engine reads from variables (Ollama's OLLAMA_*), as the knobs they stand for.
    from_env = {knob: env[var] for var, knob in adapter.env_knobs.items() if var in env and knob in table}
    merged.update(from_env)
    for raw_name, value in knobs.items():
        merged[str(raw_name).replace("-", "_").lstrip("_")] = value
    for name, value in merged.items():
        apply = table.get(name)
        if apply is None:
            raise PlanInputError(f"unknown {engine} knob {name!r}", field=name)
        if value is None and name not in {"max_model_len", "context_length"}:
            continue
        apply(out, name, value)
    names = {k: out.pop(k) for k in ("kv_bytes_k_name", "kv_bytes_v_name") if k in out}
    if names:
        out["kv_dtype"] = f"{names.get('kv_bytes_k_name', 'f16')}/{names.get('kv_bytes_v_name', 'f16')}"
    if adapter.ggml_kv_cache:
        out.setdefault("kv_bytes_k", LLAMA_CACHE_TYPES["f16"])  # common/common.h: f16 default
        out.setdefault("kv_bytes_v", LLAMA_CACHE_TYPES["f16"])
        out.setdefault("kv_dtype", "f16/f16")
    return Settings(**out)


def spec_is_mtp(settings: Settings) -> bool:
    method = settings.spec_method or ""
    return method == "mtp" or method.endswith("_mtp")
