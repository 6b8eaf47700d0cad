"""The context a server really runs with, and whether it really takes images.

How each engine reads its context knob is the engine adapter's fact
(`EngineAdapter.served_context`: vLLM's `--max-model-len`, SGLang's `--context-length`,
llama.cpp's `--ctx-size` split between `--parallel` slots, Ollama's OLLAMA_CONTEXT_LENGTH);
this module only picks between a measured figure, the knobs and the planner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.diffing.view import RevisionView
from serving.engines.base import ContextInputs, EngineConfigError, ServedContext
from serving.engines.knobs import whole_tokens
from serving.engines.registry import get_adapter

__all__ = ["ServedContext", "revision_context", "served_context", "vision_state"]


def served_context(
    engine: str,
    knobs: Mapping[str, Any],
    *,
    native: int | None,
    env: Mapping[str, Any] | None = None,
    planned: int | None = None,
) -> ServedContext:
    """What context the engine serves with these knobs. `planned` = the planner's max_model_len."""
    try:
        adapter = get_adapter(engine)
    except EngineConfigError:
        if planned:
            return ServedContext(planned, planned, "planner")
        return (
            ServedContext(native, native, "model's native context") if native else ServedContext(None, None, "unknown")
        )
    return adapter.served_context(ContextInputs(knobs, native, env or {}, planned))


def revision_context(view: RevisionView) -> ServedContext:
    """The served context of a revision: a measured value wins, then the knobs."""
    native = view.arch.native_context
    planned = whole_tokens((view.planner or {}).get("max_model_len"))
    if view.served_context:
        return ServedContext(view.served_context, view.served_context, "measured on the server")
    return served_context(view.engine, view.knobs, native=native, env=view.env, planned=planned)


def _needs_projector(engine: str) -> bool:
    try:
        return get_adapter(engine).vision_needs_projector
    except EngineConfigError:
        return False


def vision_state(view: RevisionView) -> tuple[bool | None, str]:
    """(serves images?, why). A vision model can be served text-only; llama.cpp needs its mmproj."""
    has_vision = view.arch.has_vision
    knobs = view.knobs
    if has_vision is False:
        return False, "text-only model"
    if knobs.get("vision") is False or knobs.get("language_model_only") is True:
        return False, "vision turned off in this revision"
    if _needs_projector(view.engine) and has_vision is not False:
        if knobs.get("mmproj") or view.model.get("mmproj_file"):
            return True, "vision through the mmproj projector"
        return (False, "no mmproj projector, so llama-server rejects images") if has_vision else (None, "unknown")
    if has_vision is None:
        return None, "unknown"
    return True, "vision-language model"
