"""The context a server really runs with, per engine, and whether it really takes images.

- vLLM: `--max-model-len` (unset: the model's native context; `auto`: the largest that fits).
- SGLang: `--context-length` (unset: native).
- llama.cpp: `--ctx-size` is the *whole* KV cache. Without a unified KV cache it is split
  evenly between `--parallel` slots, so one request can use only ctx_size / parallel
  (`src/llama-context.cpp`: n_ctx_seq = n_ctx / n_seq_max, n_ctx padded to 256). The KV is
  unified when asked (`--kv-unified`) or when parallel is left on auto. A client must be
  told the per-slot figure: that is the longest conversation one request can carry.
  ctx_size 0 = the model's trained context; unset = whatever the build and `-fit` choose, so
  unknown (unless the planner or a measurement says).
- Ollama: `OLLAMA_CONTEXT_LENGTH` (unset: chosen from VRAM, 4k/32k/256k, so unknown); every
  parallel request gets the full length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serving.diffing.view import RevisionView
from serving.engines.base import EngineConfigError
from serving.engines.vllm import max_model_len_tokens


@dataclass(frozen=True)
class ServedContext:
    total: int | None  # the context the engine was configured with (all slots, for llama.cpp)
    per_sequence: int | None  # what one request can use: the figure clients need
    source: str  # which setting it comes from, in words

    @property
    def known(self) -> bool:
        return self.per_sequence is not None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def parse_token_count(value: Any) -> int | None:
    """A token count as vLLM reads one (65536, "64k" = 64,000, "64K" = 65,536: the vLLM adapter's
    parser); None when it is auto, -1, empty or not a count."""
    if value in (None, ""):
        return None
    try:
        return max_model_len_tokens(value)
    except EngineConfigError:
        return None


def _pad(value: int, to: int = 256) -> int:
    return -(-value // to) * to


def served_context(
    engine: str,
    knobs: Mapping[str, Any],
    *,
    native: int | None,
    env: Mapping[str, Any] | None = None,
    planned: int | None = None,
) -> ServedContext:
    """What context the engine serves with these knobs. `planned` = the planner's max_model_len."""
    env = env or {}
    if engine == "vllm" or engine == "sglang":
        name = "max_model_len" if engine == "vllm" else "context_length"
        raw = knobs.get(name)
        if raw in (None, ""):
            if native:
                return ServedContext(native, native, f"model's native context ({name} unset)")
            return ServedContext(planned, planned, "planner") if planned else ServedContext(None, None, "unknown")
        value = parse_token_count(raw)
        if value is not None:
            return ServedContext(value, value, name)
        if planned:
            return ServedContext(planned, planned, f"{name}={raw}: planner's figure")
        return ServedContext(None, None, f"{name}={raw}: chosen by the engine at start")
    if engine == "llama.cpp":
        return _llamacpp(knobs, native=native, planned=planned)
    if engine == "ollama":
        value = parse_token_count(knobs.get("context_length")) or parse_token_count(env.get("OLLAMA_CONTEXT_LENGTH"))
        if value:
            return ServedContext(value, value, "OLLAMA_CONTEXT_LENGTH")
        if planned:
            return ServedContext(planned, planned, "planner")
        return ServedContext(None, None, "OLLAMA_CONTEXT_LENGTH unset: Ollama picks it from VRAM")
    if planned:
        return ServedContext(planned, planned, "planner")
    return ServedContext(native, native, "model's native context") if native else ServedContext(None, None, "unknown")


def _llamacpp(knobs: Mapping[str, Any], *, native: int | None, planned: int | None) -> ServedContext:
    raw = _int(knobs.get("ctx_size"))
    if raw is None:
        if planned:
            return ServedContext(planned, planned, "planner (ctx_size unset)")
        return ServedContext(None, None, "ctx_size unset: the build and -fit choose it")
    if raw == 0:
        if not native:
            return ServedContext(None, None, "ctx_size 0 = the model's trained context, which is unknown")
        total, source = native, "ctx_size 0 = the model's trained context"
    else:
        total, source = raw, "ctx_size"
    parallel = _int(knobs.get("parallel"))
    unified = knobs.get("kv_unified")
    is_unified = bool(unified) if unified is not None else parallel in (None, -1)
    if parallel and parallel > 1 and not is_unified:
        per_slot = _pad(total) // parallel
        return ServedContext(total, per_slot, f"{source} / parallel {parallel} (per slot, KV not unified)")
    return ServedContext(total, total, source + (" (unified KV)" if parallel and parallel > 1 else ""))


def revision_context(view: RevisionView) -> ServedContext:
    """The served context of a revision: a measured value wins, then the knobs."""
    native = view.arch.native_context
    planned = _int((view.planner or {}).get("max_model_len"))
    if view.served_context:
        return ServedContext(view.served_context, view.served_context, "measured on the server")
    return served_context(view.engine, view.knobs, native=native, env=view.env, planned=planned)


def vision_state(view: RevisionView) -> tuple[bool | None, str]:
    """(serves images?, why). A vision model can be served text-only; llama.cpp needs its mmproj."""
    has_vision = view.arch.has_vision
    knobs = view.knobs
    if has_vision is False:
        return False, "text-only model"
    if knobs.get("vision") is False or knobs.get("language_model_only") is True:
        return False, "vision turned off in this revision"
    if view.engine == "llama.cpp" and has_vision is not False:
        if knobs.get("mmproj") or view.model.get("mmproj_file"):
            return True, "vision through the mmproj projector"
        return (False, "no mmproj projector, so llama-server rejects images") if has_vision else (None, "unknown")
    if has_vision is None:
        return None, "unknown"
    return True, "vision-language model"
