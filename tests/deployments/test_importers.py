"""config.json and GGUF headers become the architecture facts the planner works from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments.importers.gguf_header import GgufHeaderError, read_gguf_header
from deployments.importers.hf_config import HfConfigError, arch_from_hf_config, load_hf_config
from serving.arch import FULL_ATTENTION, LINEAR_ATTENTION, SLIDING_ATTENTION, ModelArch
from tests.support.llama import gemma_model_path

CONFIGS = Path(__file__).parents[1] / "fixtures" / "configs"

HF_CASES = [
    # file, expected arch fields, expected quant (method, bits, group)
    (
        "qwen3.8-27b-w4a16",
        {"architecture": "Qwen3_5ForConditionalGeneration", "family": "Qwen3.5", "num_layers": 64,
         "full_attention_layers": 16, "linear_attention_layers": 48, "num_kv_heads": 4, "head_dim": 256,
         "hidden_size": 5120, "num_attention_heads": 24, "native_context": 262144, "has_vision": True,
         "has_mtp": True, "mtp_num_layers": 1, "mamba_ssm_dtype": "float32", "linear_num_value_heads": 48},
        ("compressed-tensors", 4, 128),
    ),
    (
        "qwen3.6-35b-a3b-awq",
        {"num_layers": 40, "full_attention_layers": 10, "linear_attention_layers": 30, "num_kv_heads": 2,
         "num_experts": 256, "experts_per_token": 8, "moe_intermediate_size": 512},
        ("awq", 4, 128),
    ),
    (
        "qwen3-next-80b-a3b",
        {"family": "Qwen3-Next", "full_attention_layers": 12, "linear_attention_layers": 36, "has_vision": False,
         "has_mtp": None},
        (None, None, None),
    ),
    (
        "deepseek-v3-mla",
        {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "head_dim": 192, "v_head_dim": 128, "num_experts": 256,
         "has_mtp": True, "full_attention_layers": 61},
        ("fp8", 8, None),
    ),
    (
        "gemma3-270m",
        {"full_attention_layers": 3, "sliding_window_layers": 15, "sliding_window": 512, "num_kv_heads": 1},
        (None, None, None),
    ),
    (
        "qwen3-32b-awq",  # use_sliding_window: false -> no sliding layers
        {"full_attention_layers": 64, "sliding_window_layers": 0, "sliding_window": None, "num_kv_heads": 8},
        ("awq", 4, 128),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "expected", "quant"), HF_CASES, ids=[c[0] for c in HF_CASES])
def test_hf_config_import(name: str, expected: dict, quant: tuple) -> None:
    result = load_hf_config(CONFIGS / f"{name}.json")
    for key, value in expected.items():
        assert getattr(result.arch, key) == value, key
    assert (result.quant.method, result.quant.bits, result.quant.group_size) == quant
    # the arch survives the JSON round trip the ModelVariant stores it through
    assert ModelArch.from_dict(json.loads(json.dumps(result.arch.to_dict()))) == result.arch


def test_qwen35_layer_types_every_fourth_layer_is_full_attention() -> None:
    arch = load_hf_config(CONFIGS / "qwen3.5-27b.json").arch  # no layer_types: built from the interval
    assert arch.layer_types[:4] == (LINEAR_ATTENTION, LINEAR_ATTENTION, LINEAR_ATTENTION, FULL_ATTENTION)
    assert arch.layer_types == load_hf_config(CONFIGS / "qwen3.8-27b-w4a16.json").arch.layer_types


def test_hf_config_accepts_json_text_and_a_model_directory(tmp_path: Path) -> None:
    text = (CONFIGS / "gemma3-270m.json").read_text()
    (tmp_path / "config.json").write_text(text)
    assert arch_from_hf_config(text).arch == load_hf_config(tmp_path).arch


@pytest.mark.parametrize("bad", ["{not json", "[1, 2]", '{"model_type": "llama"}'])
def test_hf_config_rejects_what_is_not_a_model_config(bad: str) -> None:
    with pytest.raises(HfConfigError):
        arch_from_hf_config(bad)


def test_gguf_header_of_the_real_gemma_model() -> None:
    header = read_gguf_header(gemma_model_path())
    arch, kv = header.arch, header.kv
    assert arch.architecture == "gemma3"
    assert (arch.num_layers, arch.num_attention_heads, arch.num_kv_heads, arch.head_dim) == (18, 4, 1, 256)
    assert (arch.hidden_size, arch.native_context, arch.vocab_size) == (640, 32768, 262144)
    assert 260_000_000 < arch.params_total < 280_000_000  # "270M"
    # llama.cpp's gemma3 period: 5 sliding layers, then a global one (src/models/gemma3.cpp)
    assert [i for i, swa in enumerate(kv.swa_layers) if not swa] == [5, 11, 17]
    assert arch.layer_types[5] == FULL_ATTENTION and arch.layer_types[0] == SLIDING_ATTENTION
    assert (kv.sliding_window, kv.key_length, kv.value_length) == (512, 256, 256)
    assert kv.head_count_kv == (1,) * 18
    assert header.file_type_name == "Q4_K_M"
    assert kv.file_size == header.file_size == Path(gemma_model_path()).stat().st_size


def test_gguf_and_hf_importers_agree_on_gemma_layer_kinds() -> None:
    from_gguf = read_gguf_header(gemma_model_path()).arch
    from_hf = load_hf_config(CONFIGS / "gemma3-270m.json").arch
    assert from_gguf.layer_types == from_hf.layer_types
    assert from_gguf.sliding_window == from_hf.sliding_window


def test_gguf_reader_rejects_a_file_that_is_not_gguf(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(GgufHeaderError):
        read_gguf_header(bogus)
