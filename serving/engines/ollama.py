"""Ollama adapter: `ollama serve` configured through environment variables.

Ollama takes its server settings from env (envconfig/config.go, docs/faq.mdx; see
shared/reference/engines.md §6). The served name is the model tag. Ollama has **no
Prometheus /metrics endpoint**: `parse_metrics` returns an empty EngineMetrics and
`metrics_url` is None; per-request numbers come from the API's final chunk instead.
"""

from __future__ import annotations

import re
from typing import Any

from serving.engines.base import (
    EngineConfig,
    EngineConfigError,
    EngineMetrics,
    InstallStep,
    KvCapacity,
    LaunchSpec,
    shown_value,
)
from serving.engines.knobs import MAX_CONTEXT, CheckedAdapter, KnobSpec, base_env, openai_launch_spec, reads_path
from serving.engines.policy import Concern
from serving.engines.scripts import ScriptsMixin
from serving.engines.versions import parse_version


def _keep_alive(value: Any) -> str:
    # A duration ("30m", "1h"), seconds, a negative value (= forever) or 0 (docs/api.md).
    text = str(value).strip() if not isinstance(value, bool) else ""
    if len(text) <= 20 and (
        re.fullmatch(r"-?[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)?", text) or re.fullmatch(r"([0-9]+(h|m|s))+", text)
    ):
        return text
    raise EngineConfigError(
        f"keep_alive must be a duration like 30m or -1, not {shown_value(value)}", field="keep_alive"
    )


def _flash(value: Any) -> str:
    if value is True or value in ("1", 1, "on", "true"):
        return "1"
    if value is False or value in ("0", 0, "off", "false"):
        return "0"
    raise EngineConfigError("flash_attention must be on or off (unset = auto)", field="flash_attention")


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
        KnobSpec("context_length", "int", minimum=1, maximum=MAX_CONTEXT),
        KnobSpec("num_parallel", "int", minimum=1, maximum=4096),
        KnobSpec("keep_alive", "str", normalise=_keep_alive),
        KnobSpec("kv_cache_type", "choice", choices=("f16", "q8_0", "q4_0")),
        KnobSpec("flash_attention", "str", normalise=_flash),
        KnobSpec("max_loaded_models", "int", minimum=0, maximum=1024),
        KnobSpec("max_queue", "int", minimum=1, maximum=1_000_000),
        KnobSpec("models", "str", concerns=reads_path("the models folder")),
        KnobSpec("sched_spread", "bool"),
    )
}


class OllamaAdapter(CheckedAdapter, ScriptsMixin):
    name = "ollama"
    default_port = 11434
    knobs = KNOBS

    def _checked(self, config: EngineConfig) -> dict[str, Any]:
        knobs = self._checked_knobs(config)
        if knobs.get("kv_cache_type") in ("q8_0", "q4_0") and knobs.get("flash_attention") == "0":
            raise EngineConfigError("a quantized kv_cache_type needs flash attention", field="kv_cache_type")
        if config.api_key:
            raise EngineConfigError("Ollama has no API key setting; put a proxy in front", field="api_key")
        return knobs

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
        from serving.engines.llamacpp import LlamaCppAdapter

        return LlamaCppAdapter().parse_kv_capacity(log_text)

    def install_steps(
        self,
        version: str,
        *,
        venv_dir: str,
        python: str = "python3",
        wheelhouse: str | None = None,
        source_dir: str | None = None,
        cuda: bool = False,
    ) -> list[InstallStep]:
        """The official installer (https://ollama.com/install.sh) honours OLLAMA_VERSION.
        It needs root and network access (no wheelhouse). Ollama is one binary, so
        `venv_dir` only holds the downloaded installer; it finds CUDA by itself."""
        if wheelhouse or source_dir:
            field = "wheelhouse" if wheelhouse else "source_dir"
            raise EngineConfigError(f"Ollama installs with its own installer; drop the {field}", field=field)
        parsed = parse_version(self.name, version)
        env = {} if parsed.latest else {"OLLAMA_VERSION": parsed.raw.lstrip("v")}
        folder = venv_dir.rstrip("/")
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
