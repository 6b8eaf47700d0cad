"""Hugging Face `config.json` -> ModelArch + quantization facts.

Reads text-only configs and multimodal ones whose language model sits under `text_config`
(Qwen3.5 `configuration_qwen3_5*.py`; vLLM's reading of them). Layer kinds come from `layer_types`, or
from `full_attention_interval` (Qwen3-Next: layer i is full when (i+1) % interval == 0), or from
a sliding-window pattern (Gemma 3: every `sliding_window_pattern`-th layer is global). Fields a
config does not state stay None. Parsing is pure; `load_hf_config` is the only I/O.

Hostile input is a clear HfConfigError, never another exception: the text is size-bounded before
parsing; every fact read is type- and range-checked (serving.arch bounds) before any per-layer
list is built, so a config claiming millions of layers is refused at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.arch import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    MAX_HEAD_DIM,
    MAX_LAYERS,
    MAX_MTP_LAYERS,
    MAX_NAME,
    SLIDING_ATTENTION,
    ArchFactError,
    ModelArch,
    arch_from_facts,
    check_fact,
    check_int,
    check_layer_types,
    check_text,
)

MAX_CONFIG_CHARS = 1_000_000  # real config.json files are a few KB; the largest ~100 KB

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


def _first(*values: object) -> Any:
    return next((v for v in values if v is not None), None)


def _object(value: object, label: str) -> Mapping[str, Any] | None:
    """A nested object of the config, or None when absent; anything else is an error."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise HfConfigError(f"config.json: {label} must be an object, not {type(value).__name__}")
    return value


def _int(value: object, label: str, least: int, most: int) -> int | None:
    return None if value is None else check_int(value, least=least, most=most, label=label)


def _text(value: object, label: str, most: int = MAX_NAME) -> str | None:
    return None if value is None else check_text(value, most=most, label=label)


def _quant(config: Mapping[str, Any], text: Mapping[str, Any]) -> QuantFacts:
    q = _object(config.get("quantization_config"), "quantization_config") or _object(
        text.get("quantization_config"), "text_config.quantization_config"
    )
    if q is None:
        return QuantFacts()
    method = _text(q.get("quant_method"), "quantization_config.quant_method", 60)
    bits = _first(q.get("bits"), q.get("w_bit"), q.get("num_bits"))
    group = _first(q.get("group_size"), q.get("q_group_size"))
    fmt = _text(q.get("format"), "quantization_config.format", 60)
    # compressed-tensors: config_groups.<name>.weights.{num_bits, group_size}
    groups = _object(q.get("config_groups"), "quantization_config.config_groups") or {}
    for group_cfg in groups.values():
        weights = group_cfg.get("weights") if isinstance(group_cfg, Mapping) else None
        if isinstance(weights, Mapping):
            bits = _first(bits, weights.get("num_bits"))
            group = _first(group, weights.get("group_size"))
            break
    if bits is None and method and "fp8" in method.lower():
        bits = 8
    return QuantFacts(
        method=method.lower() if method else None,
        bits=_int(bits, "quantization_config bits", 1, 64),
        group_size=_int(group, "quantization_config group_size", -1, 2**20),  # -1: per channel (GPTQ)
        format=fmt or None,
    )


# model_type prefixes whose transformers config class ties the embeddings unless told otherwise
# (Gemma*Config: tie_word_embeddings=True; Llama, Qwen2/3, Mistral, DeepSeek default to False).
_TIED_BY_DEFAULT = ("gemma",)


def _tied(config: Mapping[str, Any], text: Mapping[str, Any]) -> bool | None:
    """tie_word_embeddings as the config states it (text config first), else the config class's
    default for the model type; None when neither is known."""
    for source in (text, config):
        value = source.get("tie_word_embeddings")
        if value is not None:
            if not isinstance(value, bool):
                raise HfConfigError(f"config.json: tie_word_embeddings must be true or false, not {value!r}"[:200])
            return value
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    if model_type.startswith(_TIED_BY_DEFAULT):
        return True
    return None


def _layer_types(text: Mapping[str, Any], num_layers: int) -> tuple[str, ...]:
    """Layer kinds; `num_layers` is already bounded, so building the tuple is cheap."""
    raw = text.get("layer_types")
    if raw is not None and raw != []:
        kinds = check_layer_types(raw, label="layer_types")
        return tuple(_LAYER_KINDS.get(kind.lower(), kind.lower()) for kind in kinds)
    interval = _int(text.get("full_attention_interval"), "full_attention_interval", 0, MAX_LAYERS)
    if interval:  # Qwen3-Next / Qwen3.5 (transformers configuration_qwen3_next.py)
        return tuple(FULL_ATTENTION if (i + 1) % interval == 0 else LINEAR_ATTENTION for i in range(num_layers))
    pattern = _int(text.get("sliding_window_pattern"), "sliding_window_pattern", 0, MAX_LAYERS)
    if text.get("sliding_window") and pattern and text.get("use_sliding_window", True):
        # Gemma 3: sliding_window_pattern 6 -> five local layers, then one global.
        return tuple(FULL_ATTENTION if (i + 1) % pattern == 0 else SLIDING_ATTENTION for i in range(num_layers))
    return ()


def _parse(config: Mapping[str, Any] | str) -> Mapping[str, Any]:
    if isinstance(config, str):
        if len(config) > MAX_CONFIG_CHARS:
            raise HfConfigError(f"config.json is too large ({len(config):,} characters; at most {MAX_CONFIG_CHARS:,})")
        try:
            config = json.loads(config)
        except json.JSONDecodeError as exc:
            raise HfConfigError(f"config.json is not valid JSON: {exc.msg} (line {exc.lineno})") from None
        except RecursionError:
            raise HfConfigError("config.json is nested too deeply") from None
        except ValueError as exc:  # an integer with thousands of digits
            why = "a number has too many digits" if "digits" in str(exc) else str(exc)[:200]
            raise HfConfigError(f"config.json is not valid JSON: {why}") from None
    if not isinstance(config, Mapping):
        raise HfConfigError("config.json must be a JSON object")
    return config


def arch_from_hf_config(config: Mapping[str, Any] | str) -> HfImport:
    """Parse a config.json (dict or JSON text) into a ModelArch and quantization facts.

    Raises HfConfigError (with a message naming the key) for anything that is not a plausible
    model config: wrong types, NaN, out-of-range or contradicting facts."""
    try:
        return _arch_from_hf_config(_parse(config))
    except ArchFactError as exc:
        raise HfConfigError(f"config.json: {exc}") from None
    except RecursionError:
        raise HfConfigError("config.json is nested too deeply") from None


class _Lookup:
    """A config's keys, its text_config's first (a multimodal model keeps its language model's there)."""

    def __init__(self, config: Mapping[str, Any], text: Mapping[str, Any]) -> None:
        self.config, self.text = config, text

    def get(self, *keys: str) -> tuple[str, Any]:
        """The first of `keys` set, and its value (the first key and None when none is)."""
        for source in (self.text, self.config):
            for key in keys:
                if source.get(key) is not None:
                    return key, source[key]
        return keys[0], None

    def fact(self, name: str, *keys: str) -> Any:
        """ModelArch fact `name` from the first of `keys` set, within its bounds (error names the key)."""
        key, value = self.get(*keys)
        return check_fact(name, value, label=key)


def _attention_layers(look: _Lookup, num_layers: int) -> tuple[Any, Any, tuple[str, ...], tuple[int, int, int]]:
    """Whether the sliding window is used, its size, each layer's kind, and the (full, linear,
    sliding) layer counts."""
    use_swa = look.text.get("use_sliding_window", True)
    if use_swa is not None and not isinstance(use_swa, bool):
        raise HfConfigError(f"config.json: use_sliding_window must be true or false, not {use_swa!r}"[:200])
    window_key, window = look.get("sliding_window")
    sliding_window = None if window in (None, 0) else check_fact("sliding_window", window, label=window_key)
    layer_types = _layer_types(look.text, num_layers)
    if not layer_types:
        return use_swa, sliding_window, layer_types, (num_layers, 0, 0)
    counts = (
        layer_types.count(FULL_ATTENTION),
        layer_types.count(LINEAR_ATTENTION),
        layer_types.count(SLIDING_ATTENTION),
    )
    return use_swa, sliding_window, layer_types, counts


def _head_dim(look: _Lookup, kv_lora_rank: Any) -> Any:
    """head_dim, or for multi-head latent attention without one, qk_nope_head_dim + qk_rope_head_dim."""
    head_dim = look.fact("head_dim", "head_dim")
    if kv_lora_rank is not None and head_dim is None:
        nope = _int(look.get("qk_nope_head_dim")[1], "qk_nope_head_dim", 0, MAX_HEAD_DIM)
        rope = _int(look.get("qk_rope_head_dim")[1], "qk_rope_head_dim", 0, MAX_HEAD_DIM)
        head_dim = check_fact(
            "head_dim", (nope or 0) + (rope or 0) or None, label="qk_nope_head_dim + qk_rope_head_dim"
        )
    return head_dim


def _arch_from_hf_config(config: Mapping[str, Any]) -> HfImport:
    text: Mapping[str, Any] = _object(config.get("text_config"), "text_config") or config
    look = _Lookup(config, text)
    get, fact = look.get, look.fact
    model_type = _text(_first(config.get("model_type"), text.get("model_type")), "model_type")
    architectures = _first(config.get("architectures"), text.get("architectures")) or []
    if not isinstance(architectures, list):
        raise HfConfigError("config.json: architectures must be a list of class names")
    architecture = _text(architectures[0], "architectures[0]") if architectures else model_type
    num_layers = fact("num_layers", "num_hidden_layers", "n_layer", "num_layers")
    heads = fact("num_attention_heads", "num_attention_heads", "n_head")
    if num_layers is None or heads is None:
        raise HfConfigError("config.json lacks num_hidden_layers or num_attention_heads")
    use_swa, sliding_window, layer_types, (full, linear, sliding) = _attention_layers(look, num_layers)
    kv_lora_rank = fact("kv_lora_rank", "kv_lora_rank")
    head_dim = _head_dim(look, kv_lora_rank)
    mtp_key, mtp_raw = get("mtp_num_hidden_layers", "num_nextn_predict_layers")
    mtp_layers = _int(mtp_raw, mtp_key, 0, MAX_MTP_LAYERS)
    num_kv_heads = fact("num_kv_heads", "num_key_value_heads")
    facts: dict[str, Any] = {
        "architecture": architecture,
        "family": _FAMILIES.get(str(model_type)),
        "num_layers": num_layers,
        "full_attention_layers": full,
        "linear_attention_layers": linear,
        "sliding_window_layers": sliding,
        "sliding_window": sliding_window if use_swa and sliding else None,
        "hidden_size": fact("hidden_size", "hidden_size", "n_embd"),
        "intermediate_size": fact("intermediate_size", "intermediate_size"),
        "moe_intermediate_size": fact("moe_intermediate_size", "moe_intermediate_size"),
        "num_attention_heads": heads,
        # HF convention: no num_key_value_heads means multi-head attention (kv heads == heads).
        "num_kv_heads": _first(num_kv_heads, heads),
        "head_dim": head_dim,
        "v_head_dim": fact("v_head_dim", "v_head_dim"),
        "vocab_size": fact("vocab_size", "vocab_size"),
        "num_experts": fact("num_experts", "num_experts", "num_local_experts", "n_routed_experts"),
        "experts_per_token": fact("experts_per_token", "num_experts_per_tok", "moe_topk"),
        "native_context": fact("native_context", "max_position_embeddings"),
        "kv_lora_rank": kv_lora_rank,
        "qk_rope_head_dim": fact("qk_rope_head_dim", "qk_rope_head_dim") if kv_lora_rank is not None else None,
        "linear_num_key_heads": fact("linear_num_key_heads", "linear_num_key_heads"),
        "linear_num_value_heads": fact("linear_num_value_heads", "linear_num_value_heads"),
        "linear_key_head_dim": fact("linear_key_head_dim", "linear_key_head_dim"),
        "linear_value_head_dim": fact("linear_value_head_dim", "linear_value_head_dim"),
        "linear_conv_kernel_dim": fact("linear_conv_kernel_dim", "linear_conv_kernel_dim"),
        "mamba_ssm_dtype": fact("mamba_ssm_dtype", "mamba_ssm_dtype"),
        "torch_dtype": fact("torch_dtype", "torch_dtype", "dtype"),
        "has_vision": "vision_config" in config,
        "has_mtp": bool(mtp_layers) if mtp_layers is not None else None,
        "mtp_num_layers": mtp_layers or None,
        "tie_word_embeddings": _tied(config, text),
        "layer_types": list(layer_types),
    }
    arch = arch_from_facts(facts)
    return HfImport(arch=arch, quant=_quant(config, text), model_type=model_type or None)


def load_hf_config(path: str | Path) -> HfImport:
    """Read a config.json file (or a model directory holding one) and parse it."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    with path.open("rb") as handle:
        data = handle.read(4 * MAX_CONFIG_CHARS + 1)  # never read a huge file whole
    if len(data) > 4 * MAX_CONFIG_CHARS:
        raise HfConfigError(f"{path.name} is too large for a config.json")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise HfConfigError(f"{path.name} is not UTF-8 text") from None
    return arch_from_hf_config(text)
