"""The planner's KV pool against what engines logged at start-up, and the error, case by case.

Each case is a real start-up whose log lines and configuration are public (or recorded here):
- vLLM V1, Qwen3-14B (tests/fixtures/engines/vllm_startup_two_line.log, LMCache#1739): the engine
  logged `Available KV cache memory: 6.51 GiB` -> `GPU KV cache size: 42,656 tokens`. Given the
  same memory, the planner's tokens (per-token bytes x blocks) must match.
- vLLM V1, Qwen3-235B-A22B-FP8 on 4x H100, TP=4, default gpu_memory_utilization (vllm#21348):
  `Available KV cache memory: 8.11 GiB`, `GPU KV cache size: 178,880 tokens`. Here the planner
  predicts the whole profile (GPU size x utilisation - weights - overheads) with its own weights
  ESTIMATE (no checkpoint size given), so the figure measures the estimate and the overhead model.
- llama.cpp, Gemma 3 270M on the CPU (tests/fixtures/engines/llamacpp_startup.log, recorded
  here) and on one H200 (tests/fixtures/gpu/h200, tests/gpu/test_h200_replay.py): the KV buffer
  is exact to the byte (asserted there; repeated here for the CPU case).

`pytest -s tests/deployments/test_planner_startup_logs.py` prints the table. Measured:
  Qwen3-14B tokens from memory          42,656 logged,     42,663 predicted (+0.02 %)
  Qwen3-235B-A22B-FP8 memory/GPU      8.11 GiB logged,  14.13 GiB predicted (+74 %)
  Qwen3-235B-A22B-FP8 tokens           178,880 logged,    315,271 predicted (+76 %)
  Gemma 3 270M llama.cpp CPU KV        exact (0 bytes); the H200 CUDA runs exact too
The 235B case is the planner's known gap: its weights estimate (235.1B parameters, 55.0 GiB per
GPU at TP=4) matches the model card, and its overheads (0.85 GiB non-torch, 1.67 GiB activation
and sampler) are those calibrated on smaller models, but vLLM 0.10 took ~6 GiB more per GPU there
(the thread blames the profile order of vllm#19312; the LMCache connector holds buffers too). One
such log does not say which, so the overhead model is not bent to it: the test pins the gap, and
a change to the overhead model shows its effect here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.importers.gguf_header import read_gguf_header
from serving.arch import ModelArch
from serving.engines.llamacpp import LlamaCppAdapter
from serving.engines.vllm import VllmAdapter
from serving.planner import PlanRequest, catalog_host, plan
from tests.support.llama import gemma_model_path

ENGINES = Path(__file__).resolve().parent.parent / "fixtures" / "engines"
GiB = 2**30

# Qwen/Qwen3-14B config.json (public): 40 layers, 40 heads, 8 KV heads of 128, hidden 5120.
QWEN3_14B = ModelArch(
    architecture="Qwen3ForCausalLM",
    num_layers=40,
    full_attention_layers=40,
    hidden_size=5120,
    intermediate_size=17408,
    num_attention_heads=40,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=151936,
    native_context=40960,
    torch_dtype="bfloat16",
)
# Qwen/Qwen3-235B-A22B-FP8 config.json (public): 94 layers, 64 heads, 4 KV heads of 128, 128
# experts (8 active) of 1536, hidden 4096; FP8 block-quantised (128 x 128).
QWEN3_235B = ModelArch(
    architecture="Qwen3MoeForCausalLM",
    num_layers=94,
    full_attention_layers=94,
    hidden_size=4096,
    intermediate_size=12288,
    moe_intermediate_size=1536,
    num_experts=128,
    experts_per_token=8,
    num_attention_heads=64,
    num_kv_heads=4,
    head_dim=128,
    vocab_size=151936,
    native_context=40960,
    torch_dtype="bfloat16",
    tie_word_embeddings=False,
)
ROWS: list[tuple[str, str, str, float]] = []


def _row(case: str, logged: float, predicted: float, unit: str) -> float:
    error = (predicted - logged) / logged
    fmt = (lambda v: f"{v / GiB:.2f} GiB") if unit == "GiB" else (lambda v: f"{v:,.0f}")
    ROWS.append((case, fmt(logged), fmt(predicted), error))
    print(f"{case:<36} {fmt(logged):>12} logged, {fmt(predicted):>12} predicted ({error:+.1%})")
    return error


def test_vllm_tokens_from_the_logged_kv_memory_qwen3_14b():
    log = (ENGINES / "vllm_startup_two_line.log").read_text()
    kv = VllmAdapter().parse_kv_capacity(log)
    memory = int(kv.details["available_kv_gib"] * GiB)
    report = plan(
        PlanRequest(
            arch=QWEN3_14B,
            engine="vllm",
            gpus=catalog_host("h100", 1),
            knobs={"kv_cache_memory_bytes": memory, "max_model_len": kv.details["max_model_len"]},
            weights_bytes=29_500_000_000,
        )
    )
    error = _row("Qwen3-14B tokens from memory", kv.tokens, report.kv_pool_tokens, "tokens")
    assert abs(error) < 0.005
    assert report.max_concurrent_full_length == int(kv.max_concurrency)


def test_vllm_whole_profile_qwen3_235b_fp8_on_four_h100s():
    """vllm#21348: `vllm serve Qwen3-235B-A22B-FP8 --tensor-parallel-size 4` on 4x H100 80GB
    (LMCache connector, default utilisation 0.9): `Available KV cache memory: 8.11 GiB`,
    `GPU KV cache size: 178,880 tokens`. The planner gets no weights size (it estimates them)."""
    report = plan(
        PlanRequest(
            arch=QWEN3_235B,
            engine="vllm",
            engine_version="0.10.0",
            gpus=catalog_host("h100", 4),
            knobs={"tensor_parallel_size": 4},
            checkpoint_quant="fp8",
            quant_bits=8,
        )
    )
    assert report.finding("weights.estimated") is not None
    memory_error = _row("Qwen3-235B-A22B-FP8 memory/GPU", 8.11 * GiB, report.kv_pool_bytes_per_gpu, "GiB")
    per_token = report.kv_bytes_per_token_per_gpu
    assert per_token == 94 * 2 * 1 * 128 * 2  # one of 4 KV heads per GPU, bf16 K and V
    tokens = report.kv_pool_bytes_per_gpu // per_token
    token_error = _row("Qwen3-235B-A22B-FP8 tokens", 178_880, tokens, "tokens")
    # The measured gap (see the module docstring), pinned so any change to the model shows here.
    assert 0.70 < memory_error < 0.78 and 0.72 < token_error < 0.80


def test_llama_cpp_cpu_kv_buffer_is_exact():
    log = (ENGINES / "llamacpp_startup.log").read_text()
    kv = LlamaCppAdapter().parse_kv_capacity(log)
    imported = read_gguf_header(gemma_model_path())
    report = plan(
        PlanRequest(
            arch=imported.arch,
            engine="llama.cpp",
            gpus=(),
            knobs={"ctx_size": 2048, "parallel": 2, "n_gpu_layers": 0},
            gguf=imported.kv,
            weights_bytes=imported.file_size,
        )
    )
    _row("Gemma 3 270M llama.cpp CPU KV", kv.bytes, report.kv_cache_bytes, "GiB")
    assert report.kv_cache_bytes == kv.bytes


@pytest.fixture(scope="module", autouse=True)
def _table():
    yield
    if ROWS:
        print("\ncase / logged / predicted / error")
        for case, logged, predicted, error in ROWS:
            print(f"  {case:<36} {logged:>12} {predicted:>12} {error:+.1%}")
