"""Fuzz (Hypothesis): whatever JSON is stored as a model's facts, the lenient readers return
plausible facts and the planner's what-fits table runs on them without an exception; whatever
text is imported as a config.json, the importer returns facts within the bounds or says why not."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployments.importers.hf_config import HfConfigError, arch_from_hf_config
from serving.arch import INT_FACTS, MAX_LAYERS, ModelArch
from serving.planner import CatalogModel, GgufKvFacts, what_fits
from serving.planner.gpus import catalog_host

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
FACTS = [f.name for f in fields(ModelArch)]
GGUF_FACTS = [f.name for f in fields(GgufKvFacts)]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=0, max_value=300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["full_attention", "sliding_attention", "linear_attention", "bfloat16", "64", ""]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner))
per_layer = st.lists(st.sampled_from(["full_attention", "sliding_attention", "linear_attention", 1, True]), max_size=80)


@st.composite
def stored_arch(draw: Any) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(values)  # not even an object
    keys = draw(st.lists(st.sampled_from([*FACTS, "evil", ""]), max_size=12, unique=True))
    data = {key: draw(values) for key in keys}
    if draw(st.booleans()):
        data["num_layers"] = draw(st.integers(-2, 80))
        data["layer_types"] = draw(per_layer)
    return data


@st.composite
def stored_gguf(draw: Any) -> Any:
    n_layer = draw(st.integers(-1, 40))
    data: dict[str, Any] = {
        "architecture": draw(st.sampled_from(["llama", "gemma3", 5, ""])),
        "n_layer": n_layer,
        "head_count_kv": draw(st.lists(st.integers(-1, 9), min_size=max(0, n_layer - 1), max_size=max(0, n_layer + 1))),
        "key_length": draw(st.integers(-1, 300)),
        "value_length": draw(st.integers(-1, 300)),
    }
    for key in draw(st.lists(st.sampled_from(GGUF_FACTS), max_size=6, unique=True)):
        data[key] = draw(values)
    return data


def _plausible(arch: ModelArch) -> None:
    for name, (least, most) in INT_FACTS.items():
        value = getattr(arch, name)
        assert value is None or (type(value) is int and least <= value <= most), (name, value)
    assert len(arch.layer_types) <= MAX_LAYERS
    assert arch.num_layers is None or not arch.layer_types or len(arch.layer_types) == arch.num_layers


GPUS = catalog_host("rtx3090", 2)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored_arch(), st.one_of(st.none(), stored_gguf()))
def test_stored_facts_never_break_the_readers_or_the_planner(arch_data: Any, gguf_data: Any) -> None:
    arch = ModelArch.from_dict(arch_data)
    _plausible(arch)
    gguf = GgufKvFacts.from_dict(gguf_data)
    if gguf is not None:
        assert len(gguf.head_count_kv) == gguf.n_layer
    models = [
        CatalogModel(name="m", arch=arch, weights_bytes=10**9, engine="vllm"),
        CatalogModel(name="g", arch=arch, weights_bytes=10**9, engine="llama.cpp", gguf=gguf),
    ]
    cells = what_fits(GPUS, models, contexts=(4096,))
    assert {cell.model for cell in cells} <= {"m", "g"}


BASE = json.loads((CONFIGS / "qwen3.5-27b.json").read_text())


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(BASE["text_config"]) + ["layer_types", "text_config"]), values, max_size=5)
)
def test_config_json_import_returns_bounded_facts_or_a_clear_error(changes: dict[str, Any]) -> None:
    config = {**BASE, "text_config": {**BASE["text_config"], **changes}}
    try:
        text = json.dumps(config)
    except (ValueError, OverflowError):
        return
    try:
        imported = arch_from_hf_config(text)
    except HfConfigError as exc:
        assert str(exc).startswith("config.json")
        return
    _plausible(imported.arch)
    assert ModelArch.from_dict(json.loads(json.dumps(imported.arch.to_dict()))) == imported.arch
