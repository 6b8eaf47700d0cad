"""Fuzz (Hypothesis) over everything a user hands the panel (issue 11, "Proof").

Hostile but structured inputs: JSON values with NUL, lone surrogates and odd unicode, huge and
negative numbers, NaN/inf, bools where numbers go; knob dicts drawn from each engine adapter's
real knob table plus junk names; environments with the real dangerous names (LD_PRELOAD,
LLAMA_ARG_*, VLLM_PLUGINS, ...); config.json objects built from the real keys with wrong types
and ranges; GGUF files (random bytes, and headers written by gguf-py's GGUFWriter with hostile
values); group_vars YAML texts (aliases, tags, Jinja, huge numbers, odd types).

Properties:
- pure validators raise only their documented error (EngineConfigError, UnsafeValueError,
  HfConfigError, GgufHeaderError, AnsibleVarsError), never another exception, never hang;
- services raise only ValidationError / PermissionDenied, and on a refusal the rows of
  DeploymentRevision, ModelVariant and AuditEvent are unchanged;
- what a service accepts is stored as plain JSON and the pages that show it answer 200;
- a GPU host's agent API answers every body with 200 or 400 (never a 500), and a 400 stores nothing.

Examples per property (`max_examples`; `--hypothesis-show-statistics` shows each as "N passing";
"accepted" is the share a service stored, whose pages were then fetched):
  test_adapters_raise_only_engine_config_error     800
  test_form_knob_text_raises_only_value_errors     600
  test_env_policy_raises_only_engine_config_error  600
  test_json_check_accepts_only_storable_values     800
  test_hf_config_importer_raises_only_its_error    800
  test_hf_config_raw_text                          400
  test_gguf_random_bytes                           400
  test_gguf_written_headers                        300
  test_group_vars_parser_raises_only_its_error     500
  test_revision_service                            200  (PostgreSQL; ~30% accepted)
  test_hf_import_service                           120  (PostgreSQL; ~38% accepted)
  test_gguf_import_service                          80  (PostgreSQL; ~6% accepted)
  test_ansible_import_service                      150  (PostgreSQL; ~5% accepted)
  test_agent_api_bodies_never_get_a_500            400  (PostgreSQL, over HTTP: every POST endpoint of /agent/v1/)
  total                                           6150  (about 75 s on two busy cores)
Two bugs it found (lone surrogates reaching PostgreSQL, a zero tensor_split share dividing by
zero in the planner) are fixed; their minimal reproducers stay at the end of the file.
"""

from __future__ import annotations

import json
import math
import struct
import tempfile
import time
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import gguf
import pytest
import yaml
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from core.models import AuditEvent
from deployments.choices import OperationState
from deployments.importers.gguf_header import GgufHeaderError, read_gguf_header
from deployments.importers.hf_config import HfConfigError, arch_from_hf_config
from deployments.models import DeploymentRevision, ModelVariant
from deployments.services.imports import (
    model_variant_import_gguf,
    model_variant_import_hf_config,
    revision_import_ansible,
)
from serving.ansible_vars import AnsibleVarsError, parse_group_vars
from serving.engines.base import EngineConfig, EngineConfigError
from serving.engines.envpolicy import ALLOWED, REFUSED, classify_env
from serving.engines.registry import ADAPTERS, get_adapter
from serving.safety import UnsafeValueError, check_json_value
from tests.hardware.factories import GPUFactory, HostFactory
from tests.support.revisions import make_revision

ENGINES = sorted(ADAPTERS)
SLOW = 5.0  # seconds: no single input may take longer than this (alias bombs, huge sizes)
PURE = settings(database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DB = settings(
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies: hostile scalars and JSON ------------------------------------------------------

ODD_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "²",
    "٣",
    "1e309",
    "-1e309",
    "nan",
    "NaN",
    "inf",
    "-1",
    "0",
    "9" * 40,
    "0x10",
    "true",
    "null",
    "[]",
    "{}",
    "\u202egnp.exe",
    "\U0001f4a9",
    "<script>alert(1)</script>",
    "{{ lookup('pipe','id') }}",
    "{% for x in y %}",
    "../../etc/passwd",
    "/etc/passwd",
    "/models/../etc/shadow",
    "/models/m.gguf",
    "--path=/",
    "-rf",
    "line\nbreak",
    "cr\rreturn",
    "Qwen/Qwen3-8B",
    "evil/repo",
]
# Lone surrogates: json.loads ("\\ud800") and YAML escapes produce them, and so does Python's
# argv decoding of invalid UTF-8; PostgreSQL refuses them, so every text check must.
SURROGATES = ["\ud800", "x\udfffy", "\udced"]
ODD_TEXT += SURROGATES
texts = st.one_of(
    st.text(max_size=20), st.sampled_from(ODD_TEXT), st.builds(lambda n: "x" * n, st.sampled_from([5000, 100_001]))
)
keys = st.one_of(st.text(max_size=8), st.sampled_from(["", "\x00", "model", "trust_remote_code", "auto_map"]))
BIG_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**23]
ints = st.one_of(
    st.integers(-(2**70), 2**70), st.integers(-2, 70_000), st.sampled_from(BIG_INTS), st.builds(lambda: 10**400)
)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 1e23])
)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=20,
)
# A few values stand for "something that is not JSON at all".
non_json = st.sampled_from([b"bytes", (1, 2), {1, 2}, object(), 1j, {1: "int key"}, {("a",): 1}])


def huge_int() -> int:
    """A 5,000-digit int: `str()` of it raises ValueError (Python caps int->text at 4,300 digits)."""
    return 10**5000


# --- knobs and environments ----------------------------------------------------------------------

JUNK_KNOBS = ["", "vision", "__class__", "trust_remote_code", "path", "LD_PRELOAD", "ctx-size", "model", "port", "host",
              "api_key", "-x", "a b", "\x00"]  # fmt: skip


def knob_value(spec: Any) -> st.SearchStrategy[Any]:
    """Values aimed at a knob's kind (in and just out of range), plus anything JSON."""
    aimed: list[st.SearchStrategy[Any]] = [json_values]
    low = spec.minimum if spec.minimum is not None else 0
    high = spec.maximum if spec.maximum is not None else 2**31
    if spec.kind in ("int", "float"):
        aimed.append(st.sampled_from([low, high, low - 1, high + 1, int(low), int(high) + 1, -1, 0, True, "8", "1e3"]))
        aimed.append(st.integers(int(low) - 2, min(int(high) + 2, 2**40)))
        aimed.append(st.floats(min_value=float(low) - 1, max_value=float(high) + 1))
    if spec.kind == "choice" and spec.choices:
        aimed.append(st.sampled_from([*spec.choices, spec.choices[0].upper(), spec.choices[0] + "\x00"]))
    if spec.kind in ("str", "token", "path"):
        aimed.append(
            st.sampled_from(["/models/x.gguf", "/models/../etc/passwd", "/etc/passwd", "relative/x", "a" * 5000])
        )
    if spec.kind == "json":
        aimed.append(
            st.sampled_from(
                [
                    {"model": "evil/repo", "method": "eagle"},
                    {"trust_remote_code": True},
                    {"auto_map": {"AutoModel": "evil.py"}},
                    {"num_speculative_tokens": math.nan},
                    '{"model": "/etc"}',
                    '{"a": NaN}',
                    "[" * 3000 + "]" * 3000,
                    '{"n": ' + "9" * 5000 + "}",
                ]
            )
        )
    return st.one_of(*aimed)


@st.composite
def knob_dicts(draw: Any, engine: str) -> dict[str, Any]:
    specs = get_adapter(engine).knobs  # type: ignore[attr-defined]
    names = draw(st.lists(st.sampled_from([*sorted(specs), *JUNK_KNOBS]), max_size=6, unique=True))
    out: dict[str, Any] = {}
    for name in names:
        spec = specs.get(name)
        out[name] = draw(knob_value(spec) if spec is not None else json_values)
    return out


def _example_name(pattern: str) -> str:
    return pattern.replace("*", "X")


ENV_NAMES = sorted(
    {_example_name(r.name) for r in ALLOWED}
    | {_example_name(r.pattern) for r in REFUSED}
    | {
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "LLAMA_ARG_STATIC_PATH",
        "LLAMA_ARG_MODEL",
        "PATH",
        "PYTHONPATH",
        "VLLM_PLUGINS",
        "HF_ENDPOINT",
        "NCCL_NET_PLUGIN",
        "NCCL_DEBUG_FILE",
        "NCCL_P2P_DISABLE",
        "HF_TOKEN",
        "OLLAMA_HOST",
        "OLLAMA_MODELS",
        "OLLAMA_DEBUG",
        "OLLAMA_LOAD_TIMEOUT",
        "",
        "1BAD",
        "A=B",
        "A B",
        "a\x00",
        "ÄÖ",
        "x" * 300,
    }
)
ENV_VALUES = st.one_of(
    texts,
    st.sampled_from(["0", "1", "0,1", "GPU-abc", "/models/cache", "/", "5m", "expandable_segments:True", "a" * 1025]),
)


@st.composite
def env_dicts(draw: Any, *, any_values: bool = True) -> dict[Any, Any]:
    names = draw(st.lists(st.one_of(st.sampled_from(ENV_NAMES), st.text(max_size=10)), max_size=5, unique=True))
    values = st.one_of(ENV_VALUES, scalars) if any_values else ENV_VALUES
    return {name: draw(values) for name in names}


versions = st.one_of(
    st.sampled_from(["", "0.17.0", "0.25.0", "0.26.0", "0.33.0", "b6500", "0.12.3", "0.5.0", "latest", "1.0.0rc1"]),
    texts,
)
models = st.one_of(st.sampled_from(["Qwen/Qwen3-8B", "/models/m.gguf", "qwen3:8b", "/etc/passwd", "evil/repo"]), texts)


@contextmanager
def bounded(what: Any) -> Any:
    start = time.monotonic()
    yield
    elapsed = time.monotonic() - start
    assert elapsed < SLOW, f"{elapsed:.1f}s on {str(what)[:200]!r}"


def _storable(value: Any) -> None:
    """What the panel stores must be JSON PostgreSQL's jsonb takes: no NaN, no NUL, UTF-8 text."""
    text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")  # a lone surrogate fails here (and in PostgreSQL)
    assert "\x00" not in text


# --- pure: engine adapters, the form's knob parsing, the environment policy ----------------------


@settings(PURE, max_examples=800)
@given(st.sampled_from(ENGINES), st.data())
def test_adapters_raise_only_engine_config_error(engine, data):
    config = EngineConfig(
        engine=engine,
        engine_version=data.draw(versions),
        model=data.draw(models),
        served_name=data.draw(st.one_of(st.just(""), texts)),
        port=data.draw(st.one_of(st.just(8000), st.integers(-5, 70_000))),
        knobs=data.draw(knob_dicts(engine)),
        env=data.draw(env_dicts()),
    )
    adapter = get_adapter(engine)
    with bounded(config):
        try:
            adapter.validate(config)
            adapter.concerns(config)
            spec = adapter.launch_spec(config)
            adapter.start_script(config)
            adapter.systemd_unit(config)
        except EngineConfigError:
            return
    for arg in spec.argv:  # an accepted config: argv elements, never a shell string
        assert isinstance(arg, str) and "\x00" not in arg and "\n" not in arg


@settings(PURE, max_examples=600)
@given(st.sampled_from(ENGINES), st.data())
def test_form_knob_text_raises_only_value_errors(engine, data):
    """What the revision form does with `NAME=VALUE` text: the form catches ValueError (and
    its EngineConfigError subclass) and shows it beside the field."""
    adapter = get_adapter(engine)
    spec = adapter.knobs[data.draw(st.sampled_from(sorted(adapter.knobs)))]
    text = data.draw(st.one_of(texts, knob_value(spec).map(lambda v: v if isinstance(v, str) else json.dumps(v))))
    with bounded(text):
        try:
            adapter.knob_value(spec.name, text)
        except ValueError:
            return


@settings(PURE, max_examples=600)
@given(st.sampled_from(ENGINES), env_dicts(), versions)
def test_env_policy_raises_only_engine_config_error(engine, env, version):
    try:
        decisions = classify_env(env, engine=engine, engine_version=version)
    except EngineConfigError:
        return
    for decision in decisions:
        assert decision.tier in ("allowed", "admin")
        # The variables the issue names are never let through, whoever asks.
        assert not decision.name.startswith(("LD_", "LLAMA_ARG_", "PYTHON")), decision
        assert decision.name not in ("PATH", "VLLM_PLUGINS", "NCCL_NET_PLUGIN"), decision


@settings(PURE, max_examples=800)
@given(st.one_of(json_values, non_json, st.lists(non_json, max_size=2), st.builds(huge_int)))
def test_json_check_accepts_only_storable_values(value):
    try:
        checked = check_json_value(value, field="knobs")
    except UnsafeValueError:
        return
    _storable(checked)


# --- pure: config.json ------------------------------------------------------------------------

HF_KEYS = [
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "max_position_embeddings", "vocab_size", "intermediate_size", "moe_intermediate_size", "num_experts",
    "num_local_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
    "shared_expert_intermediate_size",
    "layer_types", "full_attention_interval", "sliding_window", "sliding_window_pattern", "use_sliding_window",
    "max_window_layers", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
    "linear_value_head_dim", "linear_conv_kernel_dim", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
    "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers", "mtp_num_hidden_layers", "model_type",
    "architectures", "torch_dtype", "dtype", "tie_word_embeddings", "rope_theta", "rope_scaling", "quantization_config",
    "vision_config", "text_config", "auto_map", "trust_remote_code",
]  # fmt: skip
PLAUSIBLE = {
    "num_hidden_layers": st.integers(-1, 2_000_000),
    "hidden_size": st.integers(-1, 100_000),
    "num_attention_heads": st.integers(-1, 300),
    "num_key_value_heads": st.integers(-1, 300),
    "head_dim": st.integers(-1, 1_000),
    "max_position_embeddings": st.one_of(st.integers(-1, 2**40), st.sampled_from([10**23, 1e23])),
    "layer_types": st.lists(
        st.sampled_from(["full_attention", "sliding_attention", "linear_attention", "mamba", "bogus", 1, None]),
        max_size=100,
    ),
    "quantization_config": st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "quant_method": st.one_of(texts, st.sampled_from(["awq", "fp8", "compressed-tensors", "gptq"])),
                "bits": st.one_of(ints, floats, texts),
                "group_size": st.one_of(ints, floats, texts),
                "config_groups": json_values,
                "format": texts,
            },
        ),
        json_values,
    ),
    "model_type": st.one_of(st.sampled_from(["qwen3", "qwen3_next", "gemma3_text", "llama", "deepseek_v3"]), texts),
    "architectures": st.one_of(st.lists(st.one_of(texts, ints), max_size=3), json_values),
}


def hf_value(key: str) -> st.SearchStrategy[Any]:
    return st.one_of(PLAUSIBLE.get(key, st.integers(-1, 5000)), json_values)


@st.composite
def hf_configs(draw: Any, depth: int = 0) -> dict[str, Any]:
    config = {
        "num_hidden_layers": draw(st.integers(1, 64)),
        "hidden_size": draw(st.sampled_from([256, 640, 4096])),
        "num_attention_heads": draw(st.sampled_from([4, 8, 32])),
        "num_key_value_heads": draw(st.sampled_from([1, 2, 8])),
    }
    for key in draw(st.lists(st.sampled_from(HF_KEYS), max_size=6, unique=True)):
        if key == "text_config" and depth == 0:
            config[key] = draw(st.one_of(hf_configs(depth=1), json_values))
        else:
            config[key] = draw(hf_value(key))
    for key in draw(st.lists(st.sampled_from(sorted(config)), max_size=2, unique=True)):
        if draw(st.booleans()):
            del config[key]
    return config


def _dumps(config: Any) -> str:
    try:
        return json.dumps(config)  # NaN/Infinity written as JSON's extension, which json.loads reads
    except (TypeError, ValueError):
        return json.dumps(config, default=str)


@settings(PURE, max_examples=800)
@given(hf_configs())
def test_hf_config_importer_raises_only_its_error(config):
    text = _dumps(config)
    with bounded(text):
        try:
            imported = arch_from_hf_config(text)
        except HfConfigError:
            return
    _storable(imported.arch.to_dict())
    _storable(imported.quant.to_dict())


@settings(PURE, max_examples=400)
@given(
    st.one_of(
        st.text(max_size=200),
        st.text(alphabet=st.sampled_from(list('{}[]":,0123456789eE.-+ntrufalsNIy\\u\x00')), max_size=200),
        st.builds(lambda k, v: '{"' + k + '": ' + v + "}", st.sampled_from(HF_KEYS), st.sampled_from(
            ["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000, '"\\u0000"', "[" * 2000 + "]" * 2000]
            + (['"\\ud800"', '{"quant_method": "\\udfff"}'])
        )),
    )
)  # fmt: skip
def test_hf_config_raw_text(text):
    with bounded(text):
        try:
            imported = arch_from_hf_config(text)
        except HfConfigError:
            return
    _storable(imported.arch.to_dict())


# --- pure: GGUF headers -------------------------------------------------------------------------

_GGUF_DIR = Path(tempfile.mkdtemp(prefix="fuzz-gguf-"))


@settings(PURE, max_examples=400)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.builds(lambda rest: b"GGUF" + rest, st.binary(max_size=300)),
        st.builds(
            lambda version, tensors, kvs, rest: b"GGUF" + struct.pack("<IQQ", version, tensors, kvs) + rest,
            st.sampled_from([1, 2, 3, 4, 2**32 - 1]),
            st.one_of(st.integers(0, 3), st.integers(0, 2**64 - 1)),
            st.one_of(st.integers(0, 8), st.integers(0, 2**64 - 1)),
            st.binary(max_size=300),
        ),
    )
)
def test_gguf_random_bytes(blob):
    path = _GGUF_DIR / "random.gguf"
    path.write_bytes(blob)
    with bounded(blob[:40]):
        try:
            read_gguf_header(path)
        except GgufHeaderError:
            return


GGUF_SUFFIXES = [
    "block_count", "embedding_length", "context_length", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "attention.sliding_window",
    "attention.sliding_window_pattern", "expert_count", "expert_used_count", "full_attention_interval",
    "ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.inner_size", "vocab_size", "rope.freq_base",
]  # fmt: skip
GGUF_GENERAL = ["general.name", "general.architecture", "general.file_type", "general.basename", "general.size_label"]
T = gguf.GGUFValueType
gguf_values = st.one_of(
    st.tuples(st.just(T.UINT32), st.integers(0, 2**32 - 1)),
    st.tuples(st.just(T.INT32), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(T.UINT64), st.integers(0, 2**64 - 1)),
    st.tuples(st.just(T.INT64), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(T.UINT8), st.integers(0, 255)),
    st.tuples(st.just(T.FLOAT32), st.floats(width=32, allow_nan=True, allow_infinity=True)),
    st.tuples(st.just(T.FLOAT64), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just(T.BOOL), st.booleans()),
    st.tuples(st.just(T.STRING), st.one_of(st.text(max_size=30), st.sampled_from(["", "\x00", "x" * 2000, "a b"]))),
    st.tuples(st.just(T.ARRAY), st.lists(st.integers(0, 2**31 - 1), max_size=50)),
    st.tuples(st.just(T.ARRAY), st.lists(st.booleans(), max_size=50)),
    st.tuples(st.just(T.ARRAY), st.lists(st.text(max_size=5), max_size=5)),
    st.tuples(st.just(T.ARRAY), st.lists(st.floats(width=32), max_size=5)),
)


@st.composite
def gguf_headers(draw: Any) -> tuple[str, dict[str, tuple[Any, Any]]]:
    arch = draw(st.sampled_from(["llama", "gemma3", "qwen3next", "qwen35moe", "qwen3"]))
    if draw(st.integers(0, 9)) == 0:
        arch = draw(st.text(max_size=8))
    values: dict[str, tuple[Any, Any]] = {}
    base = {"block_count": 4, "embedding_length": 256, "attention.head_count": 4, "attention.head_count_kv": 2}
    dropped = draw(st.sets(st.sampled_from(sorted(base)), max_size=1))
    for suffix, number in base.items():
        if suffix not in dropped:
            values[f"{arch}.{suffix}"] = (T.UINT32, number)
    for suffix in draw(st.lists(st.sampled_from(GGUF_SUFFIXES), max_size=4, unique=True)):
        values[f"{arch}.{suffix}"] = draw(gguf_values)
    for key in draw(st.lists(st.sampled_from(GGUF_GENERAL), max_size=2, unique=True)):
        values[key] = draw(gguf_values)
    return arch, values


def write_gguf(path: Path, arch: str, values: dict[str, tuple[Any, Any]]) -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    for key, (kind, value) in values.items():
        if key == "general.architecture":
            continue  # the writer sets it from `arch`
        sub = None
        if kind == T.ARRAY and value:
            sub = {bool: T.BOOL, int: T.INT32, float: T.FLOAT32, str: T.STRING}[type(value[0])]
        writer.add_key_value(key, value, kind, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@settings(PURE, max_examples=300)
@given(gguf_headers())
def test_gguf_written_headers(header):
    arch, values = header
    path = _GGUF_DIR / "written.gguf"
    try:
        write_gguf(path, arch, values)
    except (ValueError, TypeError, struct.error, OverflowError, UnicodeEncodeError):
        return  # gguf-py itself refuses to write it
    with bounded(values):
        try:
            imported = read_gguf_header(path)
        except GgufHeaderError:
            return
    _storable(imported.arch.to_dict())
    _storable(imported.kv.to_dict())


# --- pure: Ansible group_vars -------------------------------------------------------------------

ANSIBLE_VARS = [
    "inference_engine", "vllm_model", "vllm_host", "vllm_port", "vllm_quantization", "vllm_attention_backend",
    "vllm_enforce_eager", "vllm_enable_tool_calling", "vllm_tool_call_parser", "vllm_reasoning_parser",
    "vllm_max_model_len", "vllm_gpu_memory_utilization", "vllm_max_num_seqs", "vllm_speculative_config",
    "vllm_tensor_parallel_size", "vllm_pipeline_parallel_size", "vllm_kv_cache_dtype", "vllm_api_key",
    "vllm_hf_token", "vllm_min_version", "vllm_served_model_name", "vllm_extra_args", "vllm_env",
    "vllm_hf_cache_dir", "vllm_user", "ollama_version", "ollama_host", "ollama_port", "ollama_models",
    "ollama_num_ctx", "open_webui_port", "unknown_var",
]  # fmt: skip
YAML_SCALARS = [
    "{{ lookup('pipe', 'id') }}", "'{{ ansible_user }}'", "!unsafe '{{ x }}'", "!!python/object/apply:os.system ['id']",
    "!!binary aGVsbG8=", "!custom x", ".nan", ".inf", "-.inf", "1e999", "9" * 5000, "0x7fffffffffffffffff",
    '"\\0"', '"\\x00"', "2024-01-01", "yes", "no", "~", "null", "[]", "{}", "'a\\x00'",
    "&a [1, 2]", "*a", "*undefined", "<<: *a", "|\n  block\n  text", ">-\n  folded", '"\\u202e"', "- -1",
    *(['"\\ud800"']),
]  # fmt: skip


def _yaml_value(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6).strip().removesuffix("...")


@st.composite
def group_vars_texts(draw: Any) -> str:
    lines = []
    names = draw(st.lists(st.sampled_from(ANSIBLE_VARS), max_size=8, unique=True))
    names += draw(st.lists(st.text(max_size=8), max_size=1))
    if not draw(st.sets(st.just("no model"), max_size=1)):
        lines.append("vllm_model: " + draw(st.sampled_from(["Qwen/Qwen3-8B", "m", "'{{ m }}'", '"\\u202e"'])))
    for name in names:
        kind = draw(st.sampled_from(["plausible", "scalar", "json", "plausible"]))
        if kind == "scalar":
            value = draw(st.sampled_from(YAML_SCALARS))
        elif kind == "plausible":
            value = draw(
                st.sampled_from(["true", "false", "4096", "0.9", "auto", "fp8", "qwen3", "2", "'0.17.0'", "8001"])
            )
        else:
            try:
                value = _yaml_value(draw(json_values))
            except (yaml.YAMLError, ValueError, OverflowError):
                value = "x"
        lines.append(f"{json.dumps(name)}: {value}")
    if draw(st.sets(st.just("bomb"), max_size=1)):  # a small alias bomb
        width = draw(st.integers(2, 12))
        lines.append("b0: &b0 [" + ", ".join(["x"] * width) + "]")
        for level in range(1, draw(st.integers(2, 9))):
            lines.append(f"b{level}: &b{level} [" + ", ".join([f"*b{level - 1}"] * width) + "]")
    lines = draw(st.permutations(lines))
    return "\n".join(lines) + "\n"


@settings(PURE, max_examples=500)
@given(st.one_of(group_vars_texts(), st.text(max_size=200)))
def test_group_vars_parser_raises_only_its_error(text):
    with bounded(text):
        try:
            imported = parse_group_vars(text)
        except AnsibleVarsError:
            return
    for part in (imported.knobs, imported.env, imported.unknown, imported.ignored_known, imported.templated):
        check_json_value(part, field="parsed", max_items=20_000)  # raises UnsafeValueError: a bug


# --- services against PostgreSQL ------------------------------------------------------------------


def _counts() -> tuple[int, int, int]:
    return DeploymentRevision.objects.count(), ModelVariant.objects.count(), AuditEvent.objects.count()


@contextmanager
def example():
    """One example in a savepoint rolled back afterwards, so examples never see each other."""
    sid = transaction.savepoint()
    try:
        yield
    finally:
        transaction.savepoint_rollback(sid)


def refused_or_accepted(call: Any) -> Any:
    """Run a service call: a refusal must be ValidationError/PermissionDenied and store nothing."""
    before = _counts()
    with bounded(call):
        try:
            result = call()
        except PermissionDenied:
            event("refused: role")
        except ValidationError as exc:
            event("refused: " + ",".join(sorted(getattr(exc, "error_dict", {"-": 0}))[:2]) + str(exc)[:80])
        else:
            event("accepted")
            return result
    assert _counts() == before, "a refused call stored rows"
    return None


ARCH = {"architecture": "qwen3", "num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_kv_heads": 2}


@pytest.fixture
def lab(catalog, viewer, operator, admin_user):
    host = HostFactory(name="fz1", model_dirs=["/models"])
    GPUFactory(host=host, index=0)
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    variants = [
        ModelVariant.objects.create(name="fz-hf", repo_id="Qwen/Qwen3-8B", format="hf", arch=ARCH),
        ModelVariant.objects.create(name="fz-gguf", gguf_file="/models/fz.gguf", format="gguf", arch=ARCH),
        ModelVariant.objects.create(name="qwen3:8b", format="ollama", arch=ARCH),
        *ModelVariant.objects.filter(is_demo=False).exclude(name__startswith="fz-").order_by("pk")[:3],
    ]
    users = [operator, admin_user, None, viewer]  # None: a system action; the last one may not write
    return {"host": host, "client": client, "users": users, "variants": variants}


def _get_ok(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)


def valid_knob_value(spec: Any) -> st.SearchStrategy[Any]:
    low = spec.minimum if spec.minimum is not None else 0
    high = min(spec.maximum if spec.maximum is not None else 10**6, 10**6)
    if spec.kind == "bool":
        return st.booleans()
    if spec.kind == "int":
        return st.integers(int(math.ceil(low)) + (1 if spec.exclusive_min else 0), max(int(high), int(low) + 1))
    if spec.kind == "float":
        return st.floats(min_value=float(low), max_value=float(high), exclude_min=spec.exclusive_min)
    if spec.kind == "choice" and spec.choices:
        return st.sampled_from(spec.choices)
    if spec.kind == "json":
        return st.sampled_from([{}, {"method": "ngram", "num_speculative_tokens": 2}, {"image": 1}])
    return st.sampled_from(["auto", "qwen3", "fp8", "1", "/models/m.gguf", "0,1", "on"])


REVISION_FIELDS = [
    "engine",
    "engine_version",
    "knobs",
    "env",
    "served_name",
    "port",
    "tag",
    "message",
    "extras",
    "actor",
]


@st.composite
def service_knobs(draw: Any, engine: str, *, hostile: bool) -> dict[str, Any]:
    """Real knobs with in-range values; with `hostile`, values aimed at breaking them and junk names."""
    specs = get_adapter(engine).knobs  # type: ignore[attr-defined]
    names = draw(st.lists(st.sampled_from(sorted(specs)), max_size=4, unique=True))
    value = knob_value if hostile else valid_knob_value
    knobs = {name: draw(value(specs[name])) for name in names}
    if hostile and draw(st.booleans()):
        knobs[draw(st.sampled_from(JUNK_KNOBS))] = draw(json_values)
    return knobs


@pytest.mark.django_db
@settings(DB, max_examples=200)
@given(data=st.data())
def test_revision_service(lab, data):
    bad = data.draw(st.sets(st.sampled_from(REVISION_FIELDS), max_size=2))

    def pick(name: str, valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> Any:
        return data.draw(hostile if name in bad else valid)

    engine = pick("engine", st.sampled_from(ENGINES), st.sampled_from(["", "vLLM", "bash", "\x00", "llama.cpp "]))
    adapter_engine = engine if engine in ADAPTERS else "vllm"
    knobs = data.draw(service_knobs(adapter_engine, hostile="knobs" in bad))
    kwargs = {
        "host": lab["host"],
        "engine": engine,
        "engine_version": pick("engine_version", st.just(""), versions),
        "model_variant": lab["variants"][{"llama.cpp": 1, "ollama": 2}.get(engine, 0)],
        "knobs": knobs,
        "env": pick("env", st.sampled_from([{}, {"CUDA_VISIBLE_DEVICES": "0"}, {"OMP_NUM_THREADS": "4"}]), env_dicts()),
        "served_name": pick("served_name", st.sampled_from(["", "qwen"]), texts),
        "port": pick(
            "port", st.sampled_from([None, 8000, 8123]), st.sampled_from([-1, 0, 65536, 2**70, "²", "1e309", 1.5, True])
        ),
        "tag": pick("tag", st.sampled_from(["", "v1"]), texts),
        "message": pick("message", st.just("fuzz"), texts),
        "extras": pick("extras", st.none(), st.dictionaries(keys, json_values, max_size=3)),
        "actor": pick("actor", st.sampled_from(lab["users"][:-1]), st.just(lab["users"][-1])),
    }
    with example():
        revision = refused_or_accepted(lambda: make_revision(**kwargs))
        if revision is None:
            return
        revision.refresh_from_db()
        for value in (revision.knobs, revision.env, revision.extras):
            _storable(value)
        host = lab["host"].name
        _get_ok(lab["client"], reverse("deployments:revision_detail", args=[host, revision.number]))
        _get_ok(lab["client"], reverse("deployments:revision_list", args=[host]))
        _get_ok(lab["client"], reverse("deployments:revision_switch", args=[host, revision.number]))


@pytest.mark.django_db
@settings(DB, max_examples=120)
@given(config=st.one_of(hf_configs(), hf_configs().map(lambda c: {"text_config": c})), data=st.data())
def test_hf_import_service(lab, config, data):
    bad = data.draw(
        st.sets(st.sampled_from(["name", "repo_id", "family", "quantization", "weights", "actor"]), max_size=2)
    )

    def pick(name: str, valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> Any:
        return data.draw(hostile if name in bad else valid)

    kwargs = {
        "text": _dumps(config),
        "name": pick("name", st.just("fuzz-model"), st.one_of(texts, st.just("fz-hf"))),
        "repo_id": pick("repo_id", st.sampled_from(["", "org/model"]), texts),
        "family": pick("family", st.just(""), texts),
        "quantization": pick("quantization", st.just(""), texts),
        "weights_bytes": pick("weights", st.sampled_from([None, 2**30]), st.sampled_from([0, -1, 2**60, True, 1.5])),
        "actor": pick("actor", st.sampled_from(lab["users"][:-1]), st.just(lab["users"][-1])),
    }
    with example():
        variant = refused_or_accepted(lambda: model_variant_import_hf_config(**kwargs))
        if variant is None:
            return
        variant.refresh_from_db()
        _storable(variant.arch)
        _get_ok(lab["client"], reverse("deployments:model_list"))
        _get_ok(lab["client"], reverse("hardware:host_detail", args=[lab["host"].name]))


@pytest.mark.django_db
@settings(DB, max_examples=80)
@given(header=gguf_headers(), data=st.data())
def test_gguf_import_service(lab, header, data, tmp_path):
    arch, values = header
    path = tmp_path / "fuzz.gguf"
    try:
        write_gguf(path, arch, values)
    except (ValueError, TypeError, struct.error, OverflowError, UnicodeEncodeError):
        return
    bad = data.draw(st.sets(st.sampled_from(["path", "name", "family", "actor"]), max_size=1))

    def pick(name: str, valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> Any:
        return data.draw(hostile if name in bad else valid)

    kwargs = {
        "path": pick("path", st.just(str(path)), st.sampled_from(["", "rel.gguf", "/etc/passwd", "/x\x00.gguf"])),
        "name": pick("name", st.sampled_from(["", "fuzz-gguf"]), texts),
        "family": pick("family", st.just(""), texts),
        "actor": pick("actor", st.sampled_from(lab["users"][:-1]), st.just(lab["users"][-1])),
    }
    with example():
        variant = refused_or_accepted(lambda: model_variant_import_gguf(**kwargs))
        if variant is None:
            return
        variant.refresh_from_db()
        _storable(variant.arch)
        _storable(variant.gguf_kv)
        _get_ok(lab["client"], reverse("deployments:model_list"))
        _get_ok(lab["client"], reverse("hardware:host_detail", args=[lab["host"].name]))


@pytest.mark.django_db
@settings(DB, max_examples=150)
@given(text=group_vars_texts(), data=st.data())
def test_ansible_import_service(lab, text, data):
    bad = data.draw(st.sets(st.sampled_from(["message", "tag", "engine_version", "actor"]), max_size=1))

    def pick(name: str, valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> Any:
        return data.draw(hostile if name in bad else valid)

    kwargs = {
        "host": lab["host"],
        "text": text,
        "message": pick("message", st.just("from Ansible"), texts),
        "tag": pick("tag", st.just(""), texts),
        "engine_version": pick("engine_version", st.none(), versions),
        "actor": pick("actor", st.sampled_from(lab["users"][:-1]), st.just(lab["users"][-1])),
    }
    with example():
        result = refused_or_accepted(lambda: revision_import_ansible(**kwargs))
        if result is None:
            return
        revision = result.revision
        revision.refresh_from_db()
        for value in (revision.knobs, revision.env, revision.extras):
            _storable(value)
        host = lab["host"].name
        _get_ok(lab["client"], reverse("deployments:revision_detail", args=[host, revision.number]))
        _get_ok(lab["client"], reverse("deployments:revision_exports", args=[host, revision.number]))


# --- the agent API: what a GPU host sends ------------------------------------------------------

AGENT_TIMES = st.one_of(st.floats(9e8, 2e9), st.sampled_from([1e18, -1e18, 1e12, 0, -1, 946684799, 2**63]), scalars)
AGENT_ISO = st.one_of(
    st.sampled_from(
        ["2026-01-01T00:00:00Z", "9999-12-31T23:59:59", "2026-13-01T00:00:00", "0001-01-01T00:00:00+00:00"]
    ),
    scalars,
)
AGENT_COUNTS = st.one_of(st.integers(-2, 300), scalars)
# The llama.cpp builds in a host's pip cache, as its probe and its heartbeats report them.
AGENT_CACHED_BUILDS = st.one_of(
    st.fixed_dictionaries({"llama.cpp": st.one_of(st.lists(st.one_of(st.just("b11434"), texts, scalars)))}),
    scalars,
)
AGENT_FACTS = st.fixed_dictionaries(
    {},
    optional={
        **{k: st.one_of(texts, scalars) for k in ("address", "hostname", "os_name", "kernel", "cpu_model")},
        **{k: AGENT_COUNTS for k in ("cpu_logical_cores", "cpu_physical_cores", "cpu_usable_cores")},
        "memory_total_bytes": st.one_of(st.sampled_from([2**36, -1, 2**70]), scalars),
        "model_dirs": st.one_of(st.lists(st.one_of(st.just("/models"), texts), max_size=3), scalars),
        "cached_builds": AGENT_CACHED_BUILDS,
    },
)
AGENT_GPU = st.fixed_dictionaries(
    {
        "index": st.one_of(st.integers(-1, 3), scalars),
        "name": st.one_of(st.just("NVIDIA H100"), texts, scalars),
        "memory_total_bytes": st.one_of(st.just(80 * 2**30), scalars),
    },
    optional={
        "uuid": st.one_of(texts, scalars),
        "compute_capability": st.one_of(st.just([9, 0]), json_values),
        "pcie": st.one_of(st.just({"current_generation": 5, "current_width": 16}), json_values),
        "power_limit_w": scalars,
        "nvlink_active_links": AGENT_COUNTS,
    },
)
AGENT_PAIR = st.fixed_dictionaries(
    {"a": st.one_of(st.integers(-1, 3), scalars), "b": st.one_of(st.integers(-1, 3), scalars)},
    optional={"p2p": st.one_of(st.just({"read": "ok", "write": "ok"}), json_values), "topology": scalars},
)
AGENT_INVENTORY = st.fixed_dictionaries(
    {},
    optional={
        "gpus": st.one_of(st.lists(AGENT_GPU, max_size=3), json_values),
        "pairs": st.one_of(st.lists(AGENT_PAIR, max_size=3), json_values),
        **{k: scalars for k in ("available", "reason", "driver_version", "cuda_driver_version")},
    },
)
AGENT_METRICS = st.one_of(
    st.dictionaries(st.one_of(st.sampled_from(["requests_running", "kv_cache_usage", "prompt_tokens_total"]), keys),
                    scalars, max_size=5),
    json_values,
)  # fmt: skip
AGENT_GPU_SAMPLE = st.fixed_dictionaries(
    {"index": st.one_of(st.integers(-1, 2), scalars)},
    optional={
        "timestamp": AGENT_TIMES,
        **{k: scalars for k in ("utilization_gpu_percent", "memory_used_bytes", "power_w", "temperature_c")},
        **{k: scalars for k in ("sm_clock_mhz", "memory_clock_mhz", "energy_mj", "fan_percent")},
        "processes": json_values,
    },
)
AGENT_ENGINE_SAMPLE = st.fixed_dictionaries(
    {}, optional={"ts": AGENT_TIMES, "requests_running": scalars, "kv_cache_usage": scalars, "x": json_values}
)
AGENT_HOST_SAMPLE = st.fixed_dictionaries(
    {},
    optional={
        "timestamp": AGENT_TIMES,
        **{k: scalars for k in ("cpu_percent", "load_1", "load_15", "memory_total_bytes", "memory_available_bytes")},
        **{k: scalars for k in ("swap_total_bytes", "swap_used_bytes")},
    },
)
AGENT_RUN = st.fixed_dictionaries(
    {"key": st.one_of(st.just("run-1"), texts, scalars)},
    optional={
        "engine": st.one_of(st.just("llama.cpp"), scalars),
        "revision_id": scalars,
        "revision_label": scalars,
        "started_at": AGENT_ISO,
    },
)
AGENT_BENCHMARK = st.fixed_dictionaries(
    {"levels": st.one_of(st.lists(st.fixed_dictionaries({"label": scalars}, optional={"requests": json_values})),
                         json_values)},
    optional={"status": scalars, "energy_j": scalars},
)  # fmt: skip
AGENT_BODIES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "register": {"facts": AGENT_FACTS, "inventory": AGENT_INVENTORY, "engine_state": json_values},
    "probe": {"facts": AGENT_FACTS, "inventory": AGENT_INVENTORY},
    "heartbeat": {"engine_state": json_values, "engine_metrics": AGENT_METRICS, "cached_builds": AGENT_CACHED_BUILDS},
    "telemetry": {
        "gpu_samples": st.one_of(st.lists(AGENT_GPU_SAMPLE, max_size=3), json_values),
        "engine_samples": st.one_of(st.lists(AGENT_ENGINE_SAMPLE, max_size=3), json_values),
        "host_samples": st.one_of(st.lists(AGENT_HOST_SAMPLE, max_size=3), json_values),
    },
    "events": {"kind": st.one_of(st.sampled_from(["restarted", "gave_up"]), scalars), "message": scalars},
    "engine-log": {
        "run": st.one_of(AGENT_RUN, json_values),
        "offset": st.one_of(st.integers(-1, 100), scalars),
        "end": st.one_of(st.integers(-1, 100), scalars),
        "lines": st.one_of(st.lists(texts, max_size=3), json_values),
    },
    "serving/report": {
        "version": scalars,
        "bind": scalars,
        "state": st.one_of(st.lists(st.dictionaries(keys, json_values, max_size=4), max_size=2), json_values),
        "usage": st.one_of(st.lists(st.dictionaries(keys, json_values, max_size=4), max_size=2), json_values),
    },
    "begin": {"worker": scalars},
    "progress": {"stage": scalars, "progress": st.one_of(st.floats(0, 1), scalars), "log": scalars},
    "finish": {
        "state": st.one_of(st.sampled_from(["succeeded", "failed", "cancelled"]), scalars),
        "result": st.one_of(st.dictionaries(keys, json_values, max_size=4), json_values),
        "error": scalars,
        "benchmark": st.one_of(AGENT_BENCHMARK, json_values),
        "install": st.one_of(
            st.fixed_dictionaries(
                {"engine": st.just("vllm"), "path": texts},
                optional={
                    "details": st.one_of(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "packages": st.one_of(st.dictionaries(keys, st.one_of(texts, scalars)), json_values),
                                "distribution": scalars,
                                "adopted": scalars,
                            },
                        ),
                        json_values,
                    )
                },
            ),
            json_values,
        ),
    },
}
AGENT_NOW = time.time()
AGENT_VALID: dict[str, dict[str, Any]] = {  # what a well-behaved agent sends; examples change one or two fields
    "register": {
        "facts": {"address": "box.lan", "cpu_logical_cores": 8, "memory_total_bytes": 2**36},
        "inventory": {"available": True, "gpus": [{"index": 0, "name": "NVIDIA H100", "memory_total_bytes": 2**36}]},
        "engine_state": {"running": False},
    },
    "probe": {"facts": {"cpu_model": "EPYC"}, "inventory": {"available": False, "reason": "no driver", "gpus": []}},
    "heartbeat": {"engine_state": {"running": True}, "engine_metrics": {"requests_running": 1, "kv_cache_usage": 0.5}},
    "telemetry": {
        "gpu_samples": [{"index": 0, "timestamp": AGENT_NOW, "power_w": 100.0, "utilization_gpu_percent": 50}],
        "engine_samples": [{"ts": AGENT_NOW, "requests_running": 2}],
        "host_samples": [{"timestamp": AGENT_NOW, "cpu_percent": 12.5, "memory_total_bytes": 2**34, "load_1": 0.5}],
    },
    "events": {"kind": "restarted", "message": "the engine restarted"},
    "engine-log": {
        "run": {"key": "run-1", "engine": "llama.cpp", "started_at": "2026-01-01T00:00:00Z"},
        "offset": 0,
        "end": 2,
        "lines": ["a"],
    },
    "serving/report": {
        "version": "v1",
        "bind": "127.0.0.1:4000",
        "state": [{"name": "m-r1", "mode": "pinned", "phase": "loaded", "in_flight": 1, "waiting": 0}],
        "usage": [{"day": "2026-01-01", "key": "", "model": "m-r1", "requests": 1, "prompt_tokens": 2}],
    },
    "begin": {"worker": "agent@box"},
    "progress": {"stage": "loading", "progress": 0.5, "log": "loading"},
    "finish": {"state": "succeeded", "result": {"ok": True}, "error": ""},
}
DEEP = ['{"facts": ' + "[" * 50_000 + "]" * 50_000 + "}", '{"result": {"a": NaN}}', '{"x": 1e999}', "[]", "{", ""]


@st.composite
def agent_bodies(draw: Any, endpoint: str) -> str:
    """A body for one endpoint: its real fields with hostile values, sometimes junk or raw text."""
    kind = draw(st.sampled_from(["changed", "changed", "changed", "fields", "fields", "junk", "raw"]))
    if kind == "raw":
        return draw(st.sampled_from(DEEP))
    if kind == "junk":
        return json.dumps(draw(st.dictionaries(keys, json_values, max_size=3)))
    fields = AGENT_BODIES[endpoint]
    if kind == "changed":
        body = dict(AGENT_VALID[endpoint])
        for name in draw(st.sets(st.sampled_from(sorted(fields)), max_size=2)):
            body[name] = draw(fields[name])
    else:
        body = draw(st.fixed_dictionaries({}, optional=fields))
    return json.dumps(body)


@pytest.fixture
def agent_lab(catalog, operator):
    from deployments.models import UsageDay
    from hardware.credentials import host_token_issue

    host, token = host_token_issue(name="fz-agent", actor=None)
    GPUFactory(host=host, index=0)
    # The valid report's model is one this host booked before (a model that left its set), so the
    # fuzz keeps reaching an accepted report as well as the refusals.
    UsageDay.objects.create(host=host, day=date(2025, 12, 31), key="", model="m-r1", requests=1)
    viewer = Client()
    viewer.force_login(operator)
    return {"host": host, "token": token, "client": Client(), "viewer": viewer}


def _agent_rows(host: Any) -> tuple[Any, ...]:
    from deployments.models import EngineLogRun, FrontDoor, Operation, UsageDay
    from hardware.models import EngineSample, GpuSample, HostSample

    host.refresh_from_db()
    ops = tuple(Operation.objects.filter(host=host).values_list("state", "result", "log", "stage", "worker"))
    return (
        host.engine_state, host.engine_metrics, host.cpu_cores, host.last_probe_at, tuple(host.gpus.values_list()),
        GpuSample.objects.count(), EngineSample.objects.count(), HostSample.objects.count(),
        EngineLogRun.objects.count(), AuditEvent.objects.count(), ops,
        FrontDoor.objects.count(), UsageDay.objects.count(),
    )  # fmt: skip


@pytest.mark.django_db
@settings(DB, max_examples=400)
@given(endpoint=st.sampled_from(sorted(AGENT_BODIES)), data=st.data())
def test_agent_api_bodies_never_get_a_500(agent_lab, endpoint, data):
    """Every POST endpoint of the agent API (the GET ones take no body) answers 200 or 400, and a
    400 stores nothing. A 500 raises here with its traceback (the test client re-raises it)."""
    from deployments.models import Operation

    raw = data.draw(agent_bodies(endpoint))
    host = agent_lab["host"]
    with example():
        path = endpoint
        if endpoint in ("begin", "progress", "finish"):
            state = OperationState.QUEUED if endpoint == "begin" else OperationState.RUNNING
            op = Operation.objects.create(kind="probe", host=host, state=state, exclusive=False)
            path = f"operations/{op.pk}/{endpoint}"
        before = _agent_rows(host)
        with bounded(raw):
            response = agent_lab["client"].post(
                f"/agent/v1/{path}",
                data=raw,
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {agent_lab['token']}",
            )
        event(f"{endpoint}: {response.status_code}")
        assert response.status_code in (200, 204, 400), (endpoint, response.status_code, response.content[:300])
        if response.status_code == 400:
            assert response.json()["error"]
            assert _agent_rows(host) == before, "a refused report stored something"
        elif endpoint in ("register", "probe", "heartbeat", "telemetry"):
            _get_ok(agent_lab["viewer"], reverse("hardware:host_detail", args=[host.name]))


# --- once-known bugs, kept as reproducers ---------------------------------------------------------

SURROGATE_BUG = (
    "issue 11: a lone surrogate (from a JSON or YAML \\ud800 escape, or a CLI argument that is not "
    "UTF-8) passes the text checks and PostgreSQL refuses it: UnicodeEncodeError / DataError, a 500"
)


def test_json_check_refuses_lone_surrogates():
    with pytest.raises(UnsafeValueError):
        check_json_value({"a": "\ud800"}, field="extras")


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["message", "tag", "served_name", "knob", "extras"])
def test_revision_service_refuses_lone_surrogates(lab, field):
    values: dict[str, Any] = {"message": "m"}
    if field == "knob":
        values["knobs"] = {"alias": "\ud800"}
    elif field == "extras":
        values["extras"] = {"a": "\ud800"}
    else:
        values[field] = "\ud800"
    kwargs = {"host": lab["host"], "engine": "llama.cpp", "model_variant": lab["variants"][1], "actor": lab["users"][1]}
    before = _counts()
    with example(), pytest.raises(ValidationError):
        make_revision(**kwargs, **values)
    assert _counts() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    "text",
    [
        'vllm_model: "\\ud800"\n',
        'vllm_model: Qwen/Qwen3-8B\nvllm_served_model_name: "\\ud800"\n',
        'vllm_model: Qwen/Qwen3-8B\nsomething_unknown: "\\ud800"\n',
    ],
)
def test_ansible_import_refuses_lone_surrogates(lab, text):
    with example(), pytest.raises(ValidationError):
        revision_import_ansible(host=lab["host"], text=text, message="m", actor=lab["users"][1])


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["quant_method", "name", "repo_id"])
def test_hf_import_refuses_lone_surrogates(lab, where):
    config = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2}
    kwargs = {"name": "n", "actor": lab["users"][1]}
    if where == "quant_method":
        config["quantization_config"] = {"quant_method": "\ud800", "bits": 4}
    else:
        kwargs[where] = "\ud800"
    with example(), pytest.raises(ValidationError):
        model_variant_import_hf_config(text=json.dumps(config), **kwargs)


@pytest.mark.django_db
def test_zero_tensor_split_share_keeps_the_revision_page_up(lab):
    revision = make_revision(
        host=lab["host"],
        engine="llama.cpp",
        model_variant=lab["variants"][1],
        knobs={"tensor_split": "0,1"},
        message="m",
        actor=lab["users"][0],
    )
    _get_ok(lab["client"], reverse("deployments:revision_detail", args=[lab["host"].name, revision.number]))
