"""Ollama adapter: `ollama serve` configured through environment variables.

Ollama takes its server settings from env (ollama/ollama: envconfig/config.go,
docs/faq.mdx). The served name is the model tag. Ollama has **no
Prometheus /metrics endpoint**: `parse_metrics` returns an empty EngineMetrics and
`metrics_url` is None; per-request numbers come from the API's final chunk instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from serving.engines.adapter import Adapter
from serving.engines.base import (
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
    ServedContext,
    shown_value,
)
from serving.engines.knobs import MAX_CONTEXT, KnobSpec, base_env, openai_launch_spec, reads_path, whole_tokens
from serving.engines.llamacpp import LlamaCppAdapter
from serving.engines.plan_effects import (
    NO_EFFECT,
    OLLAMA_KV_TYPES,
    flash_attn,
    ollama_kv_type,
    sets,
)
from serving.engines.policy import Concern
from serving.engines.versions import parse_version


def _keep_alive(value: object) -> str:
    # A duration ("30m", "1h"), seconds, a negative value (= forever) or 0 (docs/api.md).
    text = str(value).strip() if not isinstance(value, bool) else ""
    if len(text) <= 20 and (
        re.fullmatch(r"-?[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)?", text) or re.fullmatch(r"([0-9]+(h|m|s))+", text)
    ):
        return text
    raise EngineConfigError(
        f"keep_alive must be a duration like 30m or -1, not {shown_value(value)}", field="keep_alive"
    )


def _flash(value: object) -> str:
    if value is True or value in ("1", 1, "on", "true"):
        return "1"
    if value is False or value in ("0", 0, "off", "false"):
        return "0"
    raise EngineConfigError("flash_attention must be on or off (unset = auto)", field="flash_attention")


def _context_length(value: object) -> int:
    """OLLAMA_CONTEXT_LENGTH is read with strconv.ParseUint (envconfig/config.go): anything but a
    whole number is logged "invalid environment variable, using default" and ignored, so the
    server would run with a context chosen from VRAM instead of the one asked for."""
    tokens = whole_tokens(value)
    if tokens is None or not 0 < tokens <= MAX_CONTEXT:
        raise EngineConfigError(
            f'Ollama ignores OLLAMA_CONTEXT_LENGTH={shown_value(str(value))} ("invalid environment variable, '
            f'using default") and picks a context from VRAM: write a whole number of tokens from 1 to '
            f"{MAX_CONTEXT:,}, such as 32768",
            field="context_length",
        )
    return tokens


def default_context(vram: int) -> int:
    """The context Ollama serves when OLLAMA_CONTEXT_LENGTH is unset, chosen from the GPUs' memory
    (`vram`, bytes): under 24 GiB 4k, under 48 GiB 32k, else 256k (ollama envconfig/config.go; its
    FAQ still says 4096)."""
    return 4096 if vram < 24 * 2**30 else 32768 if vram < 48 * 2**30 else 262144


# knob -> OLLAMA_* variable
ENV_OF = {
    "context_length": "OLLAMA_CONTEXT_LENGTH",
    "num_parallel": "OLLAMA_NUM_PARALLEL",
    "keep_alive": "OLLAMA_KEEP_ALIVE",
    "kv_cache_type": "OLLAMA_KV_CACHE_TYPE",
    "flash_attention": "OLLAMA_FLASH_ATTENTION",
    "max_loaded_models": "OLLAMA_MAX_LOADED_MODELS",
    "max_queue": "OLLAMA_MAX_QUEUE",
    "models": "OLLAMA_MODELS",
    "sched_spread": "OLLAMA_SCHED_SPREAD",
}

KNOBS: dict[str, KnobSpec] = {
    s.name: s
    for s in (
        KnobSpec("context_length", "int", normalise=_context_length, plan=sets("ctx_size")),
        KnobSpec("num_parallel", "int", minimum=1, maximum=4096, plan=sets("parallel")),
        KnobSpec("keep_alive", "str", normalise=_keep_alive, plan=NO_EFFECT),
        KnobSpec("kv_cache_type", "choice", choices=OLLAMA_KV_TYPES, plan=ollama_kv_type),
        KnobSpec("flash_attention", "str", normalise=_flash, plan=flash_attn),
        # How many models stay loaded at once: each revision is planned on its own.
        KnobSpec("max_loaded_models", "int", minimum=0, maximum=1024, plan=NO_EFFECT),
        KnobSpec("max_queue", "int", minimum=1, maximum=1_000_000, plan=NO_EFFECT),  # requests waiting, not memory
        KnobSpec("models", "str", concerns=reads_path("the models folder"), plan=NO_EFFECT),  # where the store is
        # Spread the layers over every GPU even when fewer would hold them: the planner always
        # spreads them over the GPUs by memory, as this does.
        KnobSpec("sched_spread", "bool", plan=NO_EFFECT),
    )
}


class OllamaAdapter(Adapter):
    name = "ollama"
    label = "Ollama"
    default_port = 11434
    knobs = KNOBS
    context_knob = "context_length"
    fetches_own_weights = True  # `ollama pull` into its own store: no host copy is swapped in
    # Ollama also imports a GGUF through a Modelfile (FROM ./x.gguf) or pulls hf.co/<repo>, but this
    # adapter pulls and serves a tag (`model_reference`) and writes no Modelfile: Ollama tags only.
    model_formats = frozenset({"ollama"})
    path_executable = "ollama"
    installs_system_wide = True  # the official installer puts `ollama` on PATH; the folder keeps only the script
    concurrency_knob = "num_parallel"
    env_knobs = {variable: knob for knob, variable in ENV_OF.items()}
    ggml_kv_cache = True  # Ollama runs llama.cpp's engine
    # docs.ollama.com: Responses (stateless, from 0.13.3) and Anthropic's Messages (no token count).
    api_paths = OPENAI_CORE | RESPONSES | MESSAGES

    def serves_tool_calls(self, knobs: Mapping[str, Any]) -> bool:
        return True  # always, for a model whose template has tools

    def model_reference(self, model: ModelRef, local_copy: str | None = None) -> str:
        """The model's Ollama tag (its catalog name): the only format it is launched with
        (model_formats; a switch to another format is refused before any launch)."""
        return model.name

    def served_context(self, asked: ContextInputs) -> ServedContext:
        """The knob, else OLLAMA_CONTEXT_LENGTH in env (unset: chosen from VRAM, 4k/32k/256k, so
        unknown); every parallel request gets the full length."""
        value = None
        for raw in (asked.knobs.get("context_length"), asked.env.get("OLLAMA_CONTEXT_LENGTH")):
            if raw not in (None, "") and value is None:
                try:
                    value = _context_length(raw)
                except EngineConfigError:
                    value = None
        if value:
            return ServedContext(value, value, "OLLAMA_CONTEXT_LENGTH")
        if asked.planned:
            return ServedContext(asked.planned, asked.planned, "planner")
        return ServedContext(None, None, "OLLAMA_CONTEXT_LENGTH unset: Ollama picks it from VRAM")

    def kv_slots(
        self, context: int | None, parallel: int | None, unified: bool | None, *, vram: int, native: int | None
    ) -> KvSlots:
        """One context per parallel request, never shared (docs/faq: memory ~ parallel x ctx);
        OLLAMA_NUM_PARALLEL unset: 1; the context unset: chosen from VRAM (default_context), at
        most the model's native one."""
        per_request = context or default_context(vram)
        if native:
            per_request = min(per_request, native)
        return KvSlots(sequences=parallel or 1, total=per_request * (parallel or 1), unified=False)

    def _check_rules(self, config: EngineConfig, knobs: dict[str, Any]) -> None:
        if knobs.get("kv_cache_type") in ("q8_0", "q4_0") and knobs.get("flash_attention") == "0":
            raise EngineConfigError("a quantized kv_cache_type needs flash attention", field="kv_cache_type")
        if config.api_key:
            raise EngineConfigError("Ollama has no API key setting; put a proxy in front", field="api_key")

    def _model_concerns(self, config: EngineConfig) -> list[Concern]:
        return []  # a tag Ollama looks up in its own store, never a path

    def launch_spec(self, config: EngineConfig) -> LaunchSpec:
        knobs = self._checked(config)
        env = base_env(config)
        env["OLLAMA_HOST"] = f"{config.host}:{config.port}"
        for name, value in knobs.items():
            env[ENV_OF[name]] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return openai_launch_spec(
            self.name,
            config,
            argv=(config.binary or "ollama", "serve"),
            env=env,
            served_name=config.served_name or config.model,
            health_path="/",  # "Ollama is running"
            metrics=False,  # Ollama has no Prometheus endpoint
        )

    def parse_metrics(self, text: str) -> EngineMetrics:
        """Ollama exposes no Prometheus metrics: always an empty EngineMetrics."""
        return EngineMetrics()

    def parse_kv_capacity(self, log_text: str) -> KvCapacity:
        """Ollama's runner is llama.cpp-based and logs the same KV lines when it loads a
        model; the first request (not startup) loads it."""
        return LlamaCppAdapter().parse_kv_capacity(log_text)

    def install_plan(self, version: str, target: InstallTarget) -> list[InstallStep]:
        """The official installer (https://ollama.com/install.sh) honours OLLAMA_VERSION.
        It needs root and network access (no wheelhouse). Ollama is one binary, so
        `venv_dir` only holds the downloaded installer; it finds CUDA by itself."""
        if target.wheelhouse or target.source_dir:
            field = "wheelhouse" if target.wheelhouse else "source_dir"
            raise EngineConfigError(f"Ollama installs with its own installer; drop the {field}", field=field)
        parsed = parse_version(self.name, version)
        env = {} if parsed.latest else {"OLLAMA_VERSION": parsed.raw.lstrip("v")}
        folder = target.venv_dir.rstrip("/")
        script = f"{folder}/ollama-install.sh"
        return [
            InstallStep(("mkdir", "-p", folder), "make the download folder"),
            InstallStep(
                ("curl", "-fsSL", "-o", script, "https://ollama.com/install.sh"),
                "download the official installer",
                timeout=600,
            ),
            InstallStep(("sh", script), "run the official installer", env=env, timeout=3600),
        ]

    def install_distribution(self, *, source_dir: str | None = None) -> str | None:
        return None  # not a pip install: nothing to read back from a venv

    def install_version(self, version: str) -> str:
        """Ollama may install its latest release ("")."""
        parsed = parse_version(self.name, version)
        return "" if parsed.latest else parsed.raw.lstrip("v")

    def version_from_distribution(self, found: str) -> str:
        return found
