"""KV maths against the figures engines.md derives from vLLM's code and the seeds' own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.importers.hf_config import load_hf_config
from serving.planner import PlanRequest, catalog_host, plan
from serving.planner.kv import (
    attn_bytes_per_token_layer,
    gdn_state_bytes_layer,
    hybrid_block_size,
    llama_kv,
    llama_layers_from_arch,
    pp_stage_sizes,
)

CONFIGS = Path(__file__).parents[1] / "fixtures" / "configs"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GB = 10**9


def arch(name: str):
    return load_hf_config(CONFIGS / f"{name}.json").arch


def vllm(model: str, gpus, knobs: dict, weights: int, **extra) -> PlanRequest:
    env = {"NCCL_P2P_DISABLE": "1"}
    return PlanRequest(arch=arch(model), engine="vllm", engine_version="0.33.0", gpus=gpus, knobs=knobs,
                       env=env, weights_bytes=weights, **extra)  # fmt: skip


# ---- engines.md §4 worked examples -----------------------------------------------------------


@pytest.mark.parametrize(("tp", "per_gpu"), [(1, 24 * KiB), (2, 12 * KiB), (4, 12 * KiB)])
def test_qwen3_next_kv_per_token_halves_then_replicates(tp: int, per_gpu: int) -> None:
    # engines.md: 12 layers x 2 x 2 KV heads x 256 x 2 B = 24 KiB; TP=4 replicates the 2 KV heads.
    a = attn_bytes_per_token_layer(arch("qwen3-next-80b-a3b"), tp, 2)
    assert a * 12 == per_gpu


def test_qwen3_next_gdn_state_is_37_7_mib_per_sequence() -> None:
    state = gdn_state_bytes_layer(arch("qwen3-next-80b-a3b"), 1, conv_bytes=2, ssm_bytes=2)
    assert 36 * state / MiB == pytest.approx(37.7, abs=0.05)


def test_qwen35_122b_hybrid_block_is_2096_at_tp2() -> None:
    # engines.md §4, the real error "block_size (2096)": fp32 SSM, bf16 attention at TP=2
    a122 = arch("qwen3.5-122b-a10b-fp8")
    page = gdn_state_bytes_layer(a122, 2, conv_bytes=2, ssm_bytes=4)
    assert page == 2_134_016
    assert hybrid_block_size(attn_bytes_per_token_layer(a122, 2, 2), page, None) == 2096


def test_qwen38_block_matches_the_1568_in_a_real_startup_log() -> None:
    # club-3090#1047 (1x A6000, fp8_e4m3 KV): "Setting attention block size to 1568 tokens"
    report = plan(vllm("qwen3.8-27b-w4a16", catalog_host("a6000", 1),
                       {"kv_cache_dtype": "fp8_e4m3", "max_model_len": 65536}, int(19.5 * GB)))  # fmt: skip
    assert report.block_size == 1568


def test_mla_latent_is_not_split_by_tp() -> None:
    mla = arch("deepseek-v3-mla")
    assert attn_bytes_per_token_layer(mla, 1, 2) == (512 + 64) * 2
    assert attn_bytes_per_token_layer(mla, 8, 2) == (512 + 64) * 2
    report = plan(vllm("deepseek-v3-mla", catalog_host("h200", 8),
                       {"tensor_parallel_size": 8, "max_model_len": 32768}, 690 * GB))  # fmt: skip
    assert report.kv_bytes_per_token_per_gpu == 61 * 576 * 2
    assert report.kv_bytes_per_token == 8 * 61 * 576 * 2  # every rank holds the latent


def test_pipeline_stage_sizes_follow_vllm() -> None:
    # distributed/utils.py get_pp_indices: remainder to stages [-2], [-3], ...
    assert pp_stage_sizes(64, 3) == [21, 22, 21]
    assert pp_stage_sizes(61, 4) == [15, 15, 16, 15]


def test_sliding_window_layers_cost_a_window_not_the_context() -> None:
    gemma = arch("gemma3-270m")
    short = plan(PlanRequest(arch=gemma, engine="vllm", gpus=catalog_host("rtx3090", 1),
                             knobs={"max_model_len": 8192}, weights_bytes=300 * 10**6))  # fmt: skip
    # only the 3 global layers grow per token: 1 KV head x (256 + 256) x 2 B x 3
    assert short.kv_bytes_per_token_per_gpu == 3 * 1024
    # the 15 sliding layers hold min(512 - 1 + 2048, 8192) tokens -> 160 blocks + 1
    assert short.state_bytes_per_sequence_per_gpu == 15 * 161 * 16 * 1024


# ---- the seeds' figures ----------------------------------------------------------------------

SEED2 = {
    "tensor_parallel_size": 2,
    "max_model_len": 262144,
    "max_num_seqs": 4,
    "gpu_memory_utilization": "0.95",
    "kv_cache_dtype": "fp8",
    "enforce_eager": True,
    "attention_backend": "TRITON_ATTN",
    "reasoning_parser": "qwen3",
    "tool_call_parser": "qwen3_coder",
}


def test_qwen38_27b_fp8_tp2_kv_per_token_and_per_262k_sequence() -> None:
    """Seed 002 says ~8 KiB/token per GPU and ~2.1 GiB per 262K sequence. The engines' formula
    (2 x KV heads x head_dim x full layers x bytes) with the config's 4 KV heads x 256 x 16 layers
    gives twice that per GPU: 16 KiB/token per GPU, 4 GiB per GPU (8 GiB in all) per sequence."""
    report = plan(vllm("qwen3.8-27b-w4a16", catalog_host("rtx5060ti", 2), SEED2, int(19.5 * GB)))
    assert report.kv_bytes_per_token_per_gpu == 16 * KiB
    assert report.kv_bytes_per_token == 32 * KiB
    assert report.kv_bytes_per_token_per_gpu * 262144 == 4 * GiB
    assert report.block_size == 1568


def test_seed2_host_pool_is_about_9_gib_and_backs_one_full_sequence_not_four() -> None:
    report = plan(vllm("qwen3.8-27b-w4a16", catalog_host("rtx5060ti", 2), SEED2, int(19.5 * GB)))
    assert 8 * GiB < report.kv_cache_bytes < 10.5 * GiB  # seed: "the KV pool (~9-10 GiB)"
    assert report.max_concurrent_full_length == 1  # seed: "four saturated 262K sequences"
    assert report.max_context_one_sequence == 262144
    assert report.finding("kv.concurrency_short") is not None
    assert not report.has_errors


def test_kv_cost_per_token_rose_3_2x_from_the_moe_to_the_dense_model() -> None:
    # seed 002: "KV cost per token also rose ~3.2x (2 KV heads x 10 layers -> 4 x 16)"
    old = plan(vllm("qwen3.6-35b-a3b-awq", catalog_host("rtx5060ti", 2), SEED2 | {"max_model_len": 65536}, 20 * GB))
    new = plan(vllm("qwen3.8-27b-w4a16", catalog_host("rtx5060ti", 2), SEED2, int(19.5 * GB)))
    assert new.kv_bytes_per_token / old.kv_bytes_per_token == pytest.approx(3.2)


def test_six_3090s_run_qwen35_27b_bf16_on_four_of_them() -> None:
    report = plan(vllm("qwen3.5-27b", catalog_host("rtx3090", 6),
                       {"tensor_parallel_size": 4, "max_model_len": 32768, "gpu_memory_utilization": 0.8},
                       56 * GB))  # fmt: skip
    assert not report.has_errors
    assert report.weights_bytes_per_gpu < 14 * GB
    assert report.gpus_used == 4 and report.gpus_present == 6  # seed 000: "67%"
    assert report.kv_pool_tokens > 32768


def test_six_3090s_run_the_122b_q6_on_llama_cpp_with_every_gpu() -> None:
    report = plan(PlanRequest(arch=arch("qwen3.5-122b-a10b-fp8"), engine="llama.cpp", gpus=catalog_host("rtx3090", 6),
                              knobs={"ctx_size": 262144, "parallel": 1, "cache_type_k": "q8_0",
                                     "cache_type_v": "q8_0", "flash_attn": "on", "mmproj": "/m/mmproj.gguf"},
                              weights_bytes=105 * GB))  # fmt: skip
    assert report.gpus_used == 6
    assert not report.has_errors
    assert report.weights_bytes_per_gpu == pytest.approx(105 * GB / 6, rel=0.01)
    # 12 full-attention layers x 2 KV heads x (256 + 256) x 34/32 B x 262,144 cells
    assert report.kv_cache_bytes == 12 * 2 * 512 * 34 // 32 * 262144


# ---- llama.cpp cache sizing (llama-context.cpp, llama-kv-cache-iswa.cpp) ---------------------


@pytest.mark.parametrize(
    ("ctx", "n_seq", "unified", "base_cells", "swa_cells"),
    [
        (4096, 1, False, 4096, 1024),  # swa: pad(512 + 512, 256)
        (8192, 2, False, 4096, 1024),  # per stream
        (5000, 2, False, 2560, 1024),  # n_ctx 5120 -> 2560 per slot
        (8192, 4, True, 8192, 2560),  # unified: 512 x 4 + 512
        (1000, 1, False, 1024, 1024),  # SWA never above the base cache
    ],
)
def test_llama_cells_per_stream(ctx: int, n_seq: int, unified: bool, base_cells: int, swa_cells: int) -> None:
    layers = llama_layers_from_arch(arch("gemma3-270m"))
    kv = llama_kv(layers, ctx_size=ctx, n_seq=n_seq, unified=unified, bytes_k=2, bytes_v=2)
    assert (kv.base_cells, kv.swa_cells) == (base_cells, swa_cells)
    streams = 1 if unified else n_seq
    assert kv.base_bytes == 3 * 512 * 2 * base_cells * streams
    assert kv.swa_bytes == 15 * 512 * 2 * swa_cells * streams
