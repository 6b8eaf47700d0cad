"""The engine adapters, keyed by the engine names revisions store."""

from __future__ import annotations

from typing import Any

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


# The key an install of no particular version is recorded under, in a host's engine_installs as
# the panel keeps them and as the agent reads them.
LATEST = "latest"


def install_key(version: str) -> str:
    """The key an install that ran for `version` is recorded under."""
    return version or LATEST


def recorded_installs(installs: object, engine: str) -> dict[str, Any]:
    """What a host's engine_installs record of `engine` (install key -> entry); {} when they
    hold nothing of it, or anything but that table."""
    table = installs.get(engine) if isinstance(installs, dict) else None
    return table if isinstance(table, dict) else {}


def requested_install_key(engine: str, version: str) -> str:
    """The key an install of `engine` `version`, as a revision names it, is recorded under: the
    adapter's canonical version (LATEST for none); a version the adapter refuses, as given."""
    try:
        return get_adapter(engine).install_version(version) or LATEST
    except EngineConfigError:
        return (version or "").strip() or LATEST


def engine_label(name: str) -> str:
    """The engine's name as people write it ("vLLM" for vllm); an unknown name as it is."""
    adapter = ADAPTERS.get(name) if isinstance(name, str) else None
    return adapter.label if adapter is not None else name


# The catalog's model formats (deployments.choices.ModelFormat) as a sentence names them.
FORMAT_WORDS = {"hf": "a Hugging Face checkpoint", "gguf": "a GGUF file", "ollama": "an Ollama tag"}


def format_refusal(engine: str, model_format: str) -> str:
    """Why `engine` cannot load a model of `model_format` (the adapter's model_formats), or ""
    when it can. An unknown engine is get_adapter's refusal."""
    adapter = get_adapter(engine)
    if model_format in adapter.model_formats:
        return ""
    takes = " or ".join(FORMAT_WORDS.get(f, f) for f in sorted(adapter.model_formats)) or "no model of the catalog"
    what = FORMAT_WORDS.get(model_format, repr(model_format))
    return f"{adapter.label} cannot load {what}: the panel launches it with {takes}"


def engines_loading(model_format: str) -> str:
    """The engines whose adapter loads a model of `model_format`, in words ("llama.cpp, SGLang or vLLM
    before 0.24.0 or with vllm-gguf-plugin": a GGUF up to the release that dropped its GGUF loader,
    or with the package that brings one back); "" when none does."""
    labels = []
    for name in sorted(ADAPTERS):
        adapter = ADAPTERS[name]
        if model_format not in adapter.model_formats:
            continue
        loader = adapter.gguf_loader if model_format == "gguf" else None
        if loader is None or not loader.removed_in:
            labels.append(adapter.label)
        elif loader.plugin is None:
            labels.append(f"{adapter.label} before {loader.removed_in}")
        else:
            labels.append(f"{adapter.label} before {loader.removed_in} or with {loader.plugin.package}")
    return _in_words(labels)


def gguf_servers(architecture: str, *, besides: str = "", gpus: bool = True) -> str:
    """The engines other than `besides` whose latest release serves a GGUF of `architecture`, in words
    ("llama.cpp or SGLang"): llama.cpp reads every GGUF; an engine with its own GGUF loader, the
    architectures that loader reads; one whose latest release dropped it, with the package that brings
    one back, the architectures that one reads ("vLLM with vllm-gguf-plugin"), on a host with GPUs
    where the package needs them."""
    labels = []
    for name in sorted(ADAPTERS):
        adapter, loader = ADAPTERS[name], ADAPTERS[name].gguf_loader
        if name == besides or "gguf" not in adapter.model_formats:
            continue
        if loader is None or (not loader.removed_in and not loader.refusal(architecture)):
            labels.append(adapter.label)
            continue
        plugin = loader.plugin if loader.removed_in else None
        if plugin is not None and (gpus or not plugin.gpu_only) and not plugin.loader.refusal(architecture):
            labels.append(f"{adapter.label} with {plugin.package}")
    return _in_words(labels) or "llama.cpp"


def venv_packages(engine: str) -> tuple[str, ...]:
    """The pip distributions of `engine`'s venv the planner reads (PlanRequest.packages), which its
    host reads when it records an install: those some releases need at or below a version (family
    floors, GGUF ceilings) and the package that brings a dropped GGUF loader back. () for an engine
    the planner reads none of, or an unknown one."""
    adapter = ADAPTERS.get(engine) if isinstance(engine, str) else None
    if adapter is None:
        return ()
    names = {floor.package for support in adapter.family_support.values() for floor in support.packages}
    loaders = [adapter.gguf_loader] if adapter.gguf_loader is not None else []
    if loaders and loaders[0].plugin is not None:
        names.add(loaders[0].plugin.package)
        loaders.append(loaders[0].plugin.loader)
    names |= {ceiling.package for loader in loaders for ceiling in loader.package_ceilings.values()}
    return tuple(sorted(names))


def _in_words(labels: list[str]) -> str:
    """["a", "b", "c"] -> "a, b or c"."""
    return " or ".join(filter(None, [", ".join(labels[:-1]), *labels[-1:]]))


def get_adapter(name: str) -> EngineAdapter:
    """The adapter for `name`; EngineConfigError(field="engine") when unknown."""
    try:
        return ADAPTERS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(ADAPTERS))
        raise EngineConfigError(f"unknown engine {name!r}; known engines: {known}", field="engine") from None
