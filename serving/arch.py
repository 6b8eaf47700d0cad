"""Model architecture facts: the pure shape every layer of the panel agrees on.

A `ModelArch` is what the planner, the diff and the importers (Hugging Face
`config.json`, GGUF header) exchange. It holds facts only; any field that a source
does not state stays `None` (never guessed). No Django, no I/O.

Every fact has a type and a plausible range (`INT_FACTS`, `TEXT_FACTS`, `BOOL_FACTS`). The
bounds admit every real model (the largest MoE, 10M-token context, 262k vocabularies) and refuse
absurd ones, so no page or planner run ever works on a million layers. Two ways in:
- `arch_from_facts` (strict): importers call it before anything is stored; a bad fact is an
  `ArchFactError` naming it.
- `ModelArch.from_dict` (lenient): reads whatever is already stored; a bad fact is dropped (unknown),
  never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Kinds of layers in `ModelArch.layer_types`.
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
LINEAR_ATTENTION = "linear_attention"  # Gated DeltaNet / Mamba: constant state per sequence

# Bounds. Real models today: at most 126 layers (Llama 3.1 405B), 53,248 hidden / 73,728 FFN width,
# 128 heads, head dim 576 (MLA latent), 262,144 vocabulary, 512 experts, 10M context (Llama 4 Scout),
# ~1T parameters. Each bound is one to three orders of magnitude above the largest.
MAX_LAYERS = 1_024
MAX_CONTEXT = 2**25  # 33,554,432 tokens
MAX_WIDTH = 2**20  # hidden / intermediate sizes, MLA ranks
MAX_HEADS = 4_096
MAX_HEAD_DIM = 4_096
MAX_VOCAB = 2**21  # 2,097,152 tokens
MAX_EXPERTS = 16_384
MAX_PARAMS = 10**14  # 100T parameters
MAX_MTP_LAYERS = 64
MAX_CONV_KERNEL = 64
MAX_NAME = 200  # architecture, family
MAX_DTYPE = 40  # torch_dtype, mamba_ssm_dtype
MAX_LAYER_KIND = 40  # one entry of layer_types

# fact -> (least, most) for whole-number facts.
INT_FACTS: dict[str, tuple[int, int]] = {
    "params_total": (1, MAX_PARAMS),
    "params_active": (1, MAX_PARAMS),
    "num_layers": (1, MAX_LAYERS),
    "full_attention_layers": (0, MAX_LAYERS),
    "linear_attention_layers": (0, MAX_LAYERS),
    "sliding_window_layers": (0, MAX_LAYERS),
    "sliding_window": (1, MAX_CONTEXT),
    "hidden_size": (1, MAX_WIDTH),
    "intermediate_size": (0, MAX_WIDTH),
    "moe_intermediate_size": (0, MAX_WIDTH),
    "num_attention_heads": (1, MAX_HEADS),
    "num_kv_heads": (1, MAX_HEADS),
    "head_dim": (1, MAX_HEAD_DIM),
    "v_head_dim": (1, MAX_HEAD_DIM),
    "vocab_size": (1, MAX_VOCAB),
    "num_experts": (0, MAX_EXPERTS),
    "experts_per_token": (0, MAX_EXPERTS),
    "native_context": (1, MAX_CONTEXT),
    "kv_lora_rank": (1, MAX_WIDTH),
    "qk_rope_head_dim": (0, MAX_HEAD_DIM),
    "linear_num_key_heads": (1, MAX_HEADS),
    "linear_num_value_heads": (1, MAX_HEADS),
    "linear_key_head_dim": (1, MAX_HEAD_DIM),
    "linear_value_head_dim": (1, MAX_HEAD_DIM),
    "linear_conv_kernel_dim": (1, MAX_CONV_KERNEL),
    "mtp_num_layers": (1, MAX_MTP_LAYERS),
}
TEXT_FACTS: dict[str, int] = {
    "architecture": MAX_NAME,
    "family": MAX_NAME,
    "mamba_ssm_dtype": MAX_DTYPE,
    "torch_dtype": MAX_DTYPE,
}
BOOL_FACTS = frozenset({"has_vision", "has_mtp", "tie_word_embeddings"})


class ArchFactError(ValueError):
    """A fact that is not plausible for any model; `fact` names it (as the source spelled it)."""

    def __init__(self, message: str, *, fact: str) -> None:
        super().__init__(message)
        self.fact = fact


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_int(value: object, *, least: int, most: int, label: str) -> int:
    """A whole number in [least, most]; an integral float (64.0) counts, bool and text do not."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArchFactError(f"{label} must be a whole number, not {_show(value)}", fact=label)
    if not least <= value <= most:
        raise ArchFactError(f"{label} must be from {least:,} to {most:,}, not {_show(value)}", fact=label)
    return value


def check_text(value: object, *, most: int, label: str) -> str:
    """Text without NUL or other control characters, at most `most` characters."""
    if not isinstance(value, str):
        raise ArchFactError(f"{label} must be text, not {_show(value)}", fact=label)
    if len(value) > most:
        raise ArchFactError(f"{label} is too long ({len(value):,} characters; at most {most})", fact=label)
    if any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise ArchFactError(f"{label} contains a control character or a lone surrogate", fact=label)
    return value


def check_fact(name: str, value: object, *, label: str | None = None) -> Any:
    """`value` made plain for fact `name` (None stays None); ArchFactError when implausible.

    `label` is what the error calls it (e.g. the config.json key the value came from)."""
    label = label or name
    if value is None:
        return None
    if name in INT_FACTS:
        least, most = INT_FACTS[name]
        return check_int(value, least=least, most=most, label=label)
    if name in TEXT_FACTS:
        return check_text(value, most=TEXT_FACTS[name], label=label)
    if name in BOOL_FACTS:
        if not isinstance(value, bool):
            raise ArchFactError(f"{label} must be true or false, not {_show(value)}", fact=label)
        return value
    if name == "layer_types":
        return check_layer_types(value, label=label)
    raise ArchFactError(f"{label} is not an architecture fact", fact=label)


def check_layer_types(value: object, *, label: str = "layer_types", most: int = MAX_LAYERS) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ArchFactError(f"{label} must be a list, not {_show(value)}", fact=label)
    if len(value) > most:
        raise ArchFactError(f"{label} lists {len(value):,} layers; at most {most:,}", fact=label)
    return tuple(check_text(kind, most=MAX_LAYER_KIND, label=f"{label}[{i}]") for i, kind in enumerate(value))


def _consistency(values: dict[str, Any]) -> list[tuple[str, str]]:
    """(fact, why) for facts that contradict others; the first named is the one to drop."""
    problems: list[tuple[str, str]] = []
    layers = values.get("num_layers")
    kinds = values.get("layer_types") or ()
    if kinds and layers is not None and len(kinds) != layers:
        problems.append(("layer_types", f"layer_types lists {len(kinds):,} layers but the model has {layers:,}"))
    counted = [values.get(k) for k in ("full_attention_layers", "linear_attention_layers", "sliding_window_layers")]
    if layers is not None and sum(c or 0 for c in counted) > layers:
        problems.append(("full_attention_layers", f"the layer kinds add up to more than the model's {layers:,} layers"))
    experts, per_token = values.get("num_experts"), values.get("experts_per_token")
    if experts and per_token and per_token > experts:
        problems.append(("experts_per_token", f"{per_token:,} experts per token is more than the {experts:,} experts"))
    total, active = values.get("params_total"), values.get("params_active")
    if total and active and active > total:
        problems.append(("params_active", "more active parameters than parameters in all"))
    return problems


def arch_from_facts(data: Mapping[str, Any]) -> ModelArch:
    """Strict: every key a known fact, every value plausible, the facts consistent.

    Raises ArchFactError naming the first bad fact."""
    if not isinstance(data, Mapping):
        raise ArchFactError(f"architecture facts must be an object, not {_show(data)}", fact="arch")
    known = {f.name for f in fields(ModelArch)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ArchFactError(f"{_show(key)} is not an architecture fact", fact=str(key))
        values[key] = check_fact(key, value)
    problems = _consistency(values)
    if problems:
        raise ArchFactError(problems[0][1], fact=problems[0][0])
    if values.get("layer_types") is None:
        values.pop("layer_types", None)
    return ModelArch(**values)


@dataclass(frozen=True)
class ModelArch:
    """Architecture facts of one model variant (text tower unless stated)."""

    architecture: str | None = None  # e.g. "Qwen3_5ForConditionalGeneration", "gemma3"
    family: str | None = None  # e.g. "Qwen3.5"
    params_total: int | None = None  # parameters, not billions
    params_active: int | None = None  # per token (MoE); == total for dense
    num_layers: int | None = None
    full_attention_layers: int | None = None
    linear_attention_layers: int | None = None
    sliding_window_layers: int | None = None
    sliding_window: int | None = None  # tokens, for sliding-window layers
    hidden_size: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None  # K head dim (== V head dim unless v_head_dim is set)
    v_head_dim: int | None = None
    vocab_size: int | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    native_context: int | None = None
    # MLA (DeepSeek-style): one compressed latent per token per layer.
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    # Gated DeltaNet / Mamba state (per linear layer, per sequence).
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int | None = None
    mamba_ssm_dtype: str | None = None  # e.g. "float32"
    torch_dtype: str | None = None  # checkpoint dtype, e.g. "bfloat16"
    has_vision: bool | None = None
    has_mtp: bool | None = None
    mtp_num_layers: int | None = None
    tie_word_embeddings: bool | None = None  # the output layer reuses the embedding (no lm_head weights)
    layer_types: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layer_types"] = list(self.layer_types)
        return data

    @classmethod
    def from_dict(cls, data: object) -> ModelArch:
        """Lenient: whatever is stored (any JSON, old or hand-edited rows) -> the facts that are
        plausible. Unknown keys, wrong types, out-of-range values and contradictions are dropped
        (unknown), never an exception, so no page that shows a model can fail on its facts."""
        if not isinstance(data, Mapping):
            return cls()
        values: dict[str, Any] = {}
        for f in fields(cls):
            try:
                value = check_fact(f.name, data.get(f.name))
            except ArchFactError:
                continue
            if value is not None:
                values[f.name] = value
        for _ in range(4):  # each pass drops one contradicting fact
            problems = _consistency(values)
            if not problems:
                break
            fact = problems[0][0]
            values.pop(fact, None)
            if fact == "full_attention_layers":  # the counts contradict the layer count: trust none of them
                values.pop("linear_attention_layers", None)
                values.pop("sliding_window_layers", None)
        return cls(**values)

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts and self.num_experts > 1)

    @property
    def is_hybrid(self) -> bool:
        return bool(self.linear_attention_layers)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None
