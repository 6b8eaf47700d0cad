"""Metrics and startup-log parsing against real recorded text (see
tests/fixtures/engines/SOURCES.md for where each file came from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.engines.llamacpp import LlamaCppAdapter
from serving.engines.ollama import OllamaAdapter
from serving.engines.prometheus import MetricsParseError
from serving.engines.sglang import SglangAdapter
from serving.engines.vllm import VllmAdapter

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engines"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_vllm_v1_metrics_give_kv_usage_and_no_invented_numbers():
    m = VllmAdapter().parse_metrics(read("vllm_0.10.0_glm45_metrics.txt"))
    assert m.kv_cache_usage == pytest.approx(9.75010481363281e-06)
    # The excerpt has no num_requests_running nor a matching hits/queries pair.
    assert m.requests_running is None
    assert m.prefix_cache_hit_rate is None
    assert m.raw["vllm:prefix_cache_queries_total"] == 32.0
    assert "vllm:gpu_prefix_cache_hits_created" not in m.raw


def test_vllm_old_names_still_read():
    m = VllmAdapter().parse_metrics(read("vllm_v0_qwen25coder_metrics.txt"))
    assert m.requests_running == 0.0
    assert m.requests_waiting == 0.0
    assert m.kv_cache_usage == 0.0  # from vllm:gpu_cache_usage_perc


def test_vllm_spec_decode_acceptance_uses_totals_not_created_or_per_position():
    m = VllmAdapter().parse_metrics(read("vllm_spec_decode_live_metrics.txt"))
    assert m.spec_draft_tokens_total == pytest.approx(1.0218118e07)
    assert m.spec_accepted_tokens_total == pytest.approx(7.268642e06)
    assert m.spec_acceptance_rate == pytest.approx(7.268642e06 / 1.0218118e07)


def test_vllm_data_parallel_engines_add_up_and_kv_usage_averages():
    # Two engines (data parallel) as vLLM exposes them: one TYPE line, one sample per engine.
    lines = []
    for line in read("vllm_0.10.0_glm45_metrics.txt").splitlines():
        lines.append(line)
        if 'engine="0"' in line:
            lines.append(line.replace('engine="0"', 'engine="1"'))
    m = VllmAdapter().parse_metrics("\n".join(lines) + "\n")
    assert m.raw["vllm:prefix_cache_queries_total"] == 64.0
    assert m.kv_cache_usage == pytest.approx(9.75010481363281e-06)


def test_sglang_metrics_map_to_the_common_shape():
    m = SglangAdapter().parse_metrics(read("sglang_deepseek_r1_metrics.txt"))
    assert m.requests_running == 0.0
    assert m.kv_cache_usage == 0.0
    assert m.raw["sglang:cached_tokens_total"] == 2688.0
    assert m.raw["sglang:num_requests_total"] == 217.0


def test_sglang_first_release_metrics_parse():
    m = SglangAdapter().parse_metrics(read("sglang_llama32_3b_metrics.txt"))
    assert m.prompt_tokens_total == 230794.0
    assert m.raw["sglang:max_total_num_tokens"] == 570979.0


def test_llamacpp_metrics_from_the_real_server():
    m = LlamaCppAdapter().parse_metrics(read("llamacpp_metrics.txt"))
    assert m.generation_tokens_total and m.generation_tokens_total > 0
    assert m.prompt_tokens_total and m.prompt_tokens_total > 0
    assert m.requests_running == 0.0
    assert m.kv_cache_usage is None  # removed upstream (llama.cpp#13660)


def test_ollama_has_no_prometheus_metrics():
    m = OllamaAdapter().parse_metrics("anything")
    assert m.requests_running is None and m.raw == {}


def test_garbage_metrics_text_is_an_error_not_zeroes():
    with pytest.raises(MetricsParseError):
        VllmAdapter().parse_metrics('vllm:num_requests_running{engine="0" 1.0\n')


def test_vllm_kv_capacity_old_two_line_form():
    kv = VllmAdapter().parse_kv_capacity(read("vllm_startup_two_line.log"))
    assert kv.tokens == 42656
    assert kv.max_concurrency == pytest.approx(1.30)
    assert kv.details["max_model_len"] == 32768
    assert kv.details["available_kv_gib"] == pytest.approx(6.51)


def test_vllm_kv_capacity_new_one_line_form():
    kv = VllmAdapter().parse_kv_capacity(read("vllm_startup_one_line.log"))
    assert kv.tokens == 23296
    assert kv.max_concurrency == pytest.approx(5.69)
    assert kv.details["max_model_len"] == 4096


def test_sglang_kv_capacity_takes_the_target_pool_not_the_draft_pool():
    kv = SglangAdapter().parse_kv_capacity(read("sglang_startup_mtp_tp2.log"))
    assert kv.tokens == 454112
    assert kv.bytes == round((3.46 + 3.46) * 1024**3)
    assert kv.details["dtype"] == "torch.float8_e4m3fn"
    assert len(kv.details["pools"]) == 4


def test_sglang_kv_capacity_single_kv_size_form():
    kv = SglangAdapter().parse_kv_capacity(read("sglang_startup_kv_size.log"))
    assert kv.tokens == 975424
    assert kv.bytes == round(43.67 * 1024**3)


def test_llamacpp_kv_capacity_sums_the_global_and_sliding_window_caches():
    log = read("llamacpp_startup.log")
    kv = LlamaCppAdapter().parse_kv_capacity(log)
    caches = kv.details["caches"]
    assert len(caches) == 2  # Gemma 3: global + sliding-window layers
    assert kv.bytes == round(sum(c["mib"] for c in caches) * 1024 * 1024)
    assert kv.bytes == round((6.00 + 30.00) * 1024 * 1024)
    assert kv.tokens == 2048  # 1024 cells in each of 2 streams (--parallel 2, non-unified)


def test_no_kv_lines_means_unknown_capacity():
    assert VllmAdapter().parse_kv_capacity("nothing here").tokens is None
    assert LlamaCppAdapter().parse_kv_capacity("nothing here").bytes is None
