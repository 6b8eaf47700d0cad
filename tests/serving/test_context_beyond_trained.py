"""A context beyond the model's trained length on llama.cpp: llama-server allocates the KV cache
for the whole `ctx_size` but caps each slot at the trained length ("the slot context (65536)
exceeds the training context of the model (32768) - capping", seen with the shipped Gemma 270M).
So the served context the exports and the door give clients is the trained length, and the
planner's warning says what the engine does instead of a generic "answers worse"."""

from __future__ import annotations

from pathlib import Path

from deployments.importers.hf_config import load_hf_config
from serving.engines.base import ModelRef
from serving.launch import RevisionSpec, served_context
from serving.planner import PlanRequest, catalog_host, plan

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
GEMMA = ModelRef(name="gemma-270m", gguf_file="/models/gemma.gguf", format="gguf", native_context=32768)


def _context(**knobs: object) -> tuple[int | None, str]:
    served = served_context(RevisionSpec(engine="llama.cpp", version="", model=GEMMA, knobs=knobs))
    return served.per_sequence, served.source


def test_a_slot_beyond_the_trained_length_serves_the_trained_length() -> None:
    assert _context(ctx_size=65536, parallel=1)[0] == 32768
    assert "capped at the model's trained 32,768 tokens per slot" in _context(ctx_size=65536, parallel=1)[1]
    assert _context(ctx_size=131072, parallel=2, kv_unified=False)[0] == 32768  # 65,536 a slot, capped
    assert _context(ctx_size=65536, parallel=2, kv_unified=False)[0] == 32768  # within: not capped
    assert _context(ctx_size=16384, parallel=1) == (16384, "ctx_size")


def test_the_planner_names_llamas_cap_for_a_context_beyond_the_trained_length() -> None:
    arch = load_hf_config(CONFIGS / "qwen3.5-27b.json").arch
    request = PlanRequest(
        arch=arch,
        engine="llama.cpp",
        engine_version="",
        gpus=catalog_host("RTX 3090", 2),
        knobs={"ctx_size": 2 * (arch.native_context or 0)},
        env={},
        weights_bytes=17 * 10**9,
        vision=False,
    )
    finding = plan(request).finding("context.beyond_native")
    assert finding is not None and "caps each slot at the trained length" in finding.message
    assert "still allocates the KV cache for the whole context" in finding.message
