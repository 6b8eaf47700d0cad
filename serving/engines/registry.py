"""The engine adapters, keyed by the engine names revisions store."""

from __future__ import annotations

from serving.engines.base import EngineAdapter, EngineConfigError
from serving.engines.llamacpp import LlamaCppAdapter
from serving.engines.ollama import OllamaAdapter
from serving.engines.sglang import SglangAdapter
from serving.engines.vllm import VllmAdapter

ADAPTERS: dict[str, EngineAdapter] = {
    "vllm": VllmAdapter(),
    "llama.cpp": LlamaCppAdapter(),
    "ollama": OllamaAdapter(),
    "sglang": SglangAdapter(),
}


def engine_label(name: str) -> str:
    """The engine's name as people write it ("vLLM" for vllm); an unknown name as it is."""
    adapter = ADAPTERS.get(name) if isinstance(name, str) else None
    return adapter.label if adapter is not None else name


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for `name`; EngineConfigError(field="engine") when unknown."""
    try:
        return ADAPTERS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(ADAPTERS))
        raise EngineConfigError(f"unknown engine {name!r}; known engines: {known}", field="engine") from None
