"""Weights from the architecture when no checkpoint size is known: parameters, then bytes.

Parameters are counted per layer kind from the ModelArch (pure; no I/O):
- embedding vocab x hidden, plus the output layer unless tied (`tie_word_embeddings`; unstated
  counts it, the larger answer);
- full and sliding attention: q, k, v, o projections (heads x head_dim, kv_heads x head_dim);
  MLA (DeepSeek-style; `kv_lora_rank`): the latent down-projection hidden x (rank + rope), its
  up-projection rank x heads x (nope + v), q as heads x head_dim, o heads x v x hidden;
- linear attention (Gated DeltaNet, Qwen3-Next/3.5): in_proj_qkvz, in_proj_ba, the conv1d and
  out_proj (transformers modeling_qwen3_next.py Qwen3NextGatedDeltaNet);
- MLP: gated (gate, up, down) 3 x hidden x intermediate; MoE 3 x hidden x moe_intermediate per
  expert plus the router hidden x experts (active: experts_per_token of them);
- an MTP head (memory.mtp_head_bytes) and a vision tower (VISION_TOWER_PARAMS: its config is
  not among the facts; ~0.4-0.7B in the ViTs that current VLMs ship).
Norms and biases are left out (< 0.1%).

Bytes follow the checkpoint's quantization: bf16/fp16 2 bytes per parameter, fp32 4; FP8 one byte
for the linear layers (block or channel scales ~0); AWQ/GPTQ/compressed-tensors W4A16 `bits/8`
per weight plus one fp16 scale and a packed zero per group of `group_size`; embeddings and the
output layer stay in 16 bits in all of these (how vLLM's quantized checkpoints ship them). GGUF
types use llama.cpp's whole-model bits per weight (the quantize tool's table for Llama 3 8B).
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.arch import FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION, ModelArch

VISION_TOWER_PARAMS = 600_000_000
# llama.cpp tools/quantize: whole-model bits per weight of each file type (Llama 3 8B figures:
# e.g. Q4_K_M "4.89 bpw", Q8_0 8.50, Q6_K 6.56).
GGUF_BPW = {
    "F32": 32.0,
    "F16": 16.0,
    "BF16": 16.0,
    "Q8_0": 8.50,
    "Q6_K": 6.56,
    "Q5_K_M": 5.69,
    "Q5_K_S": 5.54,
    "Q5_1": 6.0,
    "Q5_0": 5.5,
    "Q4_K_M": 4.89,
    "Q4_K_S": 4.58,
    "Q4_1": 5.0,
    "Q4_0": 4.5,
    "Q3_K_L": 4.27,
    "Q3_K_M": 3.91,
    "Q3_K_S": 3.5,
    "Q2_K": 2.96,
}
# llama_ftype -> name (include/llama.h), for a GGUF known only by its file_type number.
GGUF_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
    12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}  # fmt: skip
DTYPE_BYTES = {"float32": 4.0, "fp32": 4.0, "float16": 2.0, "fp16": 2.0, "bfloat16": 2.0, "bf16": 2.0}


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int
    embedding: int  # embedding + output layer (kept in 16 bits by quantized checkpoints)
    vision: int = 0
    mtp: int = 0


@dataclass(frozen=True)
class WeightsEstimate:
    bytes: int
    params: ParamCount
    basis: str  # plain words: "32.8B parameters at 4-bit AWQ (group 128)"

    def to_dict(self) -> dict[str, object]:
        return {
            "bytes": self.bytes,
            "params_total": self.params.total,
            "params_active": self.params.active,
            "basis": self.basis,
        }


def _attention(arch: ModelArch, h: int) -> int | None:
    heads = arch.num_attention_heads
    if not heads:
        return None
    head_dim = arch.head_dim or h // heads
    v_dim = arch.v_head_dim or head_dim
    if arch.kv_lora_rank:
        rope = arch.qk_rope_head_dim or 0
        nope = max(0, head_dim - rope)
        kv = h * (arch.kv_lora_rank + rope) + arch.kv_lora_rank * heads * (nope + v_dim)
        return h * heads * head_dim + kv + heads * v_dim * h
    kv_heads = arch.num_kv_heads or heads
    return h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * v_dim * h


def _linear_attention(arch: ModelArch, h: int) -> int | None:
    kh, vh = arch.linear_num_key_heads, arch.linear_num_value_heads
    kd, vd = arch.linear_key_head_dim, arch.linear_value_head_dim
    if not (kh and vh and kd and vd):
        return None
    key, value = kh * kd, vh * vd
    qkvz = h * (2 * key + 2 * value)
    ba = h * 2 * vh
    conv = (2 * key + value) * (arch.linear_conv_kernel_dim or 4)
    return qkvz + ba + conv + value * h


def count_params(arch: ModelArch) -> ParamCount | None:
    """Parameters from the architecture; None when a needed fact (hidden size, layers, vocabulary,
    MLP width, attention heads) is missing."""
    h, layers, vocab = arch.hidden_size, arch.num_layers, arch.vocab_size
    if not (h and layers and vocab):
        return None
    kinds = list(arch.layer_types) or [FULL_ATTENTION] * layers
    if len(kinds) != layers:
        return None
    attn = _attention(arch, h)
    linear = _linear_attention(arch, h) if LINEAR_ATTENTION in kinds else 0
    if attn is None or linear is None:
        return None
    if arch.is_moe:
        if not (arch.moe_intermediate_size and arch.num_experts):
            return None
        expert = 3 * h * arch.moe_intermediate_size
        mlp_total = expert * arch.num_experts + h * arch.num_experts
        mlp_active = expert * (arch.experts_per_token or 1) + h * arch.num_experts
    else:
        if not arch.intermediate_size:
            return None
        mlp_total = mlp_active = 3 * h * arch.intermediate_size
    mixers = sum(
        linear if k == LINEAR_ATTENTION else attn
        for k in kinds
        if k in (FULL_ATTENTION, SLIDING_ATTENTION, LINEAR_ATTENTION)
    )
    unknown = [k for k in kinds if k not in (FULL_ATTENTION, SLIDING_ATTENTION, LINEAR_ATTENTION)]
    mixers += attn * len(unknown)
    embedding = vocab * h * (1 if arch.tie_word_embeddings else 2)
    mtp = 0
    if arch.has_mtp:
        from serving.planner.memory import mtp_head_bytes

        mtp = mtp_head_bytes(arch, dtype_bytes=1) or 0
    vision = VISION_TOWER_PARAMS if arch.has_vision else 0
    total = embedding + mixers + layers * mlp_total + mtp + vision
    active = embedding + mixers + layers * mlp_active + vision
    return ParamCount(total=total, active=active, embedding=embedding, vision=vision, mtp=mtp)


def _billions(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def estimate_weights(
    arch: ModelArch,
    *,
    quant_method: str | None = None,
    bits: int | None = None,
    group_size: int | None = None,
    quantization: str | None = None,
    gguf_file_type: int | None = None,
) -> WeightsEstimate | None:
    """The checkpoint's bytes from its architecture and quantization; None when the architecture
    does not give a parameter count. The arch's own params_total, when imported, is used as is."""
    params = count_params(arch)
    if params is None and arch.params_total:
        # A parameter count without the shapes (e.g. typed in): all of it at the checkpoint's width.
        params = ParamCount(total=arch.params_total, active=arch.params_active or arch.params_total, embedding=0)
    elif params is not None and arch.params_total:
        params = ParamCount(
            total=arch.params_total,
            active=arch.params_active or params.active,
            embedding=min(params.embedding, arch.params_total),
            vision=params.vision,
            mtp=params.mtp,
        )
    if params is None:
        return None
    label = (quantization or "").strip()
    gguf_type = GGUF_FILE_TYPES.get(gguf_file_type) if gguf_file_type is not None else None
    gguf_type = gguf_type or next((k for k in GGUF_BPW if label.upper().startswith(k)), None)
    method = (quant_method or "").lower()
    body = params.total - params.embedding
    what = f"{_billions(params.total)} parameters"
    if gguf_type:
        bpw = GGUF_BPW[gguf_type]
        return WeightsEstimate(int(params.total * bpw / 8), params, f"{what} at {gguf_type} (~{bpw} bits each)")
    if method in ("fp8", "fbgemm_fp8") or (method == "compressed-tensors" and bits == 8) or label.lower() == "fp8":
        return WeightsEstimate(body + params.embedding * 2, params, f"{what}: FP8 linear layers, 16-bit embeddings")
    if bits and bits < 16 and (method or label):
        group = group_size if group_size and group_size > 0 else None
        per_weight = bits / 8 + ((2 + bits / 8) / group if group else 0.0)
        grouping = f"group {group}" if group else "per channel"
        return WeightsEstimate(
            int(body * per_weight) + params.embedding * 2,
            params,
            f"{what} at {bits}-bit {method or label} ({grouping}), 16-bit embeddings",
        )
    width = DTYPE_BYTES.get((arch.torch_dtype or label or "bfloat16").lower(), 2.0)
    return WeightsEstimate(int(params.total * width), params, f"{what} at {int(width * 8)} bits")
