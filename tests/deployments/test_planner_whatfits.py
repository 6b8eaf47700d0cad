"""The "what can this host run" table: every model x valid layout x context, fast enough for a page."""

from __future__ import annotations

import time
from pathlib import Path

from deployments.importers.gguf_header import read_gguf_header
from deployments.importers.hf_config import load_hf_config
from serving.planner import CatalogModel, catalog_host, what_fits
from tests.support.llama import gemma_model_path

CONFIGS = Path(__file__).parents[1] / "fixtures" / "configs"
GB = 10**9


def model(name: str, weights: int, **extra) -> CatalogModel:
    return CatalogModel(name=name, arch=load_hf_config(CONFIGS / f"{name}.json").arch, weights_bytes=weights, **extra)


def catalog() -> list[CatalogModel]:
    gemma = read_gguf_header(gemma_model_path())
    return [
        model("qwen3.5-27b", 56 * GB),
        model("qwen3.8-27b-w4a16", int(19.5 * GB), checkpoint_quant="compressed-tensors",
              knobs={"kv_cache_dtype": "fp8", "attention_backend": "TRITON_ATTN"}),
        model("qwen3.5-122b-a10b-fp8", 122 * GB, checkpoint_quant="fp8"),
        CatalogModel(name="gemma-3-270m", arch=gemma.arch, weights_bytes=gemma.file_size, engine="llama.cpp",
                     gguf=gemma.kv),
    ]  # fmt: skip


def test_six_3090s_table_has_only_valid_layouts_and_verdicts() -> None:
    cells = what_fits(catalog_host("rtx3090", 6), catalog(), contexts=(8192, 131072))
    layouts_27b = {c.layout for c in cells if c.model == "qwen3.5-27b"}
    assert "TP=4 x PP=1" in layouts_27b and "TP=2 x PP=3" in layouts_27b
    assert not any(label.startswith(("TP=3 ", "TP=5 ", "TP=6 ")) for label in layouts_27b)  # invalid TP sizes
    by_key = {(c.model, c.layout, c.context): c for c in cells}
    assert by_key[("qwen3.5-27b", "TP=1 x PP=1", 8192)].verdict == "no"  # 56 GB on one 24 GB card
    assert "OOM" in by_key[("qwen3.5-27b", "TP=1 x PP=1", 8192)].reason
    assert by_key[("qwen3.5-27b", "TP=4 x PP=1", 8192)].verdict == "fits"
    # seed 000: FP8 122B cannot fit 4 x 24 GB in any layout; only 6-GPU pipeline layouts hold it
    fp8_122b = [c for c in cells if c.model == "qwen3.5-122b-a10b-fp8"]
    assert all(c.verdict == "no" for c in fp8_122b if c.gpus_used <= 4)
    assert {c.layout for c in fp8_122b if c.verdict != "no"} <= {"TP=2 x PP=3", "TP=1 x PP=6"}
    assert by_key[("gemma-3-270m", "layer split over 6 GPUs", 131072)].verdict in {"fits", "tight"}
    assert {c.verdict for c in cells} <= {"fits", "tight", "no"}


def test_two_5060ti_table_grades_contexts() -> None:
    cells = what_fits(catalog_host("rtx5060ti", 2), catalog()[1:2], contexts=(32768, 131072, 262144))
    by_ctx = {(c.layout, c.context): c for c in cells}
    assert by_ctx[("TP=2 x PP=1", 32768)].verdict == "fits"
    assert by_ctx[("TP=2 x PP=1", 131072)].verdict == "tight"  # one full-length sequence at a time
    assert by_ctx[("TP=2 x PP=1", 131072)].concurrent_full_length == 1
    # default utilisation 0.92 and the vision encoder's profile: 262K does not fit one sequence
    assert by_ctx[("TP=2 x PP=1", 262144)].verdict == "no"
    assert "largest context that fits" in by_ctx[("TP=2 x PP=1", 262144)].reason
    assert by_ctx[("TP=1 x PP=1", 32768)].verdict == "no"  # 19.5 GB of weights on one 16 GB card


def test_one_evaluation_takes_well_under_a_millisecond() -> None:
    models = catalog()
    start = time.perf_counter()
    cells = what_fits(catalog_host("rtx3090", 6), models)
    per_cell = (time.perf_counter() - start) / len(cells)
    assert len(cells) > 50
    assert per_cell < 0.001, f"{per_cell * 1e6:.0f} us per cell"


def test_an_sglang_model_is_laid_out_by_sglangs_own_knobs() -> None:
    """The table sets each layout by the engine's own parallel knobs (tp_size/pp_size on SGLang):
    vLLM's names were refused as unknown knobs, so every SGLang cell read "no"."""
    sglang = model("qwen3.5-27b", 56 * GB, engine="sglang")
    cells = what_fits(catalog_host("h100", 4), [sglang], contexts=(8192,))
    by_layout = {c.layout: c for c in cells}
    assert by_layout["TP=4 x PP=1"].verdict == "fits", by_layout["TP=4 x PP=1"].reason
    assert not [c.reason for c in cells if "unknown sglang knob" in c.reason]
