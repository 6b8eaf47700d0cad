"""A GPU split written as an engine's own knobs (`parallel_knobs`) and read back (`parallel_sizes`, and
the planner's layout): what a tuning run carries from a vLLM base to an SGLang or llama.cpp candidate,
so the candidate runs on the base's GPUs. Every adapter either takes the split, round trip and plan
alike, or says it cannot be told one ({}); the default split is written as nothing."""

from __future__ import annotations

import pytest

from serving.arch import ModelArch
from serving.engines.base import ParallelSizes
from serving.engines.knobs import check_knobs
from serving.engines.registry import ADAPTERS, get_adapter
from serving.planner import PlanRequest, catalog_host, plan

GB = 10**9
# Dimensions every split below divides (8 KV heads, 64 attention heads, 8 layers).
ARCH = ModelArch(
    num_layers=8, num_kv_heads=8, head_dim=128, num_attention_heads=64, hidden_size=8192, native_context=32768
)
SPLITS = [ParallelSizes(2), ParallelSizes(4), ParallelSizes(8), ParallelSizes(2, 2), ParallelSizes(2, 1, 2)]


def _gpus_used(engine: str, knobs: dict[str, object], *, gpus: int = 8) -> int:
    report = plan(
        PlanRequest(arch=ARCH, engine=engine, gpus=catalog_host("h100", gpus), knobs=knobs, weights_bytes=16 * GB)
    )
    return report.gpus_used


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_the_default_split_is_written_as_no_knob(engine: str) -> None:
    assert get_adapter(engine).parallel_knobs(ParallelSizes()) == {}


@pytest.mark.parametrize("sizes", SPLITS, ids=str)
@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_a_split_written_as_an_engines_knobs_reads_back_and_plans_on_its_gpus(
    engine: str, sizes: ParallelSizes
) -> None:
    adapter = get_adapter(engine)
    knobs = adapter.parallel_knobs(sizes)
    assert check_knobs(adapter, knobs) == knobs  # knobs the engine takes, as it takes them
    assert set(knobs) <= adapter.placement_knobs  # a space that sets one of these chooses the split
    read = adapter.parallel_sizes(knobs)
    if read is not None:  # an engine with parallel sizes: the same split, and its planner reads it so
        assert read == sizes
    if knobs:  # on 8 GPUs the model is planned on the split's GPUs, not on one nor on all 8
        assert _gpus_used(engine, knobs) == sizes.gpus
    else:  # an engine that cannot be told a split (Ollama) has no sizes to read either
        assert read is None


def test_vllm_and_sglang_name_the_same_split_their_own_way() -> None:
    vllm, sglang = get_adapter("vllm"), get_adapter("sglang")
    split = vllm.parallel_sizes({"tensor_parallel_size": "4", "max_model_len": 8192})
    assert split == ParallelSizes(tp=4)
    assert sglang.parallel_knobs(split) == {"tp_size": 4}
    assert vllm.parallel_knobs(sglang.parallel_sizes({"tp_size": 2, "pp_size": 2, "dp_size": 2})) == {
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 2,
        "data_parallel_size": 2,
    }
    assert vllm.parallel_sizes({}) == ParallelSizes()  # unset: one GPU
    assert vllm.placement_knobs == {"tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"}


def test_llama_cpp_takes_a_split_as_equal_layer_shares_on_the_first_gpus() -> None:
    llama = get_adapter("llama.cpp")
    knobs = llama.parallel_knobs(ParallelSizes(tp=4))
    assert knobs == {"tensor_split": "1,1,1,1"}
    report = plan(
        PlanRequest(arch=ARCH, engine="llama.cpp", gpus=catalog_host("h100", 8), knobs=knobs, weights_bytes=16 * GB)
    )
    assert report.layout == "--split-mode layer over 4 of 8 GPUs, --tensor-split 1,1,1,1"
    # Unset, it spreads its layers over every GPU it sees: the larger machine the split keeps it from.
    assert _gpus_used("llama.cpp", {}) == 8
    # Its own knobs say no parallel sizes: from a llama.cpp base nothing is carried.
    assert llama.parallel_sizes({"tensor_split": "1,1,1,1", "split_mode": "layer"}) is None
    assert get_adapter("ollama").parallel_sizes({}) is None
