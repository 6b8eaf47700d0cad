"""Model architecture facts: the pure shape every layer of the panel agrees on.

A `ModelArch` is what the planner, the diff and the importers (Hugging Face
`config.json`, GGUF header) exchange. It holds facts only; any field that a source
does not state stays `None` (never guessed). No Django, no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# Kinds of layers in `ModelArch.layer_types`.
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
LINEAR_ATTENTION = "linear_attention"  # Gated DeltaNet / Mamba: constant state per sequence


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
    layer_types: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layer_types"] = list(self.layer_types)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ModelArch:
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "layer_types" in values:
            values["layer_types"] = tuple(values["layer_types"] or ())
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
