"""SGLang adapter: `python -m sglang.launch_server` argv, /metrics, KV pool log line.

Flags from sglang/srt/server_args.py (0.5.x; the dataclasses of sglang/srt/arg_groups/fields/). Boolean
flags are plain switches. `/metrics` needs `--enable-metrics`.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from serving.engines.adapter import PipAdapter
from serving.engines.base import (
    COUNT_TOKENS,
    LINEAR_ATTENTION_HYBRID,
    MESSAGES,
    NO_GGUF_PY_NAMES,
    OPENAI_CORE,
    PRIVATE_FILE,
    RESPONSES,
    EngineConfig,
    EngineConfigError,
    EngineMetrics,
    FamilySupport,
    GgufLoader,
    GpuSplit,
    KvCapacity,
    LaunchSpec,
    shown_value,
)
from serving.engines.knobs import (
    MAX_CONTEXT,
    MAX_GPUS,
    TRUST_REMOTE_CODE,
    KnobSpec,
    base_env,
    choice_refusal,
    default_served_name,
    flag_args,
    openai_launch_spec,
    overrides_config,
    reads_path_or_repo,
    whole_tokens,
)
from serving.engines.plan_effects import (
    NO_EFFECT,
    SGLANG_KV_DTYPES,
    config_overrides,
    kv_dtype,
    quantization,
    sets,
    speculative_algorithm,
)
from serving.engines.policy import Concern, path_concern
from serving.engines.prometheus import parse_samples, ratio, raw_values
from serving.engines.versions import SGLANG_CONFIG_FILE_SINCE, at_least

SGLANG_MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens: the prefill's size when chunking is off (-1)


def _cuda_graph_max_bs(gib: float, tp: int) -> int:
    """The largest batch SGLang captures a CUDA graph for when unset, by GPU memory and TP size
    (srt/server_args.py _handle_gpu_memory_settings)."""
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if tp < 4 else 80
    if gib < 60:
        return 32 if tp < 4 else 160
    if gib < 160:
        return 256 if tp < 4 else 512
    return 512


# --kv-cache-dtype and --attention-backend choices of SGLang 0.5.23 (its own parser, in the order it
# lists them); fp4_e2m1 is an older release's, refused from 0.5.23 (SGLANG_CHOICES_SEEN).
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1")
SGLANG_CHOICES_SEEN = "0.5.23"
ATTENTION_BACKENDS = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
)  # fmt: skip
_CHOICES_AT_SEEN = {"kv_cache_dtype": KV_CACHE_DTYPES[:-1], "attention_backend": ATTENTION_BACKENDS}
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


# SGLang loads a GGUF file given as --model-path, and needs no other flag (its own test,
# test/srt/test_gguf.py, starts sgl.Engine(model_path=<a downloaded .gguf>) alone):
# - srt/utils/hf_transformers/common.py check_gguf_file: an existing file named *.gguf (or starting
#   with "GGUF") is a GGUF; srt/arg_groups/model_path_hook.py handle_load_format then sets load_format
#   "gguf" and srt/arg_groups/overrides.py _gguf_quantization quantization "gguf" (0.5.9:
#   server_args.py _handle_load_format), while --load-format is auto (or gguf), whatever
#   --quantization says.
# - The tokenizer and config come from the file itself: --tokenizer-path defaults to the model path
#   (srt/arg_groups/serving_hook.py), srt/utils/hf_transformers/tokenizer.py _resolve_tokenizer_name
#   and config.py get_config hand transformers the file as `gguf_file`, unless a tokenizer_config.json
#   or config.json lies beside it (gguf_sidecar_dir; a host's download holds the GGUF alone). So no
#   --tokenizer of the original repository, which vLLM's docs advise for vLLM.
# - The weights: srt/model_loader/loader.py GGUFModelLoader._prepare_weights takes the one file it
#   is given and model_loader/weight_utils.py gguf_quant_weights_iterator reads it with one
#   GGUFReader: of a GGUF split in parts (NAME-00001-of-00003.gguf) only the first part's tensors.
#   They are yielded as llama.cpp stored them: nothing of llama.cpp's conversion is undone but the
#   packing of MoE experts (ffn_*_exps).
# - Which architectures: the config from transformers' GGUF reader (transformers/integrations/ggml.py
#   GGUF_CONFIG_MAPPING; modeling_gguf_pytorch_utils.py load_gguf_checkpoint renames gemma3 to
#   gemma3_text, qwen2moe to qwen2_moe, ...) or SGLang's own (srt/utils/hf_transformers/gguf_native.py
#   GGUF_NATIVE_CONFIG_BUILDERS), a causal-LM class for it (get_config: "Can't get gguf config"), and
#   tensor names from gguf-py's MODEL_ARCH_NAMES for the config's model_type
#   (GGUFModelLoader._get_gguf_weights_map, which renames cohere and qwen3_moe only: "Unknown gguf
#   model_type") or SGLang's own (srt/model_loader/gguf_name_maps.py GGUF_HF_NAME_MAP_BUILDERS).
# Read in 0.5.23 (with transformers 5.19.0 and gguf 0.19.0); the first releases from the wheels of
# 0.5.9 to 0.5.22 (0.5.9 pins transformers 4.57.1, which reads the same architectures as 5.19 here).
# The architectures it maps but serves wrongly or cannot load, each in the planner's words: llama.cpp's
# converter changes some tensors, which transformers' GGUF reader changes back
# (modeling_gguf_pytorch_utils.py TENSOR_PROCESSORS) and SGLang does not: llama's Q/K permutation
# (LlamaTensorProcessor; SGLang's srt/models/llama.py runs NeoX-style RoPE unless the config sets
# rope_is_neox_style, which a GGUF's does not, where hunyuan.py and exaone4.py turn it off for GGUF),
# Gemma's norm plus one (Gemma2TensorProcessor; srt/models/gemma2.py's GemmaRMSNorm adds one), GPT-2's
# transposed Conv1D weights (GPT2TensorProcessor; srt/models/gpt2.py load_weights transposes them),
# Mamba's A = -exp(A_log) (MambaTensorProcessor; srt/models/falcon_mamba.py keeps A_log as loaded).
# phi3 stores attn_qkv and ffn_up fused, and srt/layers/linear.py QKVParallelLinear.weight_loader takes
# a GGUF weight type only per q, k, v shard. The rest fail in get_config or _get_gguf_weights_map.
SGLANG_GGUF = GgufLoader(
    architectures={
        "qwen2": "",
        "qwen3": "",
        # The loader's qwen3_moe -> qwen3moe rename, the experts' unpacking (weight_utils.py ffn_*_exps)
        # and Qwen3MoeForCausalLM's GGUF branch arrived together in 0.5.11.
        "qwen3moe": "0.5.11",
        "lfm2": "",  # its short conv is stored (D, K); srt/models/lfm2.py load_weights squeezes to that
        "stablelm": "",
        "starcoder2": "",
        "muse-glimmer": "0.5.18",  # SGLang's own config and tensor-name builders (gguf_native.py, gguf_name_maps.py)
    },
    refused={
        "llama": "llama.cpp stores its Q and K weights permuted for GPT-J-style RoPE, and SGLang loads them as "
        "stored into a model that runs NeoX-style RoPE, so it answers wrongly",
        "gemma2": "llama.cpp stores its norm weights plus one, and SGLang's Gemma norm adds the one again, so it "
        "answers wrongly",
        "gpt2": "llama.cpp stores its Conv1D weights transposed, and SGLang transposes them again",
        "mamba": "llama.cpp stores A as -exp(A_log), and SGLang takes it for A_log",
        "phi3": "its Q, K and V (and gate and up) are one tensor each in the file, which SGLang's GGUF loader "
        "takes only part by part",
        "gemma3": NO_GGUF_PY_NAMES.format("gemma3_text"),
        "gemma4": NO_GGUF_PY_NAMES.format("gemma4_text"),
        "gpt-oss": NO_GGUF_PY_NAMES.format("gpt_oss"),
        "minimax-m2": NO_GGUF_PY_NAMES.format("minimax_m2"),
        "qwen2moe": "transformers' GGUF reader names its model qwen2_moe, which SGLang does not rename to "
        "gguf-py's qwen2moe (it renames qwen3_moe alone)",
        "falcon": "SGLang has no model of that architecture",
        "bloom": "SGLang has no model of that architecture",
        "nemotron": "SGLang has no model of that architecture",
        "deci": "transformers has no causal-LM class for it, which SGLang needs to read a GGUF's config",
        "t5": "it is no causal LM",
    },
)


def _chat_template(name: str, value: object) -> list[Concern]:
    # A built-in template name (chatml, llama-3-instruct, ...) or a file.
    text = str(value)
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", text) and not text.endswith((".jinja", ".json")):
        return []
    return [path_concern(name, text, what="a chat template file")]


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _context_length(value: object) -> int:
    """`--context-length` as SGLang 0.5.23 reads it (srt/utils/common.py human_readable_int): a
    whole number, or SI (k, M: powers of 1000, decimals allowed) and IEC (Ki, Mi: powers of 1024)
    suffixes, case-sensitive; no `auto`, no `32K`. The command line gets the plain number, which
    every release reads (older ones took only `type=int`). -1 parses, but no model has it."""
    text = str(value).strip() if isinstance(value, int | str) and not isinstance(value, bool) else ""
    match = re.fullmatch(r"(\d{1,12}(?:\.\d{1,6})?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    tokens = whole_tokens(value)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC and "." in number:
            raise EngineConfigError(
                f"argument --context-length: Decimals are not allowed with IEC suffixes like '{suffix}'. Use an "
                f"integer IEC value such as '{int(Decimal(number))}{suffix}', or an SI value such as "
                f"'{number}{suffix[0]}'.",
                field="context_length",
            )
        tokens = int(number) * _IEC[suffix] if suffix in _IEC else int(Decimal(number) * _SI[suffix])
    if tokens is None:
        raise EngineConfigError(
            f"argument --context-length: Invalid integer value: {shown_value(text or value)}. Use a plain integer, "
            "SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",
            field="context_length",
        )
    if not 0 < tokens <= MAX_CONTEXT:
        raise EngineConfigError(
            f"context_length must be a positive number of tokens up to {MAX_CONTEXT:,}, not {shown_value(value)} "
            "(SGLang has no 'auto' or -1: leave it unset for the model's native context)",
            field="context_length",
        )
    return tokens


def _prefill_chunk(size: int) -> int:
    """--chunked-prefill-size; -1 turns chunking off, and a prefill is then up to
    --max-prefill-tokens long (SGLANG_MAX_PREFILL_TOKENS unless set)."""
    return SGLANG_MAX_PREFILL_TOKENS if size == -1 else size


KNOBS: dict[str, KnobSpec] = {
    s.name: s
    for s in (
        KnobSpec("tp_size", "int", minimum=1, maximum=MAX_GPUS, plan=sets("tp")),
        # Each data-parallel replica runs the whole model on TP x PP GPUs of its own (without
        # --enable-dp-attention, which this adapter does not take: srt/managers/data_parallel_controller.py).
        KnobSpec("dp_size", "int", minimum=1, maximum=MAX_GPUS, plan=sets("dp")),
        KnobSpec("pp_size", "int", minimum=1, maximum=MAX_GPUS, plan=sets("pp")),
        # Expert parallelism inside the TP group: each GPU holds 1/ep of the experts whole instead of
        # 1/tp of each expert, the same bytes per GPU; no GPU is added.
        KnobSpec("ep_size", "int", minimum=1, maximum=MAX_GPUS, plan=NO_EFFECT),
        KnobSpec("mem_fraction_static", "float", minimum=0, maximum=1, exclusive_min=True, plan=sets("mem_util")),
        KnobSpec(
            "context_length",
            "int",
            normalise=_context_length,
            plan=sets("max_model_len"),
        ),
        KnobSpec("max_running_requests", "int", minimum=1, maximum=1_048_576, plan=sets("max_num_seqs")),
        # A cap on the pool SGLang sizes from mem_fraction_static: the plan shows the pool it can have.
        KnobSpec("max_total_tokens", "int", minimum=1, plan=NO_EFFECT),
        KnobSpec(
            "chunked_prefill_size",
            "int",
            minimum=-1,
            maximum=MAX_CONTEXT,
            plan=sets("max_num_batched_tokens", _prefill_chunk),
        ),
        KnobSpec(
            "kv_cache_dtype",
            "choice",
            choices=KV_CACHE_DTYPES,
            plan=kv_dtype(SGLANG_KV_DTYPES),
        ),
        # SGLang's own methods (w8a8_int8, w8a8_fp8, qoq, ...) beside vLLM's: any the adapter lets through.
        KnobSpec("quantization", "token", plan=quantization),
        KnobSpec("disable_radix_cache", "bool", plan=NO_EFFECT),
        KnobSpec("tool_call_parser", "token", plan=sets("tool_parser")),
        KnobSpec("reasoning_parser", "token", plan=sets("reasoning_parser")),
        KnobSpec(
            "speculative_algorithm",
            "choice",
            choices=SPEC_ALGORITHMS,
            plan=speculative_algorithm,
        ),
        KnobSpec("speculative_num_steps", "int", minimum=1, maximum=64, plan=sets("spec_tokens")),
        KnobSpec("speculative_eagle_topk", "int", minimum=1, maximum=64, plan=NO_EFFECT),
        KnobSpec("speculative_num_draft_tokens", "int", minimum=1, maximum=1024, plan=NO_EFFECT),
        # The draft model's own weights and pool: the planner knows only the target model's (the
        # memory share reserves room for a draft model when speculative_algorithm is set).
        KnobSpec(
            "speculative_draft_model_path",
            "str",
            concerns=reads_path_or_repo("the draft model"),
            plan=NO_EFFECT,
        ),
        KnobSpec("enable_metrics", "bool", plan=NO_EFFECT),
        TRUST_REMOTE_CODE,
        KnobSpec("attention_backend", "token", plan=sets("attention_backend")),
        # SGLang's hf_overrides: a RoPE factor or native context read as vLLM's.
        KnobSpec("json_model_override_args", "json", concerns=overrides_config, plan=config_overrides),
        KnobSpec("chat_template", "str", concerns=_chat_template, plan=NO_EFFECT),
    )
}


class SglangAdapter(PipAdapter):
    name = "sglang"
    label = "SGLang"
    default_port = 30000
    knobs = KNOBS
    argparse_command_line = True
    context_knob = "context_length"
    install_executable = "bin/python"  # sglang runs as `python -m sglang.launch_server`
    loads_hub_repository = True
    # A Hugging Face checkpoint (the host's copy or the repository), or a GGUF file (SGLANG_GGUF says
    # which, and how SGLang reads it): `model_reference` hands it the file
    # (SGLang 0.5.23 given a repository without a config.json looks for a .gguf in it itself,
    # srt/utils/hf_transformers/common.py resolve_hf_gguf_reference, and takes the only one or
    # refuses; older releases take it for a Hugging Face checkpoint).
    model_formats = frozenset({"hf", "gguf"})
    gguf_loader = SGLANG_GGUF
    quantization_knob = "quantization"
    concurrency_knob = "max_running_requests"
    # kv_pool = free_before_load x mem_fraction_static - weights (srt/mem_cache/kv_cache_configurator.py)
    static_memory_fraction = True
    # Seed 000: SGLang 0.5.9 "doesn't work with Qwen3.5's hybrid GatedDeltaNet architecture", it
    # outputs EOS at once; newer releases carry Qwen3.5 models.
    family_support = {LINEAR_ATTENTION_HYBRID: FamilySupport(broken_through="0.5.9")}
    # srt/entrypoints/http_server.py: Responses, rerank (a cross-encoder model), Anthropic's Messages
    # and its token count (README_Anthropic_API.md).
    api_paths = OPENAI_CORE | RESPONSES | MESSAGES | COUNT_TOKENS | {"/v1/rerank"}

    def default_memory_fraction(self, version: str, split: GpuSplit | None = None) -> float:
        """mem_fraction_static when unset, as srt/server_args.py (_handle_gpu_memory_settings) picks
        it at start: what is left of each GPU's memory after a reserve for the prefill's activations
        (1.5 MiB a token of the chunk, at least 2048), CUDA graphs (2 MiB a batch of the largest
        captured), 512 MiB of metadata, 128 MiB a GPU of the TP x PP world and a draft model (2 GiB,
        6 for STANDALONE, none for NGRAM); the reserve is at least 10 GiB on a GPU of over 60 GiB.
        Without the GPUs: 0.88, its own fallback."""
        if split is None or split.gpu_memory <= 0:
            return 0.88
        mib = split.gpu_memory / (1 << 20)
        chunk = split.prefill_chunk or self.batch_defaults(split.gpu_memory)[0]
        reserve = 512 + max(chunk if chunk > 0 else SGLANG_MAX_PREFILL_TOKENS, 2048) * 1.5
        reserve += _cuda_graph_max_bs(mib / 1024, split.tp) * 2 + split.tp * split.pp / 8 * 1024
        if mib > 60 * 1024:
            reserve = max(reserve, 10 * 1024)
        if split.speculative == "standalone":
            reserve += 6 * 1024
        elif split.speculative and split.speculative != "ngram":
            reserve += 2 * 1024
        return round((mib - reserve) / mib, 3)

    def batch_defaults(self, gpu_memory: int) -> tuple[int, int | None]:
        """(chunked_prefill_size, max_running_requests) when unset: the chunk from each GPU's memory
        (srt/server_args.py _handle_gpu_memory_settings: under 35 GiB 2048, under 60 GiB 4096, under
        160 GiB 8192, else 16384); the requests from the KV pool the server then has (None)."""
        gib = gpu_memory / (1 << 30)
        return (2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384), None

    def _check_rules(self, config: EngineConfig, knobs: dict[str, Any]) -> None:
        spec_knobs = [k for k in knobs if k.startswith("speculative_") and k != "speculative_algorithm"]
        if spec_knobs and "speculative_algorithm" not in knobs:
            raise EngineConfigError(
                f"{spec_knobs[0]} needs speculative_algorithm (e.g. NEXTN for an MTP head)",
                field=spec_knobs[0],
            )
        if config.api_key and not at_least(self.name, config.engine_version, SGLANG_CONFIG_FILE_SINCE):
            raise EngineConfigError(
                f"SGLang before {SGLANG_CONFIG_FILE_SINCE} takes an API key only on its command line, where every "
                "local user can read it: upgrade, or put an authenticating proxy in front",
                field="api_key",
            )
        if at_least(self.name, config.engine_version, SGLANG_CHOICES_SEEN):
            for name, choices in _CHOICES_AT_SEEN.items():
                if name in knobs and knobs[name] not in choices:
                    # argparse's own sentence: what `launch_server` would print and exit with.
                    raise EngineConfigError(choice_refusal(name, knobs[name], choices, argparse=True), field=name)
        if knobs.get("chunked_prefill_size") == 0:
            raise EngineConfigError(
                "chunked_prefill_size must be positive, or -1 to turn it off", field="chunked_prefill_size"
            )

    def launch_spec(self, config: EngineConfig) -> LaunchSpec:
        knobs = self._checked(config)
        served = config.served_name or default_served_name(config.model)
        argv = [config.binary or "python3", "-m", "sglang.launch_server", "--model-path", config.model]
        argv += ["--served-model-name", served, "--host", config.host, "--port", str(config.port)]
        for name, value in knobs.items():
            argv += flag_args(name, value)
        secrets: tuple[str, ...] = ()
        private: dict[str, str] = {}
        if config.api_key:
            # server_args.py has no environment form for --api-key, and on the command line
            # every local user sees it in `ps`. `--config FILE` (YAML; the command line wins
            # over it) takes any server argument, so the key goes there, in a 0600 file.
            private["sglang-secrets.yaml"] = f"api-key: {json.dumps(config.api_key)}\n"
            argv += ["--config", f"{PRIVATE_FILE}sglang-secrets.yaml"]
            secrets = (config.api_key,)
        # /health runs a 1-token probe generation by default (http_server.py).
        return openai_launch_spec(
            self.name,
            config,
            argv=argv,
            env=base_env(config),
            served_name=served,
            metrics=bool(knobs.get("enable_metrics")),
            secrets=secrets,
            private_files=private,
        )

    def parse_metrics(self, text: str) -> EngineMetrics:
        """srt/observability/metrics_collector.py names. Scheduler gauges are reported by
        every TP rank with the same value: collapse ranks, add data-parallel replicas.
        The oldest releases (sgl-project/sglang#1853) used `name=` labels and the same
        gauge names; their cache_hit_rate was a percentage."""
        s = parse_samples(text)
        per_dp = {"group_label": "dp_rank", "dedupe_label": "tp_rank"}
        running = s.first_present("sglang:num_running_reqs", "sglang:num_requests_running")
        waiting = s.first_present("sglang:num_queue_reqs", "sglang:num_requests_waiting")
        prompt = s.combined("sglang:prompt_tokens_total", **per_dp)
        cached = s.combined("sglang:cached_tokens_total", **per_dp)
        hit_rate = ratio(cached, prompt)
        if hit_rate is None:
            gauge = s.combined("sglang:cache_hit_rate", how="mean", **per_dp)
            hit_rate = gauge / 100 if gauge is not None and gauge > 1 else gauge
        return EngineMetrics(
            requests_running=s.combined(running, **per_dp) if running else None,
            requests_waiting=s.combined(waiting, **per_dp) if waiting else None,
            kv_cache_usage=s.combined("sglang:token_usage", how="mean", **per_dp),
            prefix_cache_hit_rate=hit_rate,
            prompt_tokens_total=prompt,
            generation_tokens_total=s.combined("sglang:generation_tokens_total", **per_dp),
            spec_acceptance_rate=s.combined("sglang:spec_accept_rate", how="mean", **per_dp),
            raw=raw_values(s, "sglang:"),
        )

    def parse_kv_capacity(self, log_text: str) -> KvCapacity:
        """srt/mem_cache/memory_pool.py: "KV Cache is allocated. [dtype: X, ]#tokens: N,
        K size: a GB, V size: b GB" (some pools: "KV size: c GB"). Every TP rank logs it and
        a draft model (MTP/EAGLE) logs its own pool: the first line is the target model's
        pool on the first rank. Sizes are GiB (memory_pool.py divides by GB = 1024**3)."""
        pattern = re.compile(
            r"KV Cache is allocated\.\s*(?:dtype: ([\w.]+),\s*)?#tokens: (\d+),\s*"
            r"(?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)"
        )
        pools: list[dict[str, Any]] = []
        for m in pattern.finditer(log_text):
            gib = float(m.group(5)) if m.group(5) else float(m.group(3)) + float(m.group(4))
            pools.append({"dtype": m.group(1), "tokens": int(m.group(2)), "gib": gib})
        if not pools:
            return KvCapacity()
        first = pools[0]
        return KvCapacity(
            tokens=first["tokens"],
            bytes=int(round(first["gib"] * 1024**3)),
            details={"pools": pools, "dtype": first["dtype"]},
        )
