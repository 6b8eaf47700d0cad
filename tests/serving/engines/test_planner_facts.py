"""The engine facts the planner asks the adapters for, and the rule that keeps them there: no
comparison with an engine's name outside serving/engines (tools.code_figures.engine_branches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.engines.base import LINEAR_ATTENTION_HYBRID, QWEN3_5, GpuSplit
from serving.engines.ollama import default_context
from serving.engines.registry import get_adapter
from tools.code_figures import engine_branches

ROOT = Path(__file__).resolve().parents[3]
GiB = 1 << 30


def test_no_engine_name_is_compared_outside_the_adapters() -> None:
    assert engine_branches(ROOT) == {}


@pytest.mark.parametrize(
    ("engine", "version", "fraction"),
    [
        ("vllm", "0.33.0", 0.92),
        ("vllm", "", 0.92),
        ("vllm", "0.17.1", 0.9),
        ("sglang", "0.5.23", 0.88),  # without the GPUs, server_args' own fallback
        ("llama.cpp", "b7000", 1.0),
        ("ollama", "", 1.0),
    ],
)
def test_default_memory_fraction(engine: str, version: str, fraction: float) -> None:
    assert get_adapter(engine).default_memory_fraction(version) == fraction


@pytest.mark.parametrize(
    ("gib", "tp", "chunk", "speculative", "fraction"),
    [
        (24, 1, None, None, 0.847),  # reserve 512 + 2048 x 1.5 + 24 graphs x 2 + 128 MiB
        (24, 4, None, None, 0.827),  # 80 graphs, 512 MiB for the world of 4
        (48, 1, None, None, 0.861),  # chunk 4096
        (80, 1, None, None, 0.836),  # chunk 8192, 256 graphs
        (141, 1, None, None, 0.907),  # an H200: 13,440 MiB of 144,384
        (141, 1, None, "eagle3", 0.893),  # a draft model: 2 GiB more
        (141, 1, 16384, None, 0.822),  # a chunk of 16384 tokens set by hand: 24,576 MiB for it
        (192, 8, None, None, 0.862),  # chunk 16384, 512 graphs, 1 GiB for the world of 8
    ],
)
def test_sglang_picks_its_memory_fraction_from_the_gpus(
    gib: int, tp: int, chunk: int | None, speculative: str | None, fraction: float
) -> None:
    split = GpuSplit(gib * GiB, tp, prefill_chunk=chunk, speculative=speculative)
    assert get_adapter("sglang").default_memory_fraction("0.5.9", split) == fraction


def test_how_gpu_split_engines_hold_their_memory() -> None:
    vllm, sglang = get_adapter("vllm"), get_adapter("sglang")
    assert (vllm.kv_block_default, vllm.static_memory_fraction) == (16, False)
    assert (sglang.kv_block_default, sglang.static_memory_fraction) == (0, True)


def test_llama_cpp_slots() -> None:
    adapter = get_adapter("llama.cpp")
    auto = adapter.kv_slots(32768, None, False, vram=48 * GiB, native=None)
    assert (auto.sequences, auto.total, auto.unified) == (4, 32768, True)
    two = adapter.kv_slots(0, 2, None, vram=48 * GiB, native=None)
    assert (two.sequences, two.total, two.unified) == (2, None, False)


def test_ollama_slots_and_its_context_from_vram() -> None:
    assert [default_context(v * GiB) for v in (8, 24, 47, 48, 96)] == [4096, 32768, 32768, 262144, 262144]
    slots = get_adapter("ollama").kv_slots(None, 4, True, vram=24 * GiB, native=16384)
    assert (slots.sequences, slots.total, slots.unified) == (4, 4 * 16384, False)


def test_only_engines_with_llama_cpp_kv_have_slots() -> None:
    with pytest.raises(NotImplementedError):
        get_adapter("vllm").kv_slots(None, None, None, vram=0, native=None)


def test_family_support_and_ignored_variables() -> None:
    vllm, sglang, llama = get_adapter("vllm"), get_adapter("sglang"), get_adapter("llama.cpp")
    assert vllm.family_support[QWEN3_5].first == "0.17"
    assert [p.package for p in vllm.family_support[QWEN3_5].packages] == ["transformers"]
    assert sglang.family_support[LINEAR_ATTENTION_HYBRID].broken_through == "0.5.9"
    assert llama.family_support == {}
    assert vllm.env_ignored_since == {"VLLM_ATTENTION_BACKEND": "0.26.0"}
    assert sglang.env_ignored_since == {}


@pytest.mark.parametrize(
    ("engine", "gib", "defaults"),
    [
        ("vllm", 24, (2048, 256)),
        ("vllm", 80, (8192, 1024)),
        ("vllm", 192, (16384, 1024)),
        ("sglang", 24, (2048, None)),  # chunked_prefill_size by GPU memory; requests: what the pool holds
        ("sglang", 48, (4096, None)),
        ("sglang", 141, (8192, None)),
        ("sglang", 192, (16384, None)),
    ],
)
def test_batch_defaults(engine: str, gib: int, defaults: tuple[int, int | None]) -> None:
    assert get_adapter(engine).batch_defaults(gib * GiB) == defaults


def test_sglang_is_not_warned_with_vllms_request_cap_and_a_warning_names_the_engines_knob() -> None:
    """vLLM serves at most max_num_seqs (1024 on an H200) unless told; SGLang, unset, as many as its
    pool holds: only a cap someone set is more than the pool can hold at full length."""
    from deployments.importers.hf_config import load_hf_config
    from serving.planner import PlanRequest, catalog_host, plan
    from tests.deployments.test_planner_whatfits import CONFIGS

    arch = load_hf_config(CONFIGS / "qwen3-32b-awq.json").arch

    def short(engine: str, knobs: dict[str, int]) -> list[str]:
        report = plan(
            PlanRequest(
                arch=arch,
                engine=engine,
                gpus=catalog_host("h200", 1),
                knobs=knobs,
                weights_bytes=19 * 10**9,
                checkpoint_quant="awq",
                quant_bits=4,
            )
        )
        return [f.message.split(" but ")[0] for f in report.findings if f.code == "kv.concurrency_short"]

    assert short("vllm", {}) == ["max_num_seqs=1024"]
    assert short("sglang", {}) == []
    assert short("sglang", {"max_running_requests": 512}) == ["max_running_requests=512"]
