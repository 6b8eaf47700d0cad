"""GGUF header -> ModelArch + the facts llama.cpp's KV estimate needs (GgufKvFacts).

Keys are gguf-py's (`gguf/constants.py Keys`, engines.md §5). Per-layer arrays are kept as such:
`{arch}.attention.head_count_kv` may be a list with 0 on recurrent layers. Which layers use the
sliding window: `{arch}.attention.sliding_window_pattern` when the file has it (a period or a
per-layer bool list), else llama.cpp's built-in period for the architecture (src/models/gemma3.cpp
`load_swa_pattern(ml, 6)`; llama-hparams.cpp set_swa_pattern: layer il is SWA when
il % n < n - 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deployments.arch import FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION, ModelArch
from deployments.planner.inputs import GgufKvFacts

# llama.cpp's default SWA period per architecture when the GGUF does not carry a pattern
# (src/models/<arch>.cpp load_hparams).
DEFAULT_SWA_PERIOD = {"gemma3": 6, "gemma2": 2, "cohere2": 4, "gemma3n": 5}
# Hybrids whose recurrent layers follow full_attention_interval (src/models/qwen3next.cpp, qwen35.cpp).
INTERVAL_HYBRIDS = {"qwen3next", "qwen35", "qwen35moe"}
# llama_ftype names (include/llama.h) for the common file types.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}


class GgufHeaderError(ValueError):
    """The file is not a GGUF model the importer understands."""


@dataclass(frozen=True)
class GgufImport:
    arch: ModelArch
    kv: GgufKvFacts
    file_type_name: str | None
    file_size: int
    name: str | None = None


def _shard_paths(path: Path) -> list[Path]:
    match = re.match(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$", path.name)
    if not match:
        return [path]
    prefix, total = match.group(1), int(match.group(3))
    shards = [path.with_name(f"{prefix}-{i:05d}-of-{total:05d}.gguf") for i in range(1, total + 1)]
    return [p for p in shards if p.exists()]


def _per_layer(value: Any, n_layer: int) -> tuple[int, ...]:
    if isinstance(value, list):
        values = [int(v) for v in value]
        return tuple((values + values[-1:] * n_layer)[:n_layer]) if values else (0,) * n_layer
    return (int(value),) * n_layer


def read_gguf_header(path: str | Path) -> GgufImport:
    """Read one GGUF file's header (tensor data is memory-mapped, not read)."""
    import gguf  # the PyPI gguf package (gguf-py)

    path = Path(path)
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError) as exc:
        raise GgufHeaderError(f"{path.name} is not a readable GGUF file: {exc}") from None

    def field(key: str) -> Any:
        item = reader.get_field(key)
        return item.contents() if item is not None else None

    arch_name = field("general.architecture")
    if not arch_name:
        raise GgufHeaderError(f"{path.name} has no general.architecture")
    p = f"{arch_name}."
    n_layer = field(p + "block_count")
    if not n_layer:
        raise GgufHeaderError(f"{path.name} has no {p}block_count")
    n_layer = int(n_layer)
    n_embd = field(p + "embedding_length")
    heads_raw = field(p + "attention.head_count")
    heads = _per_layer(heads_raw, n_layer) if heads_raw is not None else (0,) * n_layer
    kv_raw = field(p + "attention.head_count_kv")
    kv_heads = _per_layer(kv_raw, n_layer) if kv_raw is not None else heads
    n_head = max(heads) if heads else 0
    # llama-model.cpp: key/value length default to n_embd / n_head
    key_length = field(p + "attention.key_length") or ((n_embd // n_head) if n_embd and n_head else 0)
    value_length = field(p + "attention.value_length") or key_length

    recurrent = [False] * n_layer
    interval = field(p + "full_attention_interval")
    if arch_name in INTERVAL_HYBRIDS and interval:
        recurrent = [(i + 1) % int(interval) != 0 for i in range(n_layer)]
    elif isinstance(kv_raw, list) and field(p + "ssm.conv_kernel"):
        recurrent = [h == 0 for h in kv_heads]
    kv_heads = tuple(0 if r else h for h, r in zip(kv_heads, recurrent, strict=True))

    n_swa = field(p + "attention.sliding_window")
    swa = [False] * n_layer
    if n_swa:
        pattern = field(p + "attention.sliding_window_pattern")
        if isinstance(pattern, list):
            swa = [bool(v) for v in pattern][:n_layer]
        else:
            period = int(pattern) if pattern else DEFAULT_SWA_PERIOD.get(arch_name, 0)
            swa = [period == 0 or (i % period < period - 1) for i in range(n_layer)] if period else swa
    file_size = sum(s.stat().st_size for s in _shard_paths(path))
    file_type = field("general.file_type")
    facts = GgufKvFacts(
        architecture=arch_name,
        n_layer=n_layer,
        head_count_kv=kv_heads,
        key_length=int(key_length),
        value_length=int(value_length),
        swa_layers=tuple(swa) if any(swa) else (),
        sliding_window=int(n_swa) if n_swa else None,
        context_length=field(p + "context_length"),
        file_type=int(file_type) if file_type is not None else None,
        file_size=file_size,
        ssm_conv_kernel=field(p + "ssm.conv_kernel"),
        ssm_inner_size=field(p + "ssm.inner_size"),
        ssm_state_size=field(p + "ssm.state_size"),
        ssm_group_count=field(p + "ssm.group_count"),
        recurrent_layers=tuple(recurrent) if any(recurrent) else (),
    )
    kinds = tuple(
        LINEAR_ATTENTION if r else SLIDING_ATTENTION if s else FULL_ATTENTION
        for r, s in zip(recurrent, swa, strict=True)
    )
    tokens = field("tokenizer.ggml.tokens")
    vocab = field(p + "vocab_size") or (len(tokens) if isinstance(tokens, list) else None)
    params = sum(int(t.n_elements) for t in reader.tensors) if len(_shard_paths(path)) == 1 else None
    time_step_rank, inner = field(p + "ssm.time_step_rank"), field(p + "ssm.inner_size")
    linear = any(recurrent) and arch_name in INTERVAL_HYBRIDS
    nonzero_kv = [h for h in kv_heads if h]
    arch = ModelArch(
        architecture=arch_name,
        family=field("general.basename") or field("general.name"),
        params_total=params,
        num_layers=n_layer,
        full_attention_layers=kinds.count(FULL_ATTENTION),
        linear_attention_layers=kinds.count(LINEAR_ATTENTION),
        sliding_window_layers=kinds.count(SLIDING_ATTENTION),
        sliding_window=int(n_swa) if n_swa and any(swa) else None,
        hidden_size=n_embd,
        intermediate_size=_scalar(field(p + "feed_forward_length")),
        moe_intermediate_size=field(p + "expert_feed_forward_length"),
        num_attention_heads=n_head or None,
        num_kv_heads=max(nonzero_kv) if nonzero_kv else None,
        head_dim=int(key_length) or None,
        v_head_dim=int(value_length) if value_length != key_length else None,
        vocab_size=vocab,
        num_experts=field(p + "expert_count"),
        experts_per_token=field(p + "expert_used_count"),
        native_context=field(p + "context_length"),
        # Qwen3-Next/3.5 -> GGUF (engines.md §5): group_count = linear key heads, time_step_rank =
        # linear value heads, state_size = key head dim, inner_size = v_dim x v_heads.
        linear_num_key_heads=field(p + "ssm.group_count") if linear else None,
        linear_num_value_heads=time_step_rank if linear else None,
        linear_key_head_dim=field(p + "ssm.state_size") if linear else None,
        linear_value_head_dim=(inner // time_step_rank) if linear and inner and time_step_rank else None,
        linear_conv_kernel_dim=field(p + "ssm.conv_kernel") if linear else None,
        layer_types=kinds,
    )
    name = field("general.name")
    return GgufImport(
        arch=arch,
        kv=facts,
        file_type_name=FILE_TYPES.get(int(file_type)) if file_type is not None else None,
        file_size=file_size,
        name=str(name) if name else None,
    )


def _scalar(value: Any) -> Any:
    if isinstance(value, list):
        return max(value) if value else None
    return value
