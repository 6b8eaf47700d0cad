"""One knob table per engine: what an adapter accepts, the planner reads.

The planner once kept its own table per engine beside the adapters' knob specs, and they disagreed
on ten knobs: a revision with vLLM `data_parallel_size=2` was made, then every switch to it was
refused with "unknown vllm knob". Now each `KnobSpec` names its planner effect (`plan`) and the
planner walks the adapter's table; these tests hold the two to one list, value by value."""

from __future__ import annotations

from typing import Any

import pytest

from serving.engines.base import EngineConfigError
from serving.engines.knobs import KnobSpec, check_knobs
from serving.engines.plan_effects import NO_EFFECT
from serving.engines.registry import ADAPTERS
from serving.planner import PlanInputError, PlanRequest, catalog_host, plan
from serving.planner.knobs import Settings, parse_settings

# A value each engine takes for knobs whose kind alone does not say one (a path, JSON, a unit).
SAMPLES: dict[str, Any] = {
    "max_model_len": "32k",
    "context_length": 8192,
    "ctx_size": 8192,
    "speculative_config": {"method": "ngram", "num_speculative_tokens": 3},
    "hf_overrides": {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}},
    "json_model_override_args": {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}},
    "limit_mm_per_prompt": {"image": 2},
    "quantization": "awq",
    "dtype": "bfloat16",
    "chat_template": "chatml",
    "generation_config": "vllm",
    "speculative_draft_model_path": "/models/qwen3-0.6b",
    "models": "/models/ollama",
    "mmproj": "/models/mmproj.gguf",
    "chat_template_file": "/models/template.jinja",
    "keep_alive": "30m",
    "flash_attention": "on",
    "flash_attn": "auto",
    "n_gpu_layers": "all",
    "tensor_split": "3,1",
    "alias": "coder",
    "tool_call_parser": "hermes",
    "reasoning_parser": "qwen3",
    "attention_backend": "FLASHINFER",
    "chunked_prefill_size": -1,
    "tokenizer": "/models/qwen3-8b",
    "hf_config_path": "/models/qwen3-8b",
}


def _samples(spec: KnobSpec) -> list[Any]:
    """Values the adapter accepts for `spec`: every choice of a choice knob, else one value."""
    if spec.name in SAMPLES:
        return [SAMPLES[spec.name]]
    if spec.kind == "choice":
        return list(spec.choices)
    if spec.kind == "bool":
        return [True, False]
    if spec.kind == "int":
        return [int(max(spec.minimum or 1, 1))]
    if spec.kind == "float":
        return [0.5]
    raise AssertionError(f"no sample value for {spec.name} ({spec.kind}): add one to SAMPLES")


CASES = [
    pytest.param(engine, spec, value, id=f"{engine}-{name}={value}")
    for engine, adapter in ADAPTERS.items()
    for name, spec in adapter.knobs.items()
    for value in _samples(spec)  # type: ignore[arg-type]
] + [pytest.param("sglang", ADAPTERS["sglang"].knobs["quantization"], "w8a8_int8", id="sglang-quantization=w8a8_int8")]


@pytest.mark.parametrize(("engine", "spec", "value"), CASES)
def test_every_value_an_adapter_accepts_is_read_by_the_planner(engine: str, spec: KnobSpec, value: Any) -> None:
    """A revision the adapter lets an operator save never comes back from the planner as an
    unknown knob or an unreadable value (the switch, the door's memory and the preflight read it)."""
    knobs = {spec.name: value}
    assert check_knobs(ADAPTERS[engine], knobs)  # type: ignore[arg-type]
    assert isinstance(parse_settings(engine, knobs, {}), Settings)


# Values each knob is tried with, good and bad: another spelling of a value the engine takes ("FP8"
# for "fp8", "F16", "nextn", " 2 "), out of range, of the wrong kind, or a method no engine has.
PROBES: list[Any] = [
    "FP8", "fp8", "fp8_e4m3", "F16", "f16", "BF16", "Q8_0", "q8_0", "AUTO", "auto", "NEXTN", "nextn", "Row",
    "On", "on", "1", "0", "-1", " 2 ", "2", 2, 0, -1, 1.5, "0.95", 0.95, "yes", "maybe", True, False, "32k",
    "32K", "3,1", "0,0", "awq", "AWQ", "awq_turbo", "{}", {"method": "ngram"}, {"model": "/models/d"},
    {"num_speculative_tokens": 2}, {"rope_scaling": {"rope_type": "yarn", "factor": 4}}, "[1]", "-x",
]  # fmt: skip


def _verdict(read: Any) -> str:
    try:
        read()
    except (EngineConfigError, PlanInputError) as exc:
        return f"refused: {exc}"
    return "taken"


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_the_planner_takes_a_value_exactly_when_its_adapter_does_in_the_adapters_words(engine: str) -> None:
    """Values go one way: the planner reads each knob through the adapter's normalisation, so a
    value the adapter refuses (vLLM `kv_cache_dtype=FP8`: argparse is case-sensitive) is one the
    planner refuses with the same sentence, instead of passing the planner's own, looser reader
    and failing only at the switch."""
    adapter = ADAPTERS[engine]
    differ = []
    for name in adapter.knobs:
        for value in PROBES:
            said = _verdict(lambda: adapter.knob_value(name, value))  # noqa: B023 - called at once
            planned = _verdict(lambda: parse_settings(engine, {name: value}, {}))  # noqa: B023
            if said != planned:
                differ.append(f"{name}={value!r}: adapter {said}; planner {planned}")
    assert differ == []


def test_the_planner_accepts_no_knob_its_adapter_does_not() -> None:
    """Every name any engine (or the planner's old tables) knew: the planner takes it for an engine
    exactly when that engine's adapter does, and refuses the rest naming the knob."""
    names = {name for adapter in ADAPTERS.values() for name in adapter.knobs}
    names |= {"host", "port", "served_model_name", "api_key", "model", "seed", "max_logprobs", "num_ctx", "num_gpu"}
    names |= {"gpu_layers", "reasoning_format", "n_predict", "mlock", "swa_full", "verbosity", "fit", "load_mode"}
    for engine, adapter in ADAPTERS.items():
        for name in sorted(names - set(adapter.knobs)):
            with pytest.raises(PlanInputError, match=f"unknown {engine} knob '{name}'") as refused:
                parse_settings(engine, {name: 1}, {})
            assert refused.value.field == name


def test_every_knob_names_its_planner_effect() -> None:
    """No table of the planner's own: each spec says what it changes, or that it changes nothing."""
    for adapter in ADAPTERS.values():
        for name, spec in adapter.knobs.items():
            assert callable(spec.plan), name  # type: ignore[attr-defined]
    vllm, sglang, ollama = ADAPTERS["vllm"].knobs, ADAPTERS["sglang"].knobs, ADAPTERS["ollama"].knobs
    assert vllm["data_parallel_size"].plan is not NO_EFFECT and sglang["dp_size"].plan is not NO_EFFECT
    assert sglang["json_model_override_args"].plan is vllm["hf_overrides"].plan
    assert ollama["max_queue"].plan is NO_EFFECT


def test_a_bad_value_is_the_planners_input_error_naming_the_knob() -> None:
    with pytest.raises(PlanInputError, match="^data_parallel_size must be at least 1, not 0$") as refused:
        parse_settings("vllm", {"data_parallel_size": 0}, {})
    assert refused.value.field == "data_parallel_size"
    with pytest.raises(PlanInputError, match="json_model_override_args is not valid JSON") as refused:
        parse_settings("sglang", {"json_model_override_args": "{"}, {})
    assert refused.value.field == "json_model_override_args"


# --- data parallelism: each replica holds the whole model on GPUs of its own ------------------

GB = 10**9
ARCH_FACTS = {
    "num_layers": 64,
    "full_attention_layers": 64,
    "hidden_size": 5120,
    "num_attention_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 128,
    "native_context": 32768,
}


def _plan(engine: str, knobs: dict[str, Any], gpus: int) -> Any:
    from serving.arch import ModelArch

    return plan(
        PlanRequest(
            arch=ModelArch.from_dict(ARCH_FACTS),
            engine=engine,
            gpus=catalog_host("h100", gpus),
            knobs=knobs,
            weights_bytes=20 * GB,
        )
    )


@pytest.mark.parametrize(
    ("engine", "tp", "pp", "dp"),
    [
        ("vllm", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"),
        ("sglang", "tp_size", "pp_size", "dp_size"),
    ],
)
def test_data_parallel_replicas_take_gpus_of_their_own_at_the_same_bytes_per_gpu(
    engine: str, tp: str, pp: str, dp: str
) -> None:
    one = _plan(engine, {tp: 2}, 4)
    two = _plan(engine, {tp: 2, dp: 2}, 4)
    assert (one.gpus_used, two.gpus_used) == (2, 4)
    assert two.weights_bytes_per_gpu == one.weights_bytes_per_gpu  # each replica holds all of the model
    assert two.kv_pool_bytes_per_gpu == one.kv_pool_bytes_per_gpu
    assert two.kv_cache_bytes == 2 * one.kv_cache_bytes
    assert two.layout == "TP 2 × PP 1 × DP 2 on 4 of 4 GPUs"
    assert not [f for f in two.findings if f.severity == "error"]
    short = _plan(engine, {tp: 2, dp: 2}, 3)
    (error,) = [f for f in short.findings if f.severity == "error"]
    assert "TP=2 x PP=1 x DP=2 needs 4 GPUs but the engine sees 3." in error.message
    # The fix names the engine's own knobs: SGLang has no tensor_parallel_size.
    assert error.fix == f"Lower {tp}/{pp} or {dp} (the data-parallel replicas) to fit 3 GPUs."
    lone = _plan(engine, {tp: 4}, 2)
    assert [f.fix for f in lone.findings if f.severity == "error"][0] == f"Lower {tp}/{pp} to fit 2 GPUs."
