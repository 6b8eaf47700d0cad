"""A GGUF served by an engine with its own GGUF loader (SGLang, which rebuilds a Hugging Face model
from the file): the planner refuses an architecture that loader does not read, naming it and why,
and a release older than the first that reads it. The GGUF's architecture is its header's
`general.architecture`, read by the panel's importer from real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.importers.gguf_header import read_gguf_header
from serving.planner import PlanRequest, Severity, catalog_host, plan
from tests.support.llama import gemma_package_path

UNSUPPORTED, FLOOR = "engine.unsupported_arch", "engine.version_floor"


def _gguf(folder: Path, architecture: str) -> Path:
    """A header-only GGUF of `architecture` (gguf-py's writer, as llama.cpp's converter writes one)."""
    import gguf

    path = folder / f"{architecture}.gguf"
    writer = gguf.GGUFWriter(str(path), architecture)
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


def _plan(path: str | Path, engine: str = "sglang", version: str = "0.5.23"):
    imported = read_gguf_header(path)
    return plan(
        PlanRequest(
            arch=imported.arch,
            engine=engine,
            engine_version=version,
            gpus=catalog_host("h200", 1),
            weights_bytes=imported.file_size,
            gguf=imported.kv,
        )
    )


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
    assert found.fix == "Serve this GGUF with llama.cpp, or the model's Hugging Face checkpoint with SGLang."
    # llama.cpp reads the file natively; vLLM's GGUF loader is not judged by the panel.
    assert _plan(gemma_package_path(), engine="llama.cpp", version="").finding(UNSUPPORTED) is None
    assert _plan(gemma_package_path(), engine="vllm", version="0.33.0").finding(UNSUPPORTED) is None


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
