"""Bad knobs are typed input errors that name the knob, in the adapter's words (the planner reads each
knob through its adapter); Ansible-style values are understood."""

from __future__ import annotations

import pytest

from serving.arch import ModelArch
from serving.planner import PlanInputError, PlanRequest, catalog_host, plan

ARCH = ModelArch(
    num_layers=32, num_attention_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096,
    intermediate_size=14336, vocab_size=128256, native_context=131072,
)  # fmt: skip
GPUS = catalog_host("h100", 2)


def request(engine: str = "vllm", knobs: dict | None = None, env: dict | None = None) -> PlanRequest:
    return PlanRequest(arch=ARCH, engine=engine, gpus=GPUS, knobs=knobs or {}, env=env or {}, weights_bytes=16 * 10**9)


BAD = [
    ("vllm", {"tensor_paralel_size": 2}, "tensor_paralel_size", "unknown vllm knob"),
    ("vllm", {"gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "must be at most 1"),
    ("vllm", {"gpu_memory_utilization": "lots"}, "gpu_memory_utilization", "must be a number"),
    ("vllm", {"max_num_seqs": "four"}, "max_num_seqs", "whole number"),
    ("vllm", {"tensor_parallel_size": 0}, "tensor_parallel_size", "at least 1"),
    ("vllm", {"max_model_len": "big"}, "max_model_len", "positive number of tokens"),
    ("vllm", {"kv_cache_dtype": "FP8"}, "kv_cache_dtype", "invalid choice: 'FP8'"),
    ("vllm", {"quantization": "awq_turbo"}, "quantization", "invalid choice"),
    ("vllm", {"speculative_config": "{method: mtp"}, "speculative_config", "not valid JSON"),
    ("vllm", {"speculative_config": {"num_speculative_tokens": 2}}, "speculative_config", 'needs a "method"'),
    ("vllm", {"enforce_eager": "maybe"}, "enforce_eager", "true or false"),
    ("vllm", {"hf_overrides": "[1, 2]"}, "hf_overrides", "JSON object"),
    ("vllm", {"ctx_size": 4096}, "ctx_size", "unknown vllm knob"),
    ("llama.cpp", {"cache_type_k": "Q8_0"}, "cache_type_k", "must be one of"),
    ("llama.cpp", {"flash_attn": "sometimes"}, "flash_attn", "on, off or auto"),
    ("llama.cpp", {"tensor_split": "3,x"}, "tensor_split", "not a number"),
    ("llama.cpp", {"max_model_len": 4096}, "max_model_len", "unknown llama.cpp knob"),
    ("ollama", {"kv_cache_type": "q5_1"}, "kv_cache_type", "must be one of"),
    ("sglang", {"mem_fraction_static": 0}, "mem_fraction_static", "must be greater than 0"),
]


@pytest.mark.parametrize(("engine", "knobs", "field", "text"), BAD, ids=[f"{b[0]}:{b[2]}" for b in BAD])
def test_bad_knob_raises_a_typed_error_naming_it(engine: str, knobs: dict, field: str, text: str) -> None:
    with pytest.raises(PlanInputError, match=text) as info:
        plan(request(engine, knobs))
    assert info.value.field == field


def test_unknown_engine_is_an_input_error() -> None:
    with pytest.raises(PlanInputError, match="unknown engine 'tgi'") as info:
        plan(request("tgi"))
    assert info.value.field == "engine"


def test_cuda_visible_devices_naming_a_missing_gpu_is_an_input_error() -> None:
    with pytest.raises(PlanInputError, match="GPU '5'"):
        plan(request(knobs={"tensor_parallel_size": 2}, env={"CUDA_VISIBLE_DEVICES": "0,5"}))


def test_ansible_style_strings_and_json_strings_are_accepted() -> None:
    as_text = plan(
        request(
            knobs={
                "tensor-parallel-size": "2",
                "gpu_memory_utilization": "0.95",
                "max_model_len": "32K",  # vLLM: upper-case K = 1024, lower-case k = 1000
                "enforce_eager": "true",
                "speculative_config": '{"method":"ngram","num_speculative_tokens":3}',
                "quantization": "none",
                "kv_cache_dtype": "fp8",
            }
        )
    )
    as_values = plan(
        request(
            knobs={
                "tensor_parallel_size": 2,
                "gpu_memory_utilization": 0.95,
                "max_model_len": 32768,
                "enforce_eager": True,
                "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
                "kv_cache_dtype": "fp8",
            }
        )
    )
    assert as_text.to_dict() == as_values.to_dict()
    assert as_text.max_model_len == 32768
    assert as_text.tp == 2
    assert plan(request(knobs={"max_model_len": "32k"})).max_model_len == 32000


def test_cuda_visible_devices_picks_the_gpus_the_engine_sees() -> None:
    host = catalog_host("rtx3090", 6)
    req = PlanRequest(
        arch=ARCH, engine="vllm", gpus=host, knobs={"tensor_parallel_size": 4, "max_model_len": 8192},
        env={"CUDA_VISIBLE_DEVICES": "1,2,3,4", "NCCL_P2P_DISABLE": "1"}, weights_bytes=16 * 10**9,
    )  # fmt: skip
    report = plan(req)
    assert (report.gpus_used, report.gpus_present) == (4, 6)
    assert report.finding("gpus.idle") is not None
