"""Engine knobs -> one typed, engine-neutral `Settings`.

Which knobs an engine takes, and what each one changes in the plan, is its adapter's knob table
(`KnobSpec.plan`, serving/engines/plan_effects.py): the planner has no table of its own, so a knob
the adapter accepts is one the planner reads. Knob names are the engines' flags with `-` turned
into `_`. Each value is read through the adapter (`knob_value`: Ansible's "0.95" is 0.95, a choice
must be one of the engine's), so the planner takes exactly the values the adapter takes; anything
unknown or malformed raises PlanInputError naming the knob, in the adapter's words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serving.engines.base import EngineConfigError
from serving.engines.plan_effects import LLAMA_CACHE_TYPES
from serving.engines.registry import get_adapter
from serving.planner.inputs import ENGINES, PlanInputError


@dataclass(frozen=True)
class Settings:
    """Engine knobs resolved to what the maths needs (None = the engine's default)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1  # data-parallel replicas, each the whole model on TP x PP GPUs of its own
    max_model_len: int | None = None  # vLLM/SGLang context; None/auto = the model's native
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    mem_util: float | None = None  # vLLM gpu_memory_utilization / SGLang mem_fraction_static
    kv_dtype: str = "auto"
    dtype_bytes: int | None = None  # vLLM --dtype: the dtype the model runs in; None = auto
    kv_bytes_k: float | None = None  # None = model dtype
    kv_bytes_v: float | None = None
    kv_cache_memory_bytes: int | None = None
    quantization: str | None = None  # None = auto-detect
    spec_method: str | None = None
    spec_tokens: int = 0
    cpu_offload_bytes: int = 0
    enforce_eager: bool = False
    language_model_only: bool = False
    prefix_caching: bool | None = None
    rope_factor: float | None = None  # from hf_overrides rope_scaling / rope_parameters
    native_override: int | None = None  # hf_overrides max_position_embeddings
    reasoning_parser: str | None = None
    tool_parser: str | None = None
    attention_backend: str | None = None
    block_size: int | None = None
    mamba_conv_bytes: int | None = None
    mamba_ssm_bytes: int | None = None
    # llama.cpp / Ollama
    ctx_size: int | None = None
    parallel: int | None = None
    n_gpu_layers: int | None = None  # None = all ("auto"/"all"/default)
    flash_attn: str = "auto"
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] = ()
    mmproj: str | None = None
    kv_unified: bool | None = None
    ubatch_size: int = 512
    swa_full: bool = False

    @property
    def gpus_needed(self) -> int:
        """GPUs a tensor-parallel engine runs on: TP x PP for each data-parallel replica."""
        return self.tp * self.pp * self.dp

    @property
    def world_text(self) -> str:
        """ "TP=2 x PP=1", with " x DP=2" when there are data-parallel replicas."""
        return f"TP={self.tp} x PP={self.pp}" + (f" x DP={self.dp}" if self.dp > 1 else "")


def parse_settings(engine: str, knobs: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Validate and resolve knobs for `engine` by its adapter's knob table (each knob's `plan`);
    PlanInputError naming the knob on unknown names or bad values."""
    if engine not in ENGINES:
        raise PlanInputError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}", field="engine")
    adapter = get_adapter(engine)
    specs = adapter.knobs
    # Settings an engine reads from variables (Ollama's OLLAMA_*), as the knobs they stand for.
    merged: dict[str, Any] = {knob: env[var] for var, knob in adapter.env_knobs.items() if var in env and knob in specs}
    for raw_name, value in knobs.items():
        merged[str(raw_name).replace("-", "_").lstrip("_")] = value
    out: dict[str, Any] = {}
    for name, value in merged.items():
        spec = specs.get(name)
        if spec is None:
            raise PlanInputError(f"unknown {engine} knob {name!r}", field=name)
        if value is None:
            continue
        try:
            spec.plan(out, name, adapter.knob_value(name, value))
        except EngineConfigError as exc:
            raise PlanInputError(str(exc), field=exc.field or name) from None
    names = {k: out.pop(k) for k in ("kv_bytes_k_name", "kv_bytes_v_name") if k in out}
    if names:
        out["kv_dtype"] = f"{names.get('kv_bytes_k_name', 'f16')}/{names.get('kv_bytes_v_name', 'f16')}"
    if adapter.ggml_kv_cache:
        out.setdefault("kv_bytes_k", LLAMA_CACHE_TYPES["f16"])  # common/common.h: f16 default
        out.setdefault("kv_bytes_v", LLAMA_CACHE_TYPES["f16"])
        out.setdefault("kv_dtype", "f16/f16")
    return Settings(**out)


def knob_of(engine: str, setting: str) -> str:
    """The engine's own knob that sets the planner's `setting` (its knob table's `sets`): "tp" is
    vLLM's tensor_parallel_size and SGLang's tp_size. "" when none of its knobs does."""
    return get_adapter(engine).knob_for(setting)


def spec_is_mtp(settings: Settings) -> bool:
    method = settings.spec_method or ""
    return method == "mtp" or method.endswith("_mtp")
