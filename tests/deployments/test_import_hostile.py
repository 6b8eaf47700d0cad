"""Hostile model imports: malformed config.json texts and GGUF headers are a clear error on the
form field they came from, quickly, and nothing is stored (issue 11, "Inputs that break the panel")."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

import gguf
import pytest
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from deployments.importers.gguf_header import GgufHeaderError, read_gguf_header
from deployments.importers.hf_config import HfConfigError, arch_from_hf_config
from deployments.models import ModelVariant
from deployments.services.imports import model_variant_import_gguf, model_variant_import_hf_config
from serving.arch import MAX_CONTEXT, MAX_LAYERS, ModelArch

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
URL = "/models/import/"

# A real config (Gemma 3 270M) every case below breaks in one way.
BASE: dict[str, Any] = json.loads((CONFIGS / "gemma3-270m.json").read_text())


def _with(**changes: Any) -> str:
    config = dict(BASE)
    for key, value in changes.items():
        if value is _DROP:
            config.pop(key, None)
        else:
            config[key] = value
    return json.dumps(config)


_DROP = object()
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_DIGITS = '{"num_hidden_layers": ' + "9" * 5000 + ', "num_attention_heads": 4}'

# (id, config.json text, what the error says)
HOSTILE_CONFIGS = [
    ("string-for-layers", _with(num_hidden_layers="18"), "num_hidden_layers must be a whole number"),
    ("list-for-heads", _with(num_attention_heads=[4]), "num_attention_heads must be a whole number"),
    ("dict-for-hidden-size", _with(hidden_size={"value": 640}), "hidden_size must be a whole number"),
    ("bool-for-layers", _with(num_hidden_layers=True), "num_hidden_layers must be a whole number"),
    ("negative-layers", _with(num_hidden_layers=-3), "num_hidden_layers must be from 1 to 1,024"),
    ("zero-layers", _with(num_hidden_layers=0), "num_hidden_layers must be from 1"),
    ("millions-of-layers", _with(num_hidden_layers=5_000_000), "num_hidden_layers must be from 1 to 1,024"),
    ("fraction-of-a-layer", _with(num_hidden_layers=17.5), "num_hidden_layers must be a whole number"),
    ("nan-layers", _with(num_hidden_layers=float("nan")), "num_hidden_layers must be a whole number"),
    ("infinite-context", _with(max_position_embeddings=float("inf")), "max_position_embeddings must be a whole"),
    ("absurd-context", _with(max_position_embeddings=10**30), "max_position_embeddings must be from 1 to"),
    ("huge-float-vocab", _with(vocab_size=1e300), "vocab_size must be from 1 to"),
    ("5000-digit-number", HUGE_DIGITS, "not valid JSON"),
    ("deep-nesting", DEEP, "nested too deeply"),
    ("top-level-list", "[1, 2, 3]", "must be a JSON object"),
    ("top-level-string", '"config"', "must be a JSON object"),
    ("top-level-null", "null", "must be a JSON object"),
    ("not-json", "{num_hidden_layers: 18", "not valid JSON"),
    ("text-config-list", _with(text_config=[{"num_hidden_layers": 4}]), "text_config must be an object"),
    ("quant-config-string", _with(quantization_config="awq"), "quantization_config must be an object"),
    ("config-groups-list", _with(quantization_config={"quant_method": "x", "config_groups": [1]}),
     "config_groups must be an object"),
    ("absurd-quant-bits", _with(quantization_config={"quant_method": "awq", "bits": 4096}),
     "bits must be from 1 to 64"),
    ("architectures-string", _with(architectures="Gemma3ForCausalLM"), "architectures must be a list"),
    ("architectures-number", _with(architectures=[42]), "architectures[0] must be text"),
    ("nul-in-dtype", _with(torch_dtype="bfloat16\u0000"), "torch_dtype contains a control character"),
    ("endless-model-type", _with(model_type="g" * 10_000), "model_type is too long"),
    ("layer-types-not-text", _with(layer_types=[1] * 18), "layer_types[0] must be text"),
    ("layer-types-dict", _with(layer_types={"0": "full_attention"}), "layer_types must be a list"),
    ("layer-types-too-many", _with(layer_types=[0] * 200_000), "lists 200,000 layers; at most 1,024"),
    ("layer-types-disagree", _with(layer_types=["full_attention"] * 3), "lists 3 layers but the model has 18"),
    ("interval-as-text", _with(full_attention_interval="4"), "full_attention_interval must be a whole number"),
    ("pattern-negative", _with(sliding_window_pattern=-6), "sliding_window_pattern must be from 0"),
    ("window-as-text", _with(sliding_window="512"), "sliding_window must be a whole number"),
    ("swa-flag-as-text", _with(use_sliding_window="yes"), "use_sliding_window must be true or false"),
    ("zero-head-dim", _with(head_dim=0), "head_dim must be from 1"),
    ("more-active-experts-than-experts", _with(num_experts=8, num_experts_per_tok=9), "more than the 8 experts"),
    ("no-heads", _with(num_attention_heads=_DROP), "lacks num_hidden_layers or num_attention_heads"),
    ("too-large", json.dumps({**BASE, "padding": "x" * 1_000_001}), "too large"),
]  # fmt: skip


def _stored() -> tuple[int, int]:
    return ModelVariant.objects.count(), AuditEvent.objects.filter(action="model.import").count()


@pytest.mark.parametrize(("text", "says"), [c[1:] for c in HOSTILE_CONFIGS], ids=[c[0] for c in HOSTILE_CONFIGS])
@pytest.mark.django_db
def test_a_malformed_config_json_is_refused_with_a_message_and_nothing_is_stored(operator, text, says):
    before = _stored()
    started = time.perf_counter()
    with pytest.raises(ValidationError) as caught:
        model_variant_import_hf_config(text=text, name="hostile", actor=operator)
    assert time.perf_counter() - started < 2.0
    assert set(caught.value.message_dict) == {"config"}
    assert says in " ".join(caught.value.message_dict["config"])
    assert _stored() == before


def test_the_table_covers_at_least_21_hostile_configs():
    assert len(HOSTILE_CONFIGS) >= 21


@pytest.mark.parametrize(
    "text",
    [
        _with(num_hidden_layers=10_000_000, full_attention_interval=4),  # would build a 10M-entry list
        _with(num_hidden_layers=10**18, sliding_window=512, sliding_window_pattern=6),
        _with(layer_types=[0] * 250_000, num_hidden_layers=250_000),
    ],
    ids=["interval", "pattern", "layer-types"],
)
def test_millions_of_layers_are_refused_before_any_per_layer_work(text):
    started = time.perf_counter()
    with pytest.raises(HfConfigError, match="at most 1,024|from 1 to 1,024"):
        arch_from_hf_config(text)
    assert time.perf_counter() - started < 0.5


def test_the_bounds_admit_the_largest_real_models():
    """1M-context, 512-expert, 126-layer, 10M-context (Llama 4 Scout) facts all import."""
    big = _with(
        num_hidden_layers=126,
        hidden_size=16384,
        intermediate_size=53248,
        num_attention_heads=128,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=262144,
        max_position_embeddings=10_485_760,
        num_experts=512,
        num_experts_per_tok=10,
        sliding_window=_DROP,
        sliding_window_pattern=_DROP,
    )
    arch = arch_from_hf_config(big).arch
    assert (arch.num_layers, arch.native_context, arch.num_experts) == (126, 10_485_760, 512)
    assert MAX_CONTEXT >= 10_485_760 and MAX_LAYERS >= 126


def test_every_fixture_config_still_imports_and_round_trips():
    for path in sorted(CONFIGS.glob("*.json")):
        arch = arch_from_hf_config(path.read_text()).arch
        assert ModelArch.from_dict(json.loads(json.dumps(arch.to_dict()))) == arch, path.name


@pytest.mark.django_db
def test_the_import_page_shows_the_error_beside_the_field_and_stores_nothing(client, operator):
    client.force_login(operator)
    before = _stored()
    response = client.post(URL, {"source": "hf", "hf-config_text": _with(num_hidden_layers="18"), "hf-name": "bad"})
    assert response.status_code == 200
    assert "num_hidden_layers must be a whole number" in response.content.decode()
    assert _stored() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "field", "says"),
    [
        ({"name": "bad\x00name"}, "name", "NUL"),
        ({"repo_id": "me/\x00"}, "repo_id", "NUL"),
        ({"family": "f" * 101}, "family", "too long"),
        ({"weights_bytes": -1}, "weights_gib", "positive"),
        ({"weights_bytes": 10**30}, "weights_gib", "at most 1 PiB"),
    ],
)
def test_the_other_import_fields_are_checked_too(operator, kwargs, field, says):
    values = {"text": (CONFIGS / "gemma3-270m.json").read_text(), "name": "fine", **kwargs}
    before = _stored()
    with pytest.raises(ValidationError) as caught:
        model_variant_import_hf_config(actor=operator, **values)
    assert says in " ".join(caught.value.message_dict[field])
    assert _stored() == before


# --- GGUF ---------------------------------------------------------------------------------------


def _gguf(path: Path, *, arch: str = "llama", skip: tuple[str, ...] = (), **values: Any) -> Path:
    """A header-only GGUF written by gguf-py's GGUFWriter: a plausible llama header, with `values`
    (key suffix -> value, typed as the writer types it) replacing or adding keys."""
    writer = gguf.GGUFWriter(str(path), arch)
    base: dict[str, Any] = {
        "block_count": 4,
        "embedding_length": 256,
        "attention.head_count": 4,
        "attention.head_count_kv": 2,
        "context_length": 4096,
    }
    base.update({k.replace("__", "."): v for k, v in values.items()})
    for suffix, value in base.items():
        key = suffix if suffix.startswith(("general.", "tokenizer.")) else f"{arch}.{suffix}"
        if suffix in skip or value is None:
            continue
        if isinstance(value, tuple):  # (GGUFValueType, value): an explicit type
            writer.add_key_value(key, value[1], value[0])
        elif isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint64(key, value) if value >= 2**32 else writer.add_int32(key, value) if value < 0 else (
                writer.add_uint32(key, value)
            )
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _raw_header(path: Path, *, tensors: int = 0, kvs: list[bytes] | None = None, kv_count: int | None = None) -> Path:
    """A GGUF header written by hand, so counts and lengths can lie."""
    items = kvs or []
    count = len(items) if kv_count is None else kv_count
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, tensors, count) + b"".join(items))
    return path


def _key(name: str) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode()


T = gguf.GGUFValueType
# (id, header keys replaced or added, what the error says)
HOSTILE_GGUF = [
    ("block-count-as-string", {"block_count": "4"}, "llama.block_count must be an integer"),
    ("block-count-as-float", {"block_count": 4.0}, "llama.block_count must be an integer"),
    ("no-block-count", {"block_count": 0}, "has no llama.block_count"),
    ("millions-of-blocks", {"block_count": 5_000_000}, "llama.block_count must be from 1 to 1,024"),
    ("negative-embedding", {"embedding_length": -5}, "must be from 1"),
    ("heads-as-string", {"attention__head_count": "4"}, "attention.head_count must be an integer or an array"),
    ("kv-heads-array-too-long", {"attention__head_count_kv": [2] * 5000}, "lists 5,000 values; at most 1,024"),
    ("kv-heads-of-strings", {"attention__head_count_kv": ["2"] * 4}, "must be an integer or an array"),
    ("absurd-heads", {"attention__head_count": 1_000_000}, "attention.head_count must be from 0 to 4,096"),
    ("context-nan", {"context_length": float("nan")}, "llama.context_length must be an integer"),
    ("context-absurd", {"context_length": 2**40}, "context_length must be from 1 to"),
    ("key-length-absurd", {"attention__key_length": 2**31}, "attention.key_length must be from 1 to 4,096"),
    ("window-pattern-string", {"attention__sliding_window": 512, "attention__sliding_window_pattern": "6"},
     "sliding_window_pattern must be an integer or an array"),
    ("more-used-than-experts", {"expert_count": 8, "expert_used_count": 9}, "more than the 8 experts"),
    ("conv-kernel-absurd", {"ssm__conv_kernel": 10**6}, "ssm.conv_kernel must be from 1 to 64"),
    ("file-type-string", {"general.file_type": "Q4_K_M"}, "general.file_type must be an integer"),
    ("name-not-text", {"general.name": (T.UINT32, 7)}, "general.name must be a string"),
    ("endless-name", {"general.name": "n" * 5000}, "general.name is not a plausible name"),
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "says"), [c[1:] for c in HOSTILE_GGUF], ids=[c[0] for c in HOSTILE_GGUF])
def test_a_gguf_header_with_wrong_types_or_absurd_values_is_refused(tmp_path, operator, values, says):
    path = _gguf(tmp_path / "model.gguf", **values)
    before = _stored()
    started = time.perf_counter()
    with pytest.raises(ValidationError) as caught:
        model_variant_import_gguf(path=str(path), name="hostile", actor=operator)
    assert time.perf_counter() - started < 2.0
    assert set(caught.value.message_dict) == {"path"}
    assert says in " ".join(caught.value.message_dict["path"])
    assert _stored() == before


# The naming fields only feed the guess of what the model is for (serving.purpose): a bad one reads as
# absent, and the import goes on. (id, header keys replaced or added, the purpose then guessed)
BAD_NAMING = [
    ("finetune-not-text", {"general.finetune": (T.UINT32, 7), "general.basename": "llama-x"}, "completions"),
    ("endless-finetune", {"general.finetune": "it" * 2_000, "general.basename": "llama-x"}, "completions"),
    ("basename-with-nul", {"general.basename": "llama\x00x"}, "chat"),
    ("basename-not-text", {"general.basename": (T.INT32, -1)}, "chat"),
    ("base-model-count-as-string", {"general.base_model.count": "1", "general.basename": "llama-x"}, "completions"),
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("values", "purpose"), [c[1:] for c in BAD_NAMING], ids=[c[0] for c in BAD_NAMING])
def test_a_bad_naming_field_reads_as_absent_and_the_model_is_imported(tmp_path, operator, values, purpose):
    path = _gguf(tmp_path / "model.gguf", **values)
    variant = model_variant_import_gguf(path=str(path), name="named-oddly", actor=operator)
    assert ModelVariant.objects.get(pk=variant.pk).purpose == purpose
    assert variant.model_arch.num_layers == 4


def test_the_writer_header_is_accepted_when_nothing_is_wrong(tmp_path):
    header = read_gguf_header(_gguf(tmp_path / "fine.gguf"))
    assert (header.arch.num_layers, header.arch.num_kv_heads, header.kv.head_count_kv) == (4, 2, (2, 2, 2, 2))


def test_architecture_name_must_be_a_plain_name(tmp_path):
    with pytest.raises(GgufHeaderError, match="not an architecture name"):
        read_gguf_header(_gguf(tmp_path / "x.gguf", arch="llama; rm -rf /"))


ARRAY, STRING, UINT32 = 9, 8, 4

HAND_WRITTEN = [
    ("kv-count-lies", {"kv_count": 2**40}, "declares 1,099,511,627,776 metadata keys"),
    ("tensor-count-lies", {"tensors": 2**40}, "declares 1,099,511,627,776 tensors"),
    ("array-of-a-trillion", {"kvs": [_key("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, 2**40)]},
     "an array of 1,099,511,627,776 values"),
    ("array-past-the-end", {"kvs": [_key("llama.x") + struct.pack("<IIQ", ARRAY, UINT32, 1000)]},
     "runs past the end of the file"),
    ("string-of-a-petabyte", {"kvs": [_key("general.name") + struct.pack("<IQ", STRING, 2**50)]}, "bytes long"),
    ("key-past-the-end", {"kvs": [struct.pack("<Q", 900) + b"general"]}, "runs past the end of the file"),
    ("unknown-value-type", {"kvs": [_key("general.name") + struct.pack("<I", 77) + b"\0" * 16]},
     "unknown value type 77"),
    ("nested-arrays", {"kvs": [_key("llama.x") + struct.pack("<IIQ", ARRAY, ARRAY, 1) + b"\0" * 16]},
     "an array of value type 9"),
    ("string-past-the-end", {"kvs": [_key("general.architecture") + struct.pack("<IQ", STRING, 10_000)]},
     "a string value runs past the end of the file"),
]  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("spec", "says"), [c[1:] for c in HAND_WRITTEN], ids=[c[0] for c in HAND_WRITTEN])
def test_a_gguf_header_whose_counts_and_lengths_lie_is_refused_at_once(tmp_path, operator, spec, says):
    path = _raw_header(tmp_path / "liar.gguf", **spec)
    path.write_bytes(path.read_bytes() + b"\0" * 64)  # long enough to hold a header, never what it claims
    before = _stored()
    started = time.perf_counter()
    with pytest.raises(ValidationError) as caught:
        model_variant_import_gguf(path=str(path), actor=operator)
    assert time.perf_counter() - started < 1.0
    assert says in " ".join(caught.value.message_dict["path"])
    assert _stored() == before


@pytest.mark.django_db
@pytest.mark.parametrize("content", [b"", b"GGUF\x03\x00", b"GGUF" + b"\xff" * 40, b"\0" * 1000])
def test_empty_or_garbage_gguf_files_are_refused(tmp_path, operator, content):
    path = tmp_path / "junk.gguf"
    path.write_bytes(content)
    before = _stored()
    with pytest.raises(ValidationError) as caught:
        model_variant_import_gguf(path=str(path), actor=operator)
    assert "GGUF" in " ".join(caught.value.message_dict["path"])
    assert _stored() == before


def test_the_largest_vocabulary_allowed_is_read_in_seconds_not_minutes(tmp_path):
    """2**21 tokens (the bound): the header walk skips the strings instead of decoding them."""
    from deployments.importers.gguf_header import MAX_ARRAY

    tokens = (
        _key("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", ARRAY, STRING, MAX_ARRAY)
        + (b"\1" + b"\0" * 7 + b"a") * MAX_ARRAY
    )
    arch = _key("general.architecture") + struct.pack("<IQ", STRING, 5) + b"llama"
    blocks = _key("llama.block_count") + struct.pack("<II", UINT32, 2)
    heads = _key("llama.attention.head_count") + struct.pack("<II", UINT32, 2)
    path = _raw_header(tmp_path / "vocab.gguf", kvs=[arch, blocks, heads, tokens])
    started = time.perf_counter()
    header = read_gguf_header(path)
    assert time.perf_counter() - started < 10.0
    assert header.arch.vocab_size == MAX_ARRAY and header.arch.num_layers == 2
