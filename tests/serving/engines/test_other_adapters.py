"""llama.cpp, SGLang and Ollama adapters, the registry and version handling."""

from __future__ import annotations

import dataclasses

import pytest

from serving.engines.base import EngineConfig, EngineConfigError, ModelRef
from serving.engines.llamacpp import LlamaCppAdapter
from serving.engines.registry import ADAPTERS, format_refusal, get_adapter
from serving.engines.versions import at_least, parse_version
from serving.launch import HostFacts, RevisionSpec, launch


def llama(version: str = "b7000", **kwargs):
    knobs = kwargs.pop("knobs", {})
    return LlamaCppAdapter().launch_spec(
        EngineConfig(
            engine="llama.cpp",
            engine_version=version,
            model="/models/Qwen3.5-122B-Q6_K_XL.gguf",
            port=8080,
            knobs=knobs,
            **kwargs,
        )
    )


def test_registry_has_the_four_engines_and_rejects_others():
    assert set(ADAPTERS) == {"vllm", "llama.cpp", "ollama", "sglang"}
    assert get_adapter("sglang").default_port == 30000
    with pytest.raises(EngineConfigError) as info:
        get_adapter("tgi")
    assert info.value.field == "engine"


@pytest.mark.parametrize(
    ("engine", "a", "b"),
    [
        ("vllm", "0.9.2", "0.10.0"),
        ("vllm", "0.10.1rc1", "0.10.1"),
        ("vllm", "v0.12.3", "0.33"),
        ("llama.cpp", "b6326", "b6327"),
        ("llama.cpp", "6500", "b10114"),
        ("sglang", "0.5.9", "0.5.23"),
        ("ollama", "0.12.3", ""),
    ],
)
def test_versions_order(engine, a, b):
    assert parse_version(engine, a) < parse_version(engine, b)


def test_llamacpp_flash_attention_spelling_follows_the_build():
    assert tuple(llama("b7000", knobs={"flash_attn": True}).argv[-2:]) == ("--flash-attn", "on")
    old = llama("b6000", knobs={"flash_attn": True}).argv
    assert old[-1] == "--flash-attn" and "on" not in old
    assert "--flash-attn" not in llama("b6000", knobs={"flash_attn": "auto"}).argv
    assert at_least("llama.cpp", "b6327", "b6327")


def test_llamacpp_no_mmap_becomes_load_mode_on_new_builds():
    assert llama("b10884", knobs={"no_mmap": True}).argv[-2:] == ("--load-mode", "none")
    assert llama("b9000", knobs={"no_mmap": True}).argv[-1] == "--no-mmap"


def test_llamacpp_seed_style_config():
    spec = llama(
        knobs={
            "n_gpu_layers": "all",
            "ctx_size": 262144,
            "parallel": 1,
            "cache_type_k": "q8_0",
            "cache_type_v": "q8_0",
            "flash_attn": "on",
            "split_mode": "layer",
            "tensor_split": "0.8,1,1,1,1,1",
            "mmproj": "/models/mmproj-BF16.gguf",
            "jinja": True,
            "metrics": True,
            "threads": 16,
        },
        api_key="k-123",
    )
    argv = list(spec.argv)

    def value(flag):
        return argv[argv.index(flag) + 1]

    assert value("--n-gpu-layers") == "all"
    assert value("--ctx-size") == "262144"
    assert value("--cache-type-v") == "q8_0"
    assert value("--tensor-split") == "0.8,1,1,1,1,1"
    assert value("--mmproj") == "/models/mmproj-BF16.gguf"
    assert value("--alias") == "Qwen3.5-122B-Q6_K_XL" == spec.served_name
    assert "--jinja" in argv and "--metrics" in argv
    assert spec.metrics_url == "http://127.0.0.1:8080/metrics"
    assert spec.env["LLAMA_API_KEY"] == "k-123" and "k-123" not in argv


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"cache_type_v": "q8_0", "flash_attn": "off"}, "cache_type_v"),
        ({"cache_type_k": "q3_k"}, "cache_type_k"),
        ({"flash_attn": "maybe"}, "flash_attn"),
        ({"tensor_split": "3,x"}, "tensor_split"),
        ({"n_gpu_layers": -5}, "n_gpu_layers"),
        ({"mmproj": "--hf-repo evil"}, "mmproj"),
        ({"gpu_layers": 99}, "gpu_layers"),
    ],
)
def test_llamacpp_rejects_bad_knobs(knobs, field):
    with pytest.raises(EngineConfigError) as info:
        llama(knobs=knobs)
    assert info.value.field == field


def test_sglang_argv_against_the_documented_cli():
    spec = get_adapter("sglang").launch_spec(
        EngineConfig(
            engine="sglang",
            engine_version="0.5.23",
            model="Qwen/Qwen3.8-27B-FP8",
            port=30000,
            knobs={
                "tp_size": 2,
                "mem_fraction_static": 0.85,
                "context_length": 131072,
                "kv_cache_dtype": "fp8_e4m3",
                "speculative_algorithm": "NEXTN",
                "speculative_num_steps": 3,
                "tool_call_parser": "qwen3_coder",
                "reasoning_parser": "qwen3",
                "enable_metrics": True,
                "disable_radix_cache": True,
            },
            api_key="s3cret",
        )
    )
    argv = list(spec.argv)
    assert argv[:5] == ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3.8-27B-FP8"]
    for flag, value in (
        ("--tp-size", "2"),
        ("--mem-fraction-static", "0.85"),
        ("--context-length", "131072"),
        ("--kv-cache-dtype", "fp8_e4m3"),
        ("--speculative-algorithm", "NEXTN"),
        ("--served-model-name", "Qwen3.8-27B-FP8"),
        ("--port", "30000"),
    ):
        assert argv[argv.index(flag) + 1] == value
    assert "--enable-metrics" in argv and "--disable-radix-cache" in argv
    assert spec.metrics_url == "http://127.0.0.1:30000/metrics"
    assert "s3cret" not in " ".join(spec.masked_argv())
    with pytest.raises(EngineConfigError) as info:
        get_adapter("sglang").validate(
            EngineConfig(engine="sglang", engine_version="0.5.23", model="m", knobs={"speculative_num_steps": 3})
        )
    assert info.value.field == "speculative_num_steps"


GGUF = ModelRef(name="Qwen3-8B-Q4_K_M", repo_id="Qwen/Qwen3-8B-GGUF", gguf_file="Qwen3-8B-Q4_K_M.gguf", format="gguf")
GGUF_COPY = "/srv/models/Qwen--Qwen3-8B-GGUF/7c41481f/Qwen3-8B-Q4_K_M.gguf"


def test_sglang_loads_a_gguf_file_and_a_switch_to_it_is_not_refused_for_its_format():
    assert format_refusal("sglang", "gguf") == ""
    assert format_refusal("sglang", "ollama") == (
        "SGLang cannot load an Ollama tag: the panel launches it with a GGUF file or a Hugging Face checkpoint"
    )
    spec = RevisionSpec(engine="sglang", version="0.5.23", model=GGUF, knobs={"tp_size": 2}, port=30000)
    # The host's downloaded copy (the .gguf file), else the catalog's file in the host's first model
    # folder (where the engine runs): never the repository, which names no one file.
    assert launch(spec, HostFacts(local_weights=GGUF_COPY)).argv[3:5] == ("--model-path", GGUF_COPY)
    bare = launch(spec, HostFacts(model_dirs=("/srv/models",)))
    assert bare.argv[3:5] == ("--model-path", "Qwen3-8B-Q4_K_M.gguf") and bare.cwd == "/srv/models"
    assert not {"--load-format", "--quantization", "--tokenizer-path"} & set(bare.argv)
    # A Hugging Face checkpoint is still the host's copy, else the repository.
    hf = ModelRef(name="Qwen3-8B", repo_id="Qwen/Qwen3-8B")
    assert launch(dataclasses.replace(spec, model=hf), HostFacts()).argv[4] == "Qwen/Qwen3-8B"


@pytest.mark.parametrize(
    ("copy", "knobs", "field", "words"),
    [
        (
            "/srv/models/unsloth--Qwen3-235B-A22B-GGUF/3b1c/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf",
            {},
            "model",
            "SGLang reads a GGUF from the one file it is given, and Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf "
            "is part 1 of 3: merge the parts into one file (llama-gguf-split --merge)",
        ),
        (
            GGUF_COPY,
            {"quantization": "awq"},
            "quantization",
            "quantization=awq does not apply to a GGUF file: SGLang loads one with its own quantization, gguf",
        ),
    ],
)
def test_sglang_refuses_a_gguf_it_would_not_load_as_asked(copy, knobs, field, words):
    spec = RevisionSpec(engine="sglang", version="0.5.23", model=GGUF, knobs=knobs)
    with pytest.raises(EngineConfigError) as info:
        launch(spec, HostFacts(local_weights=copy))
    assert info.value.field == field and str(info.value).startswith(words)
    # quantization=gguf is what SGLang sets itself: taken.
    launch(dataclasses.replace(spec, knobs={"quantization": "gguf"}), HostFacts(local_weights=GGUF_COPY))


def test_ollama_is_configured_by_env():
    spec = get_adapter("ollama").launch_spec(
        EngineConfig(
            engine="ollama",
            engine_version="0.12.3",
            model="qwen3.8:27b",
            host="0.0.0.0",
            port=11434,
            knobs={
                "context_length": 32768,
                "num_parallel": 2,
                "keep_alive": "30m",
                "kv_cache_type": "q8_0",
                "flash_attention": True,
            },
        )
    )
    assert spec.argv == ("ollama", "serve")
    assert spec.env["OLLAMA_HOST"] == "0.0.0.0:11434"
    assert spec.env["OLLAMA_CONTEXT_LENGTH"] == "32768"
    assert spec.env["OLLAMA_NUM_PARALLEL"] == "2"
    assert spec.env["OLLAMA_KEEP_ALIVE"] == "30m"
    assert spec.env["OLLAMA_KV_CACHE_TYPE"] == "q8_0"
    assert spec.env["OLLAMA_FLASH_ATTENTION"] == "1"
    assert spec.served_name == "qwen3.8:27b"
    assert spec.health_url == "http://127.0.0.1:11434/"
    assert spec.metrics_url is None
