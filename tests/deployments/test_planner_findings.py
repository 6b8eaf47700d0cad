"""Every finding the seeds' stories call for, table-driven: the bad setup raises it, the fix clears it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deployments.importers.hf_config import load_hf_config
from serving.planner import PlanRequest, Severity, catalog_host, plan

CONFIGS = Path(__file__).parents[1] / "fixtures" / "configs"
GB = 10**9


def arch(name: str):
    return load_hf_config(CONFIGS / f"{name}.json").arch


@dataclass
class Case:
    model: str
    gpus: tuple
    knobs: dict[str, Any]
    engine: str = "vllm"
    version: str = "0.33.0"
    env: dict[str, str] = field(default_factory=lambda: {"NCCL_P2P_DISABLE": "1"})
    weights: int | None = 20 * GB
    extra: dict[str, Any] = field(default_factory=dict)

    def request(self, **changes: Any) -> PlanRequest:
        values = {
            "arch": arch(self.model),
            "engine": self.engine,
            "engine_version": self.version,
            "gpus": self.gpus,
            "knobs": self.knobs,
            "env": self.env,
            "weights_bytes": self.weights,
        } | self.extra
        values.update(changes)
        return PlanRequest(**values)


RTX3090_6 = catalog_host("rtx3090", 6)
RTX3090_4 = catalog_host("rtx3090", 4)
RTX5060_2 = catalog_host("rtx5060ti", 2)
A6000_2 = catalog_host("a6000", 2)
H200_2 = catalog_host("h200", 2)
SEED2_KNOBS = {
    "tensor_parallel_size": 2,
    "max_model_len": 65536,
    "kv_cache_dtype": "fp8",
    "gpu_memory_utilization": "0.95",
    "enforce_eager": True,
    "attention_backend": "TRITON_ATTN",
    "reasoning_parser": "qwen3",
    "tool_call_parser": "qwen3_coder",
    "max_num_seqs": 2,
}
SEED2 = Case("qwen3.8-27b-w4a16", RTX5060_2, SEED2_KNOBS, weights=int(19.5 * GB))

# (id, case, request changes that trigger, code, severity, request changes that fix it)
FINDINGS = [
    (
        "1 TP=6 does not fit Qwen3.5-27B's 4 KV heads",
        Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 6}, weights=56 * GB),
        {},
        "tp.kv_heads",
        Severity.ERROR,
        {"knobs": {"tensor_parallel_size": 2, "pipeline_parallel_size": 3}},
    ),
    (
        "1 TP=6 does not divide hidden size 5120",
        Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 6}, weights=56 * GB),
        {},
        "tp.hidden_size",
        Severity.ERROR,
        {"knobs": {"tensor_parallel_size": 4}},
    ),
    (
        "2 FP8 122B on 4x24 GB is a permanent OOM",
        Case("qwen3.5-122b-a10b-fp8", RTX3090_4, {"tensor_parallel_size": 4}, weights=122 * GB),
        {},
        "weights.oom",
        Severity.ERROR,
        {"gpus": catalog_host("h200", 4)},
    ),
    (
        "3 hybrid block 2096 above the 2048 default crashes vLLM 0.17",
        Case(
            "qwen3.5-122b-a10b-fp8",
            A6000_2,
            {"tensor_parallel_size": 2, "enable_prefix_caching": True, "kv_cache_memory_bytes": 8 * 2**30},
            version="0.17.1",
            extra={"packages": {"transformers": "5.3.0"}},
        ),
        {},
        "hybrid.batched_tokens_below_block",
        Severity.ERROR,
        {"knobs": {"tensor_parallel_size": 2, "enable_prefix_caching": True, "max_num_batched_tokens": 8192}},
    ),
    (
        "3 the same layout is fine on vLLM 0.33 (no assertion)",
        Case(
            "qwen3.5-122b-a10b-fp8",
            A6000_2,
            {"tensor_parallel_size": 2, "enable_prefix_caching": True},
            version="0.17.1",
            extra={"packages": {"transformers": "5.3.0"}},
        ),
        {},
        "hybrid.batched_tokens_below_block",
        Severity.ERROR,
        {"engine_version": "0.33.0"},
    ),
    (
        "4 awq_marlin on a compressed-tensors W4A16 checkpoint",
        Case(
            "qwen3.8-27b-w4a16",
            RTX5060_2,
            SEED2_KNOBS | {"quantization": "awq_marlin"},
            weights=int(19.5 * GB),
            extra={"checkpoint_quant": "compressed-tensors", "quant_bits": 4},
        ),
        {},
        "quant.flag_mismatch",
        Severity.ERROR,
        {"knobs": SEED2_KNOBS | {"quantization": "none"}},
    ),
    (
        "5 SGLang 0.5.9 cannot run Gated DeltaNet hybrids",
        Case("qwen3.5-27b", RTX3090_4, {"tp_size": 4}, engine="sglang", version="0.5.9", weights=56 * GB),
        {},
        "engine.unsupported_arch",
        Severity.ERROR,
        {"engine": "vllm", "engine_version": "0.33.0", "knobs": {"tensor_parallel_size": 4}},
    ),
    (
        "6 vLLM < 0.17 has no Qwen3_5 architecture",
        Case("qwen3.8-27b-w4a16", RTX5060_2, SEED2_KNOBS, version="0.16.0", weights=int(19.5 * GB)),
        {},
        "engine.version_floor",
        Severity.ERROR,
        {"engine_version": "0.22.0"},
    ),
    (
        "6 the variant's own minimum engine version",
        Case("qwen3-32b-awq", H200_2, {"tensor_parallel_size": 2}, version="0.19.0", weights=19 * GB),
        {"min_engine_versions": {"vllm": "0.20.0"}},
        "engine.version_floor",
        Severity.ERROR,
        {"min_engine_versions": {"vllm": "0.19.0"}},
    ),
    (
        "6 vLLM 0.17.1 needs transformers 5.3+",
        Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 4}, version="0.17.1", weights=56 * GB),
        {"packages": {"transformers": "4.57.1"}},
        "engine.package_floor",
        Severity.ERROR,
        {"packages": {"transformers": "5.3.0"}},
    ),
    (
        "7 image input on llama.cpp without --mmproj",
        Case("qwen3.5-27b", RTX3090_6, {"ctx_size": 32768}, engine="llama.cpp", version="", weights=17 * GB),
        {"vision": True},
        "vision.no_mmproj",
        Severity.ERROR,
        {"vision": True, "knobs": {"ctx_size": 32768, "mmproj": "/models/mmproj-BF16.gguf"}},
    ),
    (
        "7 a vision model on llama.cpp without a projector warns by default",
        Case("qwen3.5-27b", RTX3090_6, {"ctx_size": 32768}, engine="llama.cpp", version="", weights=17 * GB),
        {},
        "vision.no_mmproj",
        Severity.WARNING,
        {"vision": False},
    ),
    (
        "8 a thinking model without a reasoning parser",
        SEED2,
        {
            "knobs": {k: v for k, v in SEED2_KNOBS.items() if k != "reasoning_parser"},
            "recommended_reasoning_parser": "qwen3",
        },
        "parser.reasoning_missing",
        Severity.WARNING,
        {"recommended_reasoning_parser": "qwen3"},
    ),
    (
        "8 hermes is the older Qwen3's tool parser, Qwen3.5+ needs qwen3_coder",
        SEED2,
        {"knobs": SEED2_KNOBS | {"tool_call_parser": "hermes"}},
        "parser.tool_wrong",
        Severity.WARNING,
        {},
    ),
    (
        "9 FLASH_ATTN on Blackwell sm_120",
        SEED2,
        {"knobs": SEED2_KNOBS | {"attention_backend": "FLASH_ATTN"}},
        "gpu.blackwell_attention",
        Severity.ERROR,
        {},
    ),
    (
        "9 GeForce without P2P needs NCCL_P2P_DISABLE=1",
        SEED2,
        {"env": {}},
        "gpu.p2p_hang",
        Severity.ERROR,
        {},
    ),
    (
        "10 context beyond the native window without rope scaling",
        SEED2,
        {"knobs": SEED2_KNOBS | {"max_model_len": 1048576}},
        "context.beyond_native",
        Severity.ERROR,
        {
            "knobs": SEED2_KNOBS
            | {
                "max_model_len": 65536,
                "hf_overrides": '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}',
            }
        },
    ),
    (
        "10 a served context the KV pool cannot back for one sequence",
        SEED2,
        {"knobs": SEED2_KNOBS | {"max_model_len": 262144, "kv_cache_dtype": "auto"}},
        "kv.context_unbacked",
        Severity.ERROR,
        {"knobs": SEED2_KNOBS | {"max_model_len": 65536, "kv_cache_dtype": "auto"}},
    ),
    (
        "10 four parallel 262K sequences the pool cannot hold",
        SEED2,
        {"knobs": SEED2_KNOBS | {"max_model_len": 262144, "max_num_seqs": 4}},
        "kv.concurrency_short",
        Severity.WARNING,
        {"knobs": SEED2_KNOBS | {"max_model_len": 262144, "max_num_seqs": 1}},
    ),
    (
        "11 MTP on a model with no known MTP head",
        Case("qwen3-32b-awq", H200_2, {"tensor_parallel_size": 2}, weights=19 * GB),
        {
            "knobs": {
                "tensor_parallel_size": 2,
                "speculative_config": '{"method":"mtp","num_speculative_tokens":2}',
            }
        },
        "mtp.no_head",
        Severity.WARNING,
        {},
    ),
    (
        "12 TP=4 on six GPUs leaves two idle",
        Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 4}, weights=56 * GB),
        {},
        "gpus.idle",
        Severity.WARNING,
        {"knobs": {"tensor_parallel_size": 2, "pipeline_parallel_size": 3}},
    ),
]


@pytest.mark.parametrize(
    ("case", "bad", "code", "severity", "good"), [f[1:] for f in FINDINGS], ids=[f[0] for f in FINDINGS]
)
def test_finding_raised_and_cleared_by_its_fix(
    case: Case, bad: dict, code: str, severity: Severity, good: dict
) -> None:
    report = plan(case.request(**bad))
    finding = report.finding(code)
    assert finding is not None, f"{code} missing; got {report.codes()}"
    assert finding.severity is severity
    assert finding.message and finding.fix
    assert report.has_errors is (severity is Severity.ERROR) or report.has_errors
    fixed = plan(case.request(**good))
    assert fixed.finding(code) is None, fixed.finding(code)


def test_tp_finding_suggests_layouts_that_use_every_gpu() -> None:
    report = plan(Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 6}, weights=56 * GB).request())
    # Seed 000 says 24 heads do not divide by 6; they do (24 / 6 = 4). What blocks TP=6 is the
    # 4 KV heads (6 is not a multiple of 4), hidden 5120, intermediate 17408 and the GDN heads.
    assert report.finding("tp.attention_heads") is None
    assert {"tp.kv_heads", "tp.hidden_size", "tp.intermediate_size", "tp.linear_heads"} <= set(report.codes())
    fix = report.finding("tp.kv_heads").fix
    assert "Valid TP sizes here: 1, 2, 4" in fix
    assert "TP=2 x PP=3" in fix
    assert "llama.cpp" in fix


def test_fp8_122b_oom_message_gives_the_per_gpu_weights() -> None:
    report = plan(Case("qwen3.5-122b-a10b-fp8", RTX3090_4, {"tensor_parallel_size": 4}, weights=122 * GB).request())
    finding = report.finding("weights.oom")
    # 122 GB / 4 = 30.5 GB per GPU, less the BF16 MTP head vLLM skips while MTP is off (1.2 GB)
    assert report.weights_bytes_per_gpu == pytest.approx(29.24 * GB, rel=0.01)
    assert "27.23 GiB per GPU" in finding.message
    assert "24.00 GiB" in finding.message


def test_idle_gpus_say_how_much_memory_they_hold() -> None:
    report = plan(Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 4}, weights=56 * GB).request())
    assert (report.gpus_used, report.gpus_present) == (4, 6)
    assert report.to_dict()["gpu_utilisation"] == pytest.approx(0.6667, abs=1e-4)
    assert "2 of 6 GPUs stay idle" in report.finding("gpus.idle").message
    assert "48.00 GiB" in report.finding("gpus.idle").message


def test_concurrency_warning_says_how_many_fit() -> None:
    report = plan(SEED2.request(knobs=SEED2_KNOBS | {"max_model_len": 262144, "max_num_seqs": 4}))
    assert report.max_concurrent_full_length == 1
    assert "holds only 1 sequence(s) at the full 262,144 tokens" in report.finding("kv.concurrency_short").message


def test_unbacked_context_names_the_largest_that_fits() -> None:
    report = plan(SEED2.request(knobs=SEED2_KNOBS | {"max_model_len": 262144, "kv_cache_dtype": "auto"}))
    largest = report.max_context_one_sequence
    assert 65536 < largest < 262144
    assert f"{largest:,} tokens" in report.finding("kv.context_unbacked").message


def test_mtp_cost_is_stated_in_gib_and_tokens() -> None:
    off = plan(SEED2.request())
    on = plan(SEED2.request(knobs=SEED2_KNOBS | {"speculative_config": {"method": "mtp", "num_speculative_tokens": 2}}))
    assert "enabling it would cost 0.40 GiB per GPU" in off.finding("mtp.cost").message
    assert "tokens of KV pool" in off.finding("mtp.cost").message
    assert "loads the BF16 MTP head" in on.finding("mtp.cost").message
    # what enabling it costs: a smaller pool, and one more attention layer of KV per token
    assert on.kv_pool_bytes_per_gpu < off.kv_pool_bytes_per_gpu
    assert on.kv_bytes_per_token_per_gpu == off.kv_bytes_per_token_per_gpu * 17 // 16


def test_blackwell_without_a_backend_choice_warns() -> None:
    knobs = {k: v for k, v in SEED2_KNOBS.items() if k != "attention_backend"}
    report = plan(SEED2.request(knobs=knobs))
    assert report.finding("gpu.blackwell_attention").severity is Severity.WARNING


def test_env_attention_backend_is_ignored_by_new_vllm() -> None:
    knobs = {k: v for k, v in SEED2_KNOBS.items() if k != "attention_backend"}
    old = plan(
        SEED2.request(
            knobs=knobs,
            engine_version="0.22.0",
            env={"NCCL_P2P_DISABLE": "1", "VLLM_ATTENTION_BACKEND": "TRITON_ATTN"},
        )
    )
    new = plan(SEED2.request(knobs=knobs, env={"NCCL_P2P_DISABLE": "1", "VLLM_ATTENTION_BACKEND": "TRITON_ATTN"}))
    assert old.finding("gpu.blackwell_attention") is None
    assert new.finding("env.attention_backend_ignored") is not None
    assert new.finding("gpu.blackwell_attention") is not None


def test_quantized_v_cache_needs_flash_attention_on_llama_cpp() -> None:
    case = Case("qwen3.5-27b", RTX3090_6, {"ctx_size": 32768}, engine="llama.cpp", version="", weights=17 * GB)
    bad = plan(case.request(knobs={"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "off"}, vision=False))
    good = plan(case.request(knobs={"cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": "on"}, vision=False))
    assert bad.finding("llama.quantized_v_needs_flash_attn").severity is Severity.ERROR
    assert good.finding("llama.quantized_v_needs_flash_attn") is None


def test_every_finding_serialises_with_its_four_fields() -> None:
    report = plan(Case("qwen3.5-27b", RTX3090_6, {"tensor_parallel_size": 6}, weights=56 * GB).request())
    data = report.to_dict()
    assert data["has_errors"] is True
    assert all(set(f) == {"severity", "code", "message", "fix"} for f in data["findings"])
    assert data["findings"][0]["severity"] == "error"
