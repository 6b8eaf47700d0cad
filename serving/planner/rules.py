"""The checks: each reads the computed Context and adds findings (the seeds' stories).

Numbers in messages are GiB with two decimals; codes are in findings.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from serving.engines.base import (
    GGUF_FLOAT_FILE_TYPES,
    LINEAR_ATTENTION_HYBRID,
    QWEN3_5,
    FamilySupport,
    GgufLoader,
    GgufPlugin,
)
from serving.engines.registry import engine_label, get_adapter, gguf_servers
from serving.engines.versions import LATEST_KNOWN, version_at_or_after, version_in, version_lt
from serving.planner import findings as F
from serving.planner.findings import Severity
from serving.planner.inputs import GPU_SPLIT_ENGINES, LAYER_SPLIT_ENGINES
from serving.planner.knobs import knob_of
from serving.planner.layouts import full_layouts, tp_problems, valid_tp_sizes
from serving.planner.memory import GiB, mtp_head_bytes
from serving.planner.report import Context

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def run(ctx: Context) -> None:
    _arch_complete(ctx)
    _weights_known(ctx)
    if ctx.request.engine in GPU_SPLIT_ENGINES:
        _parallel(ctx)
        _quantization(ctx)
        _parsers(ctx)
        _gpu_quirks(ctx)
        _hybrid_block(ctx)  # vLLM's hybrid attention block (fit sets ctx.hybrid_block for vLLM alone)
    else:
        _llama_cache_types(ctx)
        _vision_projector(ctx)
    _engine_support(ctx)
    _gguf_architecture(ctx)
    _memory(ctx)
    _context(ctx)
    _mtp(ctx)
    _idle(ctx)


# ---- helpers ------------------------------------------------------------------------------


def is_qwen35_family(ctx: Context) -> bool:
    """Qwen3.5 and its successors (3.6, 3.8) share the Qwen3_5 architecture (Gated DeltaNet)."""
    arch = ctx.request.arch
    name = (arch.architecture or "").lower()
    family = (arch.family or "").lower().replace(" ", "")
    if name.startswith("qwen3_5") or name.startswith("qwen35"):
        return True
    match = re.match(r"qwen(\d+)\.(\d+)", family)
    return bool(match and (int(match.group(1)), int(match.group(2))) >= (3, 5))


def is_old_qwen3(ctx: Context) -> bool:
    arch = ctx.request.arch
    return (arch.family or "").lower() == "qwen3" or (arch.architecture or "") in {
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
    }


def _engine_name(ctx: Context) -> str:
    return engine_label(ctx.request.engine)


def _parallel_knobs(ctx: Context) -> str:
    """The engine's own knobs for its parallel layout ("tp_size/pp_size" on SGLang)."""
    engine = ctx.request.engine
    knobs = f"{knob_of(engine, 'tp')}/{knob_of(engine, 'pp')}"
    return knobs + f" or {knob_of(engine, 'dp')} (the data-parallel replicas)" if ctx.settings.dp > 1 else knobs


def _layout_advice(ctx: Context) -> str:
    n = len(ctx.gpus)
    arch = ctx.request.arch
    options = [f"TP={tp} x PP={pp}" for tp, pp in full_layouts(arch, n) if pp > 1 or tp == n]
    parts = []
    if options:
        parts.append(f"use all {n} GPUs with " + " or ".join(options[:3]))
    parts.append(f"or serve it with llama.cpp, whose layer split uses all {n} GPUs whatever the head count")
    return "; ".join(parts)


# ---- rules --------------------------------------------------------------------------------


def _arch_complete(ctx: Context) -> None:
    arch = ctx.request.arch
    if ctx.request.engine in LAYER_SPLIT_ENGINES and ctx.request.gguf is not None:
        return
    missing = [n for n in ("num_layers", "num_kv_heads", "num_attention_heads") if getattr(arch, n) is None]
    if arch.head_dim is None and not (arch.hidden_size and arch.num_attention_heads) and not arch.is_mla:
        missing.append("head_dim")
    if missing:
        ctx.add(
            INFO,
            F.ARCH_INCOMPLETE,
            f"The model's architecture facts lack {', '.join(missing)}, so "
            + ("the checks that need them were skipped." if ctx.per_token_gpu is not None else "KV sizes are unknown."),
            "Import the model's config.json or GGUF header to fill them in.",
        )


def _weights_known(ctx: Context) -> None:
    """The planner says when it judges on estimated weights, and when it cannot judge them at all."""
    req = ctx.request
    estimate = ctx.weights_estimate
    if estimate is not None:
        active = estimate.params.active
        moe = f" ({active / 1e9:.1f}B active per token)" if active < estimate.params.total else ""
        ctx.add(
            WARNING,
            F.WEIGHTS_ESTIMATED,
            f"The weights are estimated at {gib(estimate.bytes)} from the architecture: {estimate.basis}{moe}; "
            "no checkpoint size is known, so the memory figures rest on that estimate.",
            "Import the model by its repository id (the safetensors index or GGUF file gives the real size).",
        )
    elif req.weights_bytes is None and not (req.gguf and req.gguf.file_size):
        ctx.add(
            WARNING,
            F.WEIGHTS_UNKNOWN,
            "The weights' size is unknown and the architecture facts do not give a parameter count, so whether "
            "the model fits the GPUs is not judged.",
            "Import the model by its repository id, or from its config.json with the weights' size.",
        )


def _parallel(ctx: Context) -> None:
    s, arch = ctx.settings, ctx.request.arch
    world = s.gpus_needed
    if world == 1 and not ctx.request.gpus and get_adapter(ctx.request.engine).cpu_build:
        pass  # vLLM's CPU build (fit._size_vllm_cpu says so)
    elif world > len(ctx.gpus) and not ctx.request.gpus:
        ctx.add(
            ERROR,
            F.PARALLEL_TOO_MANY_GPUS,
            f"{_engine_name(ctx)} needs at least one GPU, and this host has none (CPU only).",
            "Serve a GGUF of the model with llama.cpp, which runs on the CPU, or choose a host with GPUs.",
        )
    elif world > len(ctx.gpus):
        ctx.add(
            ERROR,
            F.PARALLEL_TOO_MANY_GPUS,
            f"{s.world_text} needs {world} GPUs but the engine sees {len(ctx.gpus)}.",
            f"Lower {_parallel_knobs(ctx)} to fit {len(ctx.gpus)} GPUs.",
        )
    problems = tp_problems(arch, s.tp)
    if problems:
        valid = [str(t) for t in valid_tp_sizes(arch, max(len(ctx.gpus), s.tp))]
        for code, what in problems:
            ctx.add(
                ERROR,
                code,
                f"Tensor parallel size {s.tp} does not divide the model's {what}; "
                f"{ctx.request.engine} refuses to shard it that way.",
                f"Valid TP sizes here: {', '.join(valid) or 'none'}. " + _layout_advice(ctx) + ".",
            )
    if arch.num_layers and s.pp > arch.num_layers:
        ctx.add(
            ERROR,
            F.PP_LAYERS,
            f"PP={s.pp} is more stages than the model's {arch.num_layers} layers.",
            "Use fewer pipeline stages.",
        )


def _idle(ctx: Context) -> None:
    idle = [g for g in ctx.request.gpus if g not in ctx.used]
    if not ctx.used or not idle:
        return
    held = sum(g.memory_bytes for g in idle)
    n = len(ctx.request.gpus)
    fix = ""
    if ctx.request.engine in GPU_SPLIT_ENGINES and not ctx.settings.kv_cache_memory_bytes:
        fix = _layout_advice(ctx) + "; or give the idle GPUs another service."
    ctx.add(
        WARNING,
        F.GPUS_IDLE,
        f"{len(idle)} of {n} GPUs stay idle ({len(ctx.used)}/{n} used = {len(ctx.used) / n:.0%}), "
        f"holding {gib(held)} that this deployment cannot use.",
        fix or "Use a layout that spans every GPU, or run another model on the idle ones.",
    )


def _memory(ctx: Context) -> None:
    if not ctx.used or ctx.weights_per_gpu is None or ctx.budget_per_gpu is None:
        return
    s = ctx.settings
    mem = ctx.gpu_memory
    if ctx.request.engine in GPU_SPLIT_ENGINES:
        room = ctx.budget_per_gpu - ctx.overheads.total
        if ctx.weights_per_gpu > room:
            ctx.add(
                ERROR,
                F.WEIGHTS_OOM,
                f"Weights need {gib(ctx.weights_per_gpu)} per GPU (TP={s.tp}, PP={s.pp}) but each GPU has "
                f"{gib(mem)}, {gib(room)} of it usable after the engine's overheads: a permanent OOM.",
                "Use a smaller quantization (e.g. 4-bit AWQ/GPTQ or a GGUF on llama.cpp), more GPUs, "
                "or cpu_offload_gb.",
            )
            return
        pool = ctx.pool_per_gpu
        if pool is not None and pool <= 0:
            ctx.add(
                ERROR,
                F.KV_NO_ROOM,
                f"After {gib(ctx.weights_per_gpu)} of weights and {gib(ctx.overheads.total)} of overheads "
                f"per GPU, "
                f"nothing is left for the KV cache ({gib(pool)}).",
                "Raise gpu_memory_utilization, lower max_num_batched_tokens/max_num_seqs, set "
                "language_model_only, or use more GPUs.",
            )
        return
    need = ctx.weights_per_gpu + (ctx.pool_per_gpu or 0) + ctx.overheads.total
    if need > mem:
        weights_only = ctx.weights_per_gpu + ctx.overheads.total > mem
        ctx.add(
            ERROR,
            F.WEIGHTS_OOM if weights_only else F.KV_NO_ROOM,
            f"llama.cpp would put {gib(ctx.weights_per_gpu)} of weights and "
            f"{gib(ctx.pool_per_gpu or 0)} of KV "
            f"cache on the busiest GPU ({gib(need)} with buffers) but it has {gib(mem)}.",
            "Lower ctx_size or parallel, quantize the KV cache (cache_type_k/v q8_0 with flash_attn), "
            "offload fewer layers (n_gpu_layers), or add GPUs.",
        )


def _context(ctx: Context) -> None:
    s, arch = ctx.settings, ctx.request.arch
    gpu_split = ctx.request.engine in GPU_SPLIT_ENGINES
    requested = s.max_model_len if gpu_split else ctx.max_model_len
    trained = arch.native_context or (ctx.request.gguf.context_length if ctx.request.gguf else None)
    if s.native_override and not s.rope_factor:
        trained = s.native_override
    if requested and trained and requested > trained and not s.rope_factor and not gpu_split:
        knob = get_adapter(ctx.request.engine).context_knob
        ctx.add(
            WARNING,
            F.CONTEXT_BEYOND_NATIVE,
            f"Context {requested:,} is beyond the model's native window of {trained:,} tokens: "
            f"{_engine_name(ctx)} {get_adapter(ctx.request.engine).beyond_trained_context}.",
            f"Set {knob} to {trained:,} or less.",
        )
    elif requested and trained and requested > trained and not s.rope_factor:
        ctx.add(
            ERROR if gpu_split else WARNING,
            F.CONTEXT_BEYOND_NATIVE,
            f"Context {requested:,} is beyond the model's native window of {trained:,} tokens and no rope "
            f"scaling is set: {_engine_name(ctx)} refuses it.",
            f"Serve at most {trained:,} tokens, or add rope scaling (hf_overrides "
            '{"rope_scaling": {"rope_type": "yarn", "factor": '
            f'{math.ceil(requested / trained)}, "original_max_position_embeddings": {trained}}}}}).',
        )
    if not gpu_split or ctx.pool_per_gpu is None or ctx.pool_per_gpu <= 0 or not ctx.max_model_len:
        return
    if ctx.full_len_seqs == 0:
        ctx.add(
            ERROR,
            F.KV_CONTEXT_UNBACKED,
            f"One sequence of {ctx.max_model_len:,} tokens needs more KV cache than the pool holds "
            f"({gib(ctx.pool_per_gpu)} per GPU); the largest context that fits is "
            f"{ctx.max_ctx_one or 0:,} tokens.",
            f"Set max_model_len to {ctx.max_ctx_one or 0:,} or less, use an fp8 KV cache, or add GPUs.",
        )
        return
    seqs = ctx.max_num_seqs or 1  # None: the engine serves as many as its pool holds
    knob = get_adapter(ctx.request.engine).concurrency_knob
    if ctx.full_len_seqs is not None and seqs > ctx.full_len_seqs:
        ctx.add(
            WARNING,
            F.KV_CONCURRENCY_SHORT,
            f"{knob}={seqs} but the pool holds only {ctx.full_len_seqs} sequence(s) at the full "
            f"{ctx.max_model_len:,} tokens ({ctx.pool_tokens or 0:,} tokens in all); "
            "longer concurrent requests "
            "get preempted.",
            f"Set {knob} to {ctx.full_len_seqs}, or accept preemption when several long requests overlap.",
        )


def _hybrid_block(ctx: Context) -> None:
    """vllm#34445 (merged 2026-02-12, first in 0.16) asserts block_size <= max_num_batched_tokens in
    Mamba align mode (prefix caching on); vllm#36697 hit 2096 > 2048. 0.33 no longer asserts
    (vllm/v1/core/sched/scheduler.py _mamba_block_aligned_split); seed 002 says >= 0.22 handles it."""
    block, tokens = ctx.hybrid_block, ctx.batched_tokens
    version = ctx.request.engine_version
    if block is None or tokens is None or block <= tokens:
        return
    if not version_in(version, "0.16", "0.22"):
        return
    prefix = ctx.settings.prefix_caching
    if prefix is False:
        return
    ctx.add(
        ERROR if prefix else WARNING,
        F.HYBRID_BATCHED_TOKENS,
        f"This hybrid model needs an attention block of {block} tokens at TP={ctx.settings.tp}, above "
        f"max_num_batched_tokens={tokens}; vLLM {_release_shown(ctx)} asserts 'block_size ({block}) must be <= "
        f"max_num_batched_tokens ({tokens})' when prefix caching is on.",
        f"Set max_num_batched_tokens to {max(8192, block)} (or at least {block}), or upgrade vLLM to 0.22+.",
    )


# quant flag -> checkpoint quant_method values it can load (vllm/model_executor/layers/quantization)
_QUANT_COMPAT: dict[str, set[str | None]] = {
    "awq": {"awq"},
    "awq_marlin": {"awq"},
    "gptq": {"gptq"},
    "gptq_marlin": {"gptq"},
    "compressed-tensors": {"compressed-tensors"},
    "moe_wna16": {"awq", "gptq"},
    "modelopt": {"modelopt"},
    "modelopt_fp4": {"modelopt"},
    "mxfp4": {"mxfp4"},
    "bitsandbytes": {"bitsandbytes", None},
    "fp8": {"fp8", None},  # None: online FP8 quantization of a bf16 checkpoint
    "fbgemm_fp8": {"fbgemm_fp8", None},
    "ptpc_fp8": {"ptpc_fp8", None},
    "gguf": {"gguf"},
}


def _quantization(ctx: Context) -> None:
    flag = ctx.settings.quantization
    ckpt = (ctx.request.checkpoint_quant or "").lower() or None
    if flag is None or flag not in _QUANT_COMPAT:
        return
    if ckpt in _QUANT_COMPAT[flag]:
        return
    what = f"a {ckpt} checkpoint" if ckpt else "an unquantized checkpoint"
    ctx.add(
        ERROR,
        F.QUANT_FLAG_MISMATCH,
        f"quantization={flag} contradicts {what}"
        + (f" ({ctx.request.quant_bits}-bit)" if ctx.request.quant_bits else "")
        + ": the weights will not load.",
        "Drop the quantization flag and let the engine auto-detect it from the checkpoint's quantization_config.",
    )


def model_families(ctx: Context) -> tuple[str, ...]:
    """The families of models engine releases differ on (serving.engines.base) this one is in. The
    Qwen3.5 family is a linear-attention (Gated DeltaNet) hybrid even when its config does not say."""
    if is_qwen35_family(ctx):
        return (QWEN3_5, LINEAR_ATTENTION_HYBRID)
    return (LINEAR_ATTENTION_HYBRID,) if ctx.request.arch.is_hybrid else ()


_FAMILY_NAMES = {QWEN3_5: "Qwen3.5", LINEAR_ATTENTION_HYBRID: "linear-attention hybrid"}


def _engine_support(ctx: Context) -> None:
    req = ctx.request
    engine, version, shown = req.engine, req.engine_version, _release_shown(ctx)
    adapter = get_adapter(engine)
    support: list[tuple[str, FamilySupport]] = [
        (family, adapter.family_support[family]) for family in model_families(ctx) if family in adapter.family_support
    ]
    # A release at or before `broken_through` loads the model but cannot serve it.
    if any(s.broken_through and version and not version_lt(s.broken_through, version) for _, s in support):
        ctx.add(
            ERROR,
            F.ENGINE_UNSUPPORTED_ARCH,
            f"{adapter.label} {shown} cannot run this Gated DeltaNet hybrid (Qwen3.5 family): it crashes or "
            "answers with an immediate EOS.",
            f"Use vLLM >= 0.17 or llama.cpp, or a newer {adapter.label} release.",
        )
    stored = req.min_engine_versions if isinstance(req.min_engine_versions, Mapping) else {}
    floors = {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str) and len(v) <= 40}
    for _, s in support:
        if s.first:
            floors.setdefault(engine, s.first)
    need = floors.get(engine)
    if need and version_lt(version, need):
        ctx.add(
            ERROR,
            F.ENGINE_VERSION_FLOOR,
            f"{engine} {shown} is older than {need}, the first release that runs this model's architecture.",
            f"Install {engine} >= {need}.",
        )
    for family, s in support:
        for floor in s.packages:
            if not version_in(version, *floor.releases):
                continue
            have = req.packages.get(floor.package)
            if have is None or version_lt(have, floor.minimum):
                ctx.add(
                    ERROR if have else WARNING,
                    F.ENGINE_PACKAGE_FLOOR,
                    f"{adapter.label} {shown} loads {_FAMILY_NAMES[family]} configs only with {floor.package} >= "
                    f"{floor.minimum}"
                    + (f" ({floor.why})" if floor.why else "")
                    + (f"; this environment has {have}." if have else "; the installed version is unknown."),
                    f"pip install '{floor.package}>={floor.minimum}' in the engine's venv.",
                )


def _gguf_architecture(ctx: Context) -> None:
    """A GGUF the engine's own GGUF loader (the adapter's gguf_loader; llama.cpp reads every GGUF)
    does not serve: on a release without one (removed_in), unless the engine's venv holds the package
    that brings one back (then as that package's loader reads it: _gguf_plugin), of an architecture it
    does not read or reads only from a later release, with a package too new for it, and a quantized
    one on a CPU build without the kernels of llama.cpp's types."""
    req = ctx.request
    adapter = get_adapter(req.engine)
    loader = adapter.gguf_loader
    if req.gguf is None or loader is None:
        return
    arch, label, version, shown = req.gguf.architecture, _engine_name(ctx), req.engine_version, _release_shown(ctx)
    others = gguf_servers(arch, besides=req.engine, gpus=bool(req.gpus))  # who else serves this file
    who, reader = label, "Its GGUF loader"
    if loader.removed_in and version_at_or_after(version, loader.removed_in):
        plugin = _gguf_plugin(ctx, loader, others)
        if plugin is None:
            return
        loader, reader = plugin.loader, plugin.package
        who = f"{label} {shown} with {plugin.package} {req.packages[plugin.package]}"
    why = loader.refusal(arch)
    if why:
        loads = ", ".join(sorted(loader.architectures))
        ctx.add(
            ERROR,
            F.ENGINE_UNSUPPORTED_ARCH,
            f"{who} cannot serve a GGUF of architecture {arch!r}: {why}. {reader} reads {loads}.",
            f"Serve this GGUF with {others}, or the model's Hugging Face checkpoint with {label}.",
        )
        return
    first = loader.architectures[arch]
    if first and version_lt(version, first):
        ctx.add(
            ERROR,
            F.ENGINE_VERSION_FLOOR,
            f"{label} {shown} cannot load a GGUF of architecture {arch!r}: its GGUF loader reads one from {first}.",
            f"Install {label} >= {first}, or serve this GGUF with {others}.",
        )
    ceiling = loader.package_ceilings.get(arch)
    if ceiling is not None:
        have = req.packages.get(ceiling.package)
        too_new = bool(have) and version_at_or_after(have, ceiling.below)
        if too_new or (not have and version_in(version, *ceiling.releases)):
            ctx.add(
                ERROR if too_new else WARNING,
                F.ENGINE_PACKAGE_CEILING,
                f"{label} {shown} loads a GGUF of architecture {arch!r} only with {ceiling.package} < "
                f"{ceiling.below}: {ceiling.why}"
                + (
                    f"; this environment has {have}."
                    if have
                    else f"; its releases from {ceiling.releases[0]} "
                    f"install {ceiling.package} {ceiling.below} or later, and this environment's is unknown."
                ),
                f"pip install '{ceiling.package}<{ceiling.below}' in the engine's venv, or serve this GGUF with "
                f"{others}.",
            )
    file_type = req.gguf.file_type
    on_cpu_build = not loader.cpu_quantized and adapter.cpu_build and not req.gpus
    if on_cpu_build and file_type is not None and file_type not in GGUF_FLOAT_FILE_TYPES:
        ctx.add(
            ERROR,
            F.ENGINE_GGUF_CPU_KERNELS,
            f"{label}'s CPU build has no kernels for llama.cpp's quantized types, and this GGUF's weights are "
            f"quantized (general.file_type {file_type}): it fails at its first forward pass.",
            f"Serve this GGUF with llama.cpp, or a GGUF of F16, BF16 or F32 weights with {label}.",
        )


def _release_shown(ctx: Context) -> str:
    """The engine release a request names, in words: at latest, the release latest runs on the host
    (PlanRequest.latest_here), else the latest the panel knows, saying which."""
    version = (ctx.request.engine_version or "").strip()
    if version in ("", "latest"):
        return f"{LATEST_KNOWN.get(ctx.request.engine) or 'latest'} (the latest release the panel knows)"
    if ctx.request.latest_here:
        return f"{version} (what latest runs on this host)"
    return version


def _gguf_plugin(ctx: Context, loader: GgufLoader, others: str) -> GgufPlugin | None:
    """On a release without its own GGUF loader (removed_in): the package that brings one back
    (GgufLoader.plugin) when the engine's venv on a host with GPUs has it, warning where it reads the
    model's config beside the file; else None, with the error saying why the GGUF does not load, what
    the panel knows of the venv (PlanRequest.packages, packages_absent) and what would load it."""
    req = ctx.request
    label, shown, plugin = _engine_name(ctx), _release_shown(ctx), loader.plugin
    removed = f"{label} {shown} has no GGUF loader: it was removed in {loader.removed_in}"
    downgrade = f"install {label} < {loader.removed_in}"
    if plugin is None:
        ctx.add(
            ERROR,
            F.ENGINE_GGUF_REMOVED,
            f"{removed}, so it cannot load this GGUF file.",
            f"Serve this GGUF with {others}, or {downgrade}.",
        )
        return None
    have, package = req.packages.get(plugin.package), plugin.package
    if plugin.gpu_only and not req.gpus:
        ctx.add(
            ERROR,
            F.ENGINE_GGUF_REMOVED,
            f"{removed}, and {package}, which brings one back, builds and runs only with a CUDA or ROCm toolkit"
            + (f" (this venv has {package} {have})" if have else "")
            + f": {label}'s CPU build cannot load this GGUF file.",
            f"Serve this GGUF with {others}, or {downgrade}.",
        )
        return None
    if have:
        sources = [str(req.knobs.get(k) or "").strip() for k in plugin.config_knobs]
        named = any(s and not s.lower().endswith(".gguf") for s in sources)  # a GGUF is no config's source
        if plugin.config_beside and not named:
            knobs = " or ".join(plugin.config_knobs)
            ctx.add(
                WARNING,
                F.ENGINE_GGUF_CONFIG,
                f"{label} {shown} loads this GGUF with {package} {have}, which takes the model's config.json and "
                f"tokenizer from the GGUF's folder, not from the file (this revision sets no {knobs}, and the "
                f"panel's download holds the GGUF alone): unless they sit beside the GGUF on the host, {label} "
                "stops at 'Unrecognized model in <folder>. Should have a `model_type` key in its config.json'.",
                f"Set {plugin.config_knobs[0]} to a folder under the host's model folders that holds the original "
                f"model's config.json and tokenizer files (or copy them beside the GGUF), have an admin set "
                f"{plugin.config_knobs[-1]} to the original model's Hugging Face repository (as {package}'s README "
                "does; the host then fetches it when the engine starts, which needs the Hub, and a token for a "
                f"gated one), or serve this GGUF with {others}.",
            )
        return plugin
    if package in req.packages_absent:
        said = f"{removed}, and {label}'s venv on this host has no {package}, which brings one back, so it cannot "
        said += "load this GGUF file."
    else:
        said = f"{removed}. {package} brings one back, and the panel does not know whether {label}'s venv on this "
        said += "host has it (no install the host recorded lists that venv's packages), so it cannot tell that this "
        said += "GGUF loads."
    gpus_only = " (GPU builds only)" if plugin.gpu_only else ""
    ctx.add(
        ERROR,
        F.ENGINE_GGUF_REMOVED,
        said,
        f"Install {package} into {label}'s venv on the host{gpus_only}, then press Read again beside that install "
        f"on the host's page (Engines; or install {label} there again) so that the panel knows, serve this GGUF "
        f"with {others}, or {downgrade}.",
    )
    return None


def _vision_projector(ctx: Context) -> None:
    if ctx.settings.mmproj or not ctx.vision_on:
        return
    explicit = ctx.request.vision is True
    ctx.add(
        ERROR if explicit else WARNING,
        F.VISION_NO_MMPROJ,
        "Image input needs the vision projector on llama.cpp; without --mmproj every image request fails "
        "with 'image input is not supported'.",
        "Download the model's mmproj GGUF (F16/BF16) and set mmproj to its path, or turn vision off.",
    )


def _parsers(ctx: Context) -> None:
    s, req = ctx.settings, ctx.request
    reasoning = req.recommended_reasoning_parser
    if reasoning and (s.reasoning_parser is None or s.reasoning_parser.lower() == "none"):
        ctx.add(
            WARNING,
            F.PARSER_REASONING_MISSING,
            "This thinking model is served without a reasoning parser: its <think> block lands in "
            "message.content and can use up max_tokens before the answer starts.",
            f"Set reasoning_parser={reasoning}.",
        )
    wanted = req.recommended_tool_parser
    if wanted is None and is_qwen35_family(ctx):
        wanted = "qwen3_coder"  # seed 002: Qwen3.5+ (3.6, 3.8) need qwen3_coder
    elif wanted is None and is_old_qwen3(ctx):
        wanted = "hermes"
    have = s.tool_parser
    if wanted and have and have.lower() != wanted.lower():
        why = " (hermes is for the older Qwen3 generation)" if have == "hermes" and is_qwen35_family(ctx) else ""
        ctx.add(
            WARNING,
            F.PARSER_TOOL_WRONG,
            f"tool_call_parser={have} does not match this model's tool format{why}: tool calls arrive as "
            "plain text and never execute.",
            f"Set tool_call_parser={wanted}.",
        )


def _gpu_quirks(ctx: Context) -> None:
    s, env, req = ctx.settings, ctx.request.env, ctx.request
    used = ctx.used or ctx.gpus
    env_backend = env.get("VLLM_ATTENTION_BACKEND")
    backend = (s.attention_backend or env_backend or "").upper()
    adapter = get_adapter(req.engine)
    ignored_since = adapter.env_ignored_since.get("VLLM_ATTENTION_BACKEND")
    if env_backend and ignored_since is not None and not version_lt(req.engine_version, ignored_since):
        ctx.add(
            WARNING,
            F.ENV_ATTENTION_BACKEND_IGNORED,
            f"VLLM_ATTENTION_BACKEND={env_backend} is ignored by {adapter.label} "
            f"{_release_shown(ctx) if req.engine_version else '0.26+'} "
            "(removed from the source; vllm#30564).",
            f"Pass attention_backend={env_backend} instead.",
        )
        if not s.attention_backend:
            backend = ""
    if any(g.is_blackwell_consumer for g in used) and backend not in {"TRITON_ATTN"}:
        broken = backend in {"FLASH_ATTN", "FLASHINFER"}
        ctx.add(
            ERROR if broken else WARNING,
            F.GPU_BLACKWELL_ATTENTION,
            "Blackwell sm_120 GPUs: FLASH_ATTN fails with an undefined symbol and FlashInfer's JIT "
            "arch check fails, so the server dies at start"
            + ("" if broken else " if either is picked automatically")
            + ".",
            "Use Triton attention: attention_backend=TRITON_ATTN (older vLLM: env VLLM_ATTENTION_BACKEND).",
        )
    multi = s.tp * s.pp > 1 and len(used) > 1
    no_p2p = any(g.p2p is False for g in used) and not all(g.nvlink for g in used)
    if multi and no_p2p and env.get("NCCL_P2P_DISABLE") != "1":
        ctx.add(
            ERROR,
            F.GPU_P2P_HANG,
            "These GPUs have no working PCIe P2P (GeForce, no NVLink); with P2P left on, multi-GPU runs hang "
            "mid-generation or crawl about 4x slower.",
            "Set env NCCL_P2P_DISABLE=1 (vLLM then falls back to its PYNCCL all-reduce).",
        )


def _llama_cache_types(ctx: Context) -> None:
    s = ctx.settings
    v_quantized = s.kv_bytes_v is not None and s.kv_bytes_v not in (2.0, 4.0)
    if v_quantized and s.flash_attn == "off":
        ctx.add(
            ERROR,
            F.LLAMA_QUANT_V_NEEDS_FA,
            "A quantized V cache needs flash attention; llama.cpp refuses to start with flash_attn off.",
            "Set flash_attn=on (or auto), or use cache_type_v=f16.",
        )


def _mtp(ctx: Context) -> None:
    from serving.planner.knobs import spec_is_mtp

    s, arch = ctx.settings, ctx.request.arch
    if ctx.request.engine not in GPU_SPLIT_ENGINES:
        return
    enabled = spec_is_mtp(s)
    if enabled and not arch.has_mtp:
        ctx.add(
            ERROR if arch.has_mtp is False else WARNING,
            F.MTP_NO_HEAD,
            "MTP speculative decoding is on but this checkpoint "
            + ("has no MTP head." if arch.has_mtp is False else "is not known to carry an MTP head."),
            "Remove speculative_config, or use a draft model / ngram method instead.",
        )
        return
    if not arch.has_mtp:
        return
    head = mtp_head_bytes(arch)
    if head is None:
        return
    world = s.tp * s.pp
    per_gpu = math.ceil(head / world)
    dims_known = ctx.per_token_gpu is not None and ctx.pool_per_gpu is not None and ctx.per_token_gpu > 0
    tokens = int(per_gpu // ctx.per_token_gpu) if dims_known and ctx.per_token_gpu else None
    cost = f"{gib(per_gpu)} per GPU" + (f", about {tokens:,} tokens of KV pool" if tokens is not None else "")
    if enabled:
        message = (
            f"MTP drafting ({s.spec_tokens} token(s)) loads the BF16 MTP head: {cost}, plus one more "
            "attention layer of KV per token."
        )
        fix = "Turn it off (speculative_config empty) when long concurrent contexts matter more than decode speed."
    else:
        message = f"The checkpoint carries an MTP head that is off; enabling it would cost {cost}."
        fix = (
            'Enable it with speculative_config {"method": "mtp", "num_speculative_tokens": 2} '
            "when decode speed matters."
        )
    ctx.add(INFO, F.MTP_COST, message, fix)
