"""Hugging Face `config.json` -> ModelArch + quantization facts.

Reads text-only configs and multimodal ones whose language model sits under `text_config`
(Qwen3.5 `configuration_qwen3_5*.py`, engines.md §4). Layer kinds come from `layer_types`, or
from `full_attention_interval` (Qwen3-Next: layer i is full when (i+1) % interval == 0), or from
a sliding-window pattern (Gemma 3: every `sliding_window_pattern`-th layer is global). Fields a
config does not state stay None. Parsing is pure; `load_hf_config` is the only I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployments.arch import FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION, ModelArch

_FAMILIES = {
    "qwen3_5": "Qwen3.5",
    "qwen3_5_moe": "Qwen3.5",
    "qwen3_5_text": "Qwen3.5",
    "qwen3_5_moe_text": "Qwen3.5",
    "qwen3_next": "Qwen3-Next",
    "qwen3": "Qwen3",
    "qwen3_moe": "Qwen3",
    "qwen2": "Qwen2",
    "gemma3": "Gemma 3",
    "gemma3_text": "Gemma 3",
    "llama": "Llama",
    "deepseek_v3": "DeepSeek-V3",
    "mistral": "Mistral",
}
_LAYER_KINDS = {
    "full_attention": FULL_ATTENTION,
    "attention": FULL_ATTENTION,
    "global": FULL_ATTENTION,
    "sliding_attention": SLIDING_ATTENTION,
    "sliding_window": SLIDING_ATTENTION,
    "local": SLIDING_ATTENTION,
    "linear_attention": LINEAR_ATTENTION,
    "mamba": LINEAR_ATTENTION,
    "gated_deltanet": LINEAR_ATTENTION,
}


class HfConfigError(ValueError):
    """The text is not a model config.json the importer understands."""


@dataclass(frozen=True)
class QuantFacts:
    method: str | None = None  # quantization_config.quant_method: "compressed-tensors", "awq", "fp8", ...
    bits: int | None = None
    group_size: int | None = None
    format: str | None = None  # e.g. compressed-tensors "pack-quantized"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class HfImport:
    arch: ModelArch
    quant: QuantFacts
    model_type: str | None = None


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _quant(config: Mapping[str, Any], text: Mapping[str, Any]) -> QuantFacts:
    q = config.get("quantization_config") or text.get("quantization_config")
    if not isinstance(q, Mapping):
        return QuantFacts()
    method = q.get("quant_method")
    bits = _first(q.get("bits"), q.get("w_bit"), q.get("num_bits"))
    group = _first(q.get("group_size"), q.get("q_group_size"))
    fmt = q.get("format")
    # compressed-tensors: config_groups.<name>.weights.{num_bits, group_size}
    for group_cfg in (q.get("config_groups") or {}).values():
        weights = group_cfg.get("weights") if isinstance(group_cfg, Mapping) else None
        if isinstance(weights, Mapping):
            bits = _first(bits, weights.get("num_bits"))
            group = _first(group, weights.get("group_size"))
            break
    if bits is None and method and "fp8" in str(method).lower():
        bits = 8
    return QuantFacts(
        method=str(method).lower() if method else None,
        bits=int(bits) if bits is not None else None,
        group_size=int(group) if group is not None else None,
        format=str(fmt) if fmt else None,
    )


def _layer_types(text: Mapping[str, Any], num_layers: int | None) -> tuple[str, ...]:
    raw = text.get("layer_types")
    if isinstance(raw, list) and raw:
        return tuple(_LAYER_KINDS.get(str(kind).lower(), str(kind).lower()) for kind in raw)
    if not num_layers:
        return ()
    interval = text.get("full_attention_interval")
    if interval:  # Qwen3-Next / Qwen3.5 (transformers configuration_qwen3_next.py)
        return tuple(FULL_ATTENTION if (i + 1) % int(interval) == 0 else LINEAR_ATTENTION for i in range(num_layers))
    pattern = text.get("sliding_window_pattern")
    if text.get("sliding_window") and pattern and text.get("use_sliding_window", True):
        # Gemma 3: sliding_window_pattern 6 -> five local layers, then one global.
        return tuple(FULL_ATTENTION if (i + 1) % int(pattern) == 0 else SLIDING_ATTENTION for i in range(num_layers))
    return ()


def arch_from_hf_config(config: Mapping[str, Any] | str) -> HfImport:
    """Parse a config.json (dict or JSON text) into a ModelArch and quantization facts."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise HfConfigError(f"config.json is not valid JSON: {exc.msg}") from None
    if not isinstance(config, Mapping):
        raise HfConfigError("config.json must be a JSON object")
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config

    def get(*keys: str) -> Any:
        for source in (text, config):
            for key in keys:
                if source.get(key) is not None:
                    return source[key]
        return None

    model_type = config.get("model_type") or text.get("model_type")
    architectures = config.get("architectures") or text.get("architectures") or []
    num_layers = get("num_hidden_layers", "n_layer", "num_layers")
    heads = get("num_attention_heads", "n_head")
    if num_layers is None or heads is None:
        raise HfConfigError("config.json lacks num_hidden_layers or num_attention_heads")
    layer_types = _layer_types(text, num_layers)
    use_swa = text.get("use_sliding_window", True)
    sliding_window = get("sliding_window") if use_swa else None
    if layer_types:
        full = layer_types.count(FULL_ATTENTION)
        linear = layer_types.count(LINEAR_ATTENTION)
        sliding = layer_types.count(SLIDING_ATTENTION)
    else:
        full, linear, sliding = num_layers, 0, 0
    if sliding == 0:
        sliding_window = None if not layer_types and not sliding_window else sliding_window
    experts = get("num_experts", "num_local_experts", "n_routed_experts")
    mtp_layers = get("mtp_num_hidden_layers", "num_nextn_predict_layers")
    kv_lora_rank = get("kv_lora_rank")
    head_dim = get("head_dim")
    if kv_lora_rank is not None and head_dim is None:
        nope, rope = get("qk_nope_head_dim"), get("qk_rope_head_dim")
        head_dim = (nope or 0) + (rope or 0) or None
    arch = ModelArch(
        architecture=architectures[0] if architectures else model_type,
        family=_FAMILIES.get(str(model_type)),
        num_layers=int(num_layers),
        full_attention_layers=full,
        linear_attention_layers=linear,
        sliding_window_layers=sliding,
        sliding_window=int(sliding_window) if sliding_window and sliding else None,
        hidden_size=get("hidden_size", "n_embd"),
        intermediate_size=get("intermediate_size"),
        moe_intermediate_size=get("moe_intermediate_size"),
        num_attention_heads=int(heads),
        # HF convention: no num_key_value_heads means multi-head attention (kv heads == heads).
        num_kv_heads=int(_first(get("num_key_value_heads"), heads)),
        head_dim=head_dim,
        v_head_dim=get("v_head_dim"),
        vocab_size=get("vocab_size"),
        num_experts=experts,
        experts_per_token=get("num_experts_per_tok", "moe_topk"),
        native_context=get("max_position_embeddings"),
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=get("qk_rope_head_dim") if kv_lora_rank is not None else None,
        linear_num_key_heads=get("linear_num_key_heads"),
        linear_num_value_heads=get("linear_num_value_heads"),
        linear_key_head_dim=get("linear_key_head_dim"),
        linear_value_head_dim=get("linear_value_head_dim"),
        linear_conv_kernel_dim=get("linear_conv_kernel_dim"),
        mamba_ssm_dtype=get("mamba_ssm_dtype"),
        torch_dtype=get("torch_dtype", "dtype"),
        has_vision="vision_config" in config,
        has_mtp=bool(mtp_layers) if mtp_layers is not None else None,
        mtp_num_layers=mtp_layers or None,
        layer_types=layer_types,
    )
    return HfImport(arch=arch, quant=_quant(config, text), model_type=str(model_type) if model_type else None)


def load_hf_config(path: str | Path) -> HfImport:
    """Read a config.json file (or a model directory holding one) and parse it."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    return arch_from_hf_config(path.read_text(encoding="utf-8"))
