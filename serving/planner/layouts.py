"""Tensor/pipeline-parallel validity: which layouts an engine can run for an architecture."""

from __future__ import annotations

from serving.arch import ModelArch
from serving.engines.registry import get_adapter
from serving.planner import findings as F
from serving.planner.inputs import GPU_SPLIT_ENGINES


def tp_problems(arch: ModelArch, tp: int) -> list[tuple[str, str]]:
    """(code, what does not divide) for a TP size; [] = valid as far as the arch says.

    vLLM config/model.py verify_with_parallel_config (attention heads), layers/linear.py
    QKVParallelLinear (KV heads divide tp or tp divides them), distributed/utils.py
    ensure_divisibility (hidden/intermediate/MoE widths), mamba_utils.py (GDN heads).
    """
    if tp <= 1:
        return []
    problems: list[tuple[str, str]] = []
    if arch.num_attention_heads and arch.num_attention_heads % tp:
        problems.append((F.TP_ATTENTION_HEADS, f"{arch.num_attention_heads} attention heads"))
    kv = arch.num_kv_heads
    if kv and not arch.is_mla and ((kv >= tp and kv % tp) or (kv < tp and tp % kv)):
        problems.append((F.TP_KV_HEADS, f"{kv} KV heads"))
    if arch.hidden_size and arch.hidden_size % tp:
        problems.append((F.TP_HIDDEN_SIZE, f"hidden size {arch.hidden_size}"))
    for name, width in (
        ("intermediate size", arch.intermediate_size),
        ("MoE intermediate size", arch.moe_intermediate_size),
    ):
        if width and width % tp:
            problems.append((F.TP_INTERMEDIATE, f"{name} {width}"))
    for name, heads in (
        ("linear-attention key heads", arch.linear_num_key_heads),
        ("linear-attention value heads", arch.linear_num_value_heads),
    ):
        if heads and heads % tp:
            problems.append((F.TP_LINEAR_HEADS, f"{heads} {name}"))
    return problems


def valid_tp_sizes(arch: ModelArch, max_gpus: int) -> list[int]:
    return [tp for tp in range(1, max_gpus + 1) if not tp_problems(arch, tp)]


def layouts(arch: ModelArch, max_gpus: int) -> list[tuple[int, int]]:
    """Every valid (tp, pp) with tp x pp <= max_gpus and pp <= layers, smallest first."""
    layers = arch.num_layers or 1
    out = []
    for tp in valid_tp_sizes(arch, max_gpus):
        for pp in range(1, max_gpus // tp + 1):
            if pp <= layers:
                out.append((tp, pp))
    return sorted(out, key=lambda tp_pp: (tp_pp[0] * tp_pp[1], tp_pp[1]))


def full_layouts(arch: ModelArch, gpus: int) -> list[tuple[int, int]]:
    """Valid layouts that use every one of `gpus` GPUs (TP x PP == gpus)."""
    return [(tp, pp) for tp, pp in layouts(arch, gpus) if tp * pp == gpus]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def describe_layout(
    engine: str,
    *,
    tp: int,
    pp: int,
    used: int,
    present: int,
    dp: int = 1,
    split_mode: str = "layer",
    tensor_split: tuple[float, ...] = (),
    n_gpu_layers: int | None = None,
) -> str:
    """The layout in the engine's own words: TP x PP (x DP replicas) for vLLM and SGLang; for llama.cpp its
    --split-mode (layer: whole layers per GPU; row: each layer's rows across GPUs; none: one GPU),
    --tensor-split shares and how many GPUs hold layers; Ollama splits by layer by itself."""
    gpus = f"{used} of {present} GPU{'s' if present != 1 else ''}"
    if engine in GPU_SPLIT_ENGINES:
        replicas = f" × DP {dp}" if dp > 1 else ""
        return f"TP {tp} × PP {pp}{replicas} on {gpus}"
    if not present:
        return "CPU only"
    if n_gpu_layers == 0:
        return f"CPU only (-ngl 0: no layers on the {present} GPU{'s' if present != 1 else ''})"
    if not used:  # a partial offload of an unknown number of layers: which GPUs hold some is unknown
        gpus = f"the {present} GPU{'s' if present != 1 else ''}"
    offload = f", -ngl {n_gpu_layers}" if n_gpu_layers is not None and n_gpu_layers < 999 else ""
    if "split_mode" not in getattr(get_adapter(engine), "knobs", {}):  # Ollama: it splits by layer itself
        return f"layer split over {gpus}{offload}"
    if split_mode == "none":
        return f"--split-mode none: the whole model on one GPU ({gpus}){offload}"
    shares = f", --tensor-split {','.join(_number(t) for t in tensor_split)}" if tensor_split else ", by free memory"
    return f"--split-mode {split_mode} over {gpus}{shares}{offload}"
