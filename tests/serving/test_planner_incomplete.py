"""Models whose architecture is only partly known (the seeds state few facts): the KV cache is
unknown, but weights that cannot fit are still an error, never a silent "fits"."""

from __future__ import annotations

import pytest

from serving.arch import ModelArch
from serving.planner import PlanRequest, catalog_host, plan

GB = 10**9


@pytest.mark.parametrize(
    ("engine", "gpus", "knobs", "weights", "oom"),
    [
        ("vllm", 1, {}, 56 * GB, True),  # Qwen3.5-27B BF16 (~56 GB) on one RTX 3090
        ("vllm", 4, {"tensor_parallel_size": 4}, 56 * GB, False),
        ("llama.cpp", 1, {"n_gpu_layers": 999}, 105 * GB, True),  # the 122B Q6_K_XL on one card
        ("llama.cpp", 6, {"n_gpu_layers": 999}, 105 * GB, False),  # ... across six, as the seed runs it
        ("llama.cpp", 1, {"n_gpu_layers": 0}, 105 * GB, False),  # all on the CPU: no GPU memory needed
    ],
)
def test_weights_are_judged_without_kv_facts(engine, gpus, knobs, weights, oom):
    report = plan(
        PlanRequest(
            arch=ModelArch(hidden_size=5120, num_attention_heads=24),
            engine=engine,
            gpus=catalog_host("rtx3090", gpus),
            knobs=knobs,
            env={"NCCL_P2P_DISABLE": "1"},
            weights_bytes=weights,
        )
    )
    assert ("weights.oom" in report.codes()) is oom
    assert "arch.incomplete" in report.codes()
