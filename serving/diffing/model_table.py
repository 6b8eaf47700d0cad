"""The model-generation table ("Aspect | Old | New"), in the words of seed 2's table.

Built only when the model changed. Every aspect is a row, unchanged ones included, because
"what stays the same" is half of the story when a generation changes.
"""

from __future__ import annotations

from collections.abc import Mapping

from serving.arch import ModelArch
from serving.diffing import fmt
from serving.diffing.context import revision_context, vision_state
from serving.diffing.rows import CHANGED, SAME, DiffRow, DiffSection
from serving.diffing.view import RevisionView, engine_label
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter

_IDENTITY = ("name", "repo_id", "gguf_file", "quantization")


def model_changed(old: RevisionView, new: RevisionView) -> bool:
    return any((old.model.get(k) or "") != (new.model.get(k) or "") for k in _IDENTITY)


def architecture(arch: ModelArch) -> str:
    """ "Hybrid MoE: 40 layers (30 linear + 10 full attn), 256 experts"."""
    if arch.num_layers is None and arch.num_experts is None and not arch.is_hybrid:
        return fmt.UNKNOWN
    kind = "MoE" if arch.is_moe else "dense"
    head = f"Hybrid {kind}" if arch.is_hybrid else kind[0].upper() + kind[1:]
    if arch.is_mla:
        head += " (MLA)"
    parts = []
    if arch.num_layers is not None:
        mixed = arch.is_hybrid or bool(arch.sliding_window_layers)
        split = layer_split(arch) if mixed else fmt.UNKNOWN
        parts.append(f"{arch.num_layers} layers" + (f" ({split})" if split != fmt.UNKNOWN else ""))
    if arch.is_moe:
        parts.append(f"{arch.num_experts} experts")
    return f"{head}: {', '.join(parts)}" if parts else head


def layer_split(arch: ModelArch) -> str:
    """ "30 linear + 10 full attn"; "22 sliding + 4 full attn"; "64 full attn"."""
    pieces = []
    if arch.linear_attention_layers:
        pieces.append(f"{arch.linear_attention_layers} linear")
    if arch.sliding_window_layers:
        pieces.append(f"{arch.sliding_window_layers} sliding")
    full = arch.full_attention_layers
    if full is None and not pieces and arch.num_layers is not None:
        full = arch.num_layers
    if full is not None:
        pieces.append(f"{full} full attn")
    return " + ".join(pieces) if pieces else fmt.UNKNOWN


def parameters(arch: ModelArch) -> str:
    """ "35B total, ~3B active" for MoE; "27B, all active" for dense."""
    total, active = arch.params_total, arch.params_active
    if total is None:
        return fmt.UNKNOWN
    if arch.is_moe or (active is not None and active < total):
        shown = f"~{fmt.params(active)} active" if active is not None else "active unknown"
        return f"{fmt.params(total)} total, {shown}"
    return f"{fmt.params(total)}, all active"


def _active(arch: ModelArch) -> float | None:
    """Active parameters; a dense model's are all of them."""
    if arch.params_active is not None:
        return arch.params_active
    return None if arch.is_moe else arch.params_total


def parameter_ratio(old: ModelArch, new: ModelArch) -> str:
    """Like with like: "total -23%, active x9.0" (never one side's total against the other's
    active); two dense models read as one figure, "+30%"."""
    dense = not (old.is_moe or new.is_moe) and _active(old) == old.params_total and _active(new) == new.params_total
    total = fmt.relative(old.params_total, new.params_total)
    if dense:
        return total
    active = fmt.relative(_active(old), _active(new))
    parts = [f"total {total}" if total else "", f"active {active}" if active else ""]
    return ", ".join(p for p in parts if p)


def kv_heads(arch: ModelArch) -> str:
    """ "2 KV heads x 10 full-attn layers" (the layers that keep a per-token KV cache)."""
    layers = arch.full_attention_layers
    if layers is None and not arch.is_hybrid:
        layers = arch.num_layers
    if arch.is_mla:
        rank = f" (rank {arch.kv_lora_rank})" if arch.kv_lora_rank else ""
        return f"MLA latent{rank} x {layers} layers" if layers else f"MLA latent{rank}"
    if arch.num_kv_heads is None:
        return fmt.UNKNOWN
    heads = f"{arch.num_kv_heads} KV head" + ("s" if arch.num_kv_heads != 1 else "")
    if layers is None:
        return heads
    what = "full-attn layers" if arch.is_hybrid or arch.sliding_window_layers else "layers"
    return f"{heads} x {layers} {what}"


def _flag(value: bool | None, yes: str, no: str) -> str:
    return fmt.UNKNOWN if value is None else (yes if value else no)


def quantization(view: RevisionView) -> str:
    """ "AWQ INT4 (awq_marlin flag)", "compressed-tensors W4A16 (auto-detected)"."""
    quant = str(view.model.get("quantization") or "")
    method = str(view.model.get("quant_method") or "")
    if not quant and not method:
        return fmt.UNKNOWN
    label = quant.replace("-", " ").upper() if quant else ""
    flat = label.lower().replace(" ", "").replace("-", "")
    if method and method.lower().replace("-", "").replace("_", "") not in flat:
        label = f"{method} {label}".strip()
    try:
        knob = get_adapter(view.engine).quantization_knob
    except EngineConfigError:
        knob = ""
    if knob:
        flag = view.knobs.get(knob)
        label += f" ({flag} flag)" if flag else " (auto-detected)"
    return label


def min_version(view: RevisionView) -> str:
    versions = view.model.get("min_engine_versions")
    floor = versions.get(view.engine) if isinstance(versions, Mapping) else None
    return f">= {floor}" if isinstance(floor, str) and floor else "any"


def parser(view: RevisionView, name: str) -> str:
    return str(view.knobs.get(name) or view.model.get(name) or "none")


def _served(view: RevisionView) -> str:
    ctx = revision_context(view)
    if ctx.per_sequence is None:
        return fmt.UNKNOWN
    text = fmt.count(ctx.per_sequence)
    return text + (" per slot" if ctx.total and ctx.total != ctx.per_sequence else "")


def _vision(view: RevisionView) -> str:
    has = view.arch.has_vision
    if has is None:
        return fmt.UNKNOWN
    if not has:
        return "text only"
    served, why = vision_state(view)
    return "vision-language" if served else f"vision-language ({why})"


def _model(view: RevisionView) -> str:
    name = view.model_name or fmt.UNKNOWN
    repo = view.model.get("repo_id")
    return f"{name} ({repo})" if repo and repo != name and not str(repo).endswith("/" + name) else str(repo or name)


def model_section(old: RevisionView, new: RevisionView) -> DiffSection:
    a, b = old.arch, new.arch
    same_engine = old.engine == new.engine
    minimum_label = f"{engine_label(new.engine)} minimum" if same_engine else "Minimum engine version"

    def versions(view: RevisionView) -> str:
        text = min_version(view)
        return text if same_engine else f"{engine_label(view.engine)} {text}"

    aspects: list[tuple[str, str, str, str]] = [
        ("Model", _model(old), _model(new), ""),
        ("Generation", _generation(old), _generation(new), ""),
        ("Architecture", architecture(a), architecture(b), ""),
        ("Parameters", parameters(a), parameters(b), parameter_ratio(a, b)),
        ("Layer split", layer_split(a), layer_split(b), ""),
        ("Active KV heads", kv_heads(a), kv_heads(b), ""),
        ("Native context", _ctx(a.native_context), _ctx(b.native_context), ""),
        ("Context served", _served(old), _served(new), _rel_ctx(old, new)),
        ("Vision", _vision(old), _vision(new), ""),
        ("MTP head", _flag(a.has_mtp, "yes", "no"), _flag(b.has_mtp, "yes", "no"), ""),
        ("Quantization", quantization(old), quantization(new), ""),
        (
            "Weights on disk",
            fmt.disk_gb(old.model.get("weights_bytes")),
            fmt.disk_gb(new.model.get("weights_bytes")),
            "",
        ),  # fmt: skip
        (minimum_label, versions(old), versions(new), ""),
        ("Tool-call parser", parser(old, "tool_call_parser"), parser(new, "tool_call_parser"), ""),
        ("Reasoning parser", parser(old, "reasoning_parser"), parser(new, "reasoning_parser"), ""),
    ]
    rows = tuple(DiffRow(k, o, n, SAME if o == n else CHANGED, note if o != n else "") for k, o, n, note in aspects)
    return DiffSection("model", "Model generation", rows, show_same=True, headers=("Aspect", "Old", "New"))


def _generation(view: RevisionView) -> str:
    return str(view.model.get("generation") or view.model.get("family") or view.arch.family or fmt.UNKNOWN)


def _ctx(value: int | None) -> str:
    return fmt.count(value)


def _rel_ctx(old: RevisionView, new: RevisionView) -> str:
    return fmt.relative(revision_context(old).per_sequence, revision_context(new).per_sequence)
