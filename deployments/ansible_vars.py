"""Import and export the seed's Ansible `group_vars` (shared/reference/ansible-vars.md).

`parse_group_vars(text)` turns a group_vars YAML text into engine, model, served name,
port, adapter knobs and env, applying the start script's translation rules (e.g.
`--quantization` only unless "none", `--pipeline-parallel-size` only when > 1), so the
knobs describe exactly the command the script would run. Secrets (`vllm_api_key`,
`vllm_hf_token`) are reported by variable name only, never copied. Values holding Jinja
(`{{ ... }}`) are kept as text, never evaluated. Every variable not understood is kept
verbatim in `unknown`; understood ones that are not part of a revision (Open WebUI,
resilience, paths, the other engine) go to `ignored_known`.

`render_group_vars(...)` writes a revision back as such a file, preserving the unknown
and ignored variables passed in. Pure: no Django, no I/O (PyYAML's safe loader/dumper).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml

# The seed's start script always exports these (ansible-vars.md).
VLLM_SCRIPT_ENV = {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_P2P_DISABLE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
# The Ollama role's fixed settings (ansible-vars.md).
OLLAMA_ROLE_KNOBS = {"num_parallel": 2, "keep_alive": "30m"}

_PREFIX_IGNORED = ("open_webui_", "resilience_", "nvidia_driver_")
_IGNORED = {
    "docker_users",
    "vllm_enabled",
    "vllm_install_dir",
    "vllm_venv_dir",
    "vllm_log_dir",
    "vllm_user",
    "vllm_service_name",
    "vllm_service_restart",
    "vllm_service_restart_sec",
}
_VLLM_KNOB_VARS = {
    "vllm_model", "vllm_host", "vllm_port", "vllm_quantization", "vllm_attention_backend",
    "vllm_enforce_eager", "vllm_enable_tool_calling", "vllm_tool_call_parser",
    "vllm_reasoning_parser", "vllm_max_model_len", "vllm_gpu_memory_utilization",
    "vllm_max_num_seqs", "vllm_max_num_batched_tokens", "vllm_speculative_config",
    "vllm_enable_prefix_caching", "vllm_enable_chunked_prefill", "vllm_kv_cache_dtype",
    "vllm_rope_scaling", "vllm_cpu_offload_gb", "vllm_tensor_parallel_size",
    "vllm_pipeline_parallel_size", "vllm_hf_cache_dir",
}  # fmt: skip
_VLLM_SECRETS = {"vllm_api_key": "api_key", "vllm_hf_token": "hf_token"}
_OLLAMA_VARS = {"ollama_version", "ollama_host", "ollama_port", "ollama_models", "ollama_num_ctx"}
_ENGINE_VARS = {"inference_engine"}


class AnsibleVarsError(ValueError):
    """The text is not a group_vars mapping."""


@dataclass(frozen=True)
class SecretRef:
    """A secret the group_vars reference: stored apart from revisions, by name."""

    variable: str  # e.g. "vllm_api_key"
    purpose: str  # "api_key" | "hf_token"
    templated: bool  # the value is a Jinja expression (e.g. a vault lookup)


@dataclass(frozen=True)
class AnsibleImport:
    engine: str  # "vllm" | "ollama"
    engine_version: str  # "" when the vars do not pin one
    model: str
    served_name: str
    host: str | None
    port: int | None
    knobs: dict[str, Any]
    env: dict[str, str]
    secrets: tuple[SecretRef, ...] = ()
    templated: dict[str, str] = field(default_factory=dict)  # understood, but Jinja: kept as text
    unknown: dict[str, Any] = field(default_factory=dict)
    ignored_known: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def preserved(self) -> dict[str, Any]:
        """Everything an export must write back untouched."""
        return {**self.ignored_known, **self.unknown, **self.templated}


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _number(value: Any) -> Any:
    """ "0.95" -> 0.95, "4096" -> 4096 (Ansible often quotes numbers); else unchanged."""
    if isinstance(value, str):
        text = value.strip()
        for cast in (int, float):
            try:
                return cast(text)
            except ValueError:
                continue
    return value


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # the adapter will reject it with a clear message
    return value


def load_group_vars(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AnsibleVarsError(f"not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise AnsibleVarsError("group_vars must be a mapping of variable names to values")
    return data


def parse_group_vars(text: str) -> AnsibleImport:
    data = load_group_vars(text)
    engine = str(data.get("inference_engine") or "vllm").strip()
    warnings: list[str] = []
    if engine not in ("vllm", "ollama"):
        warnings.append(f"inference_engine {engine!r} is neither vllm nor ollama; read as vllm")
        engine = "vllm"

    unknown: dict[str, Any] = {}
    ignored: dict[str, Any] = {}
    templated: dict[str, str] = {}
    for name, value in data.items():
        if name in _ENGINE_VARS or name in _VLLM_SECRETS:
            continue
        active = (name in _VLLM_KNOB_VARS and engine == "vllm") or (name in _OLLAMA_VARS and engine == "ollama")
        if active and is_template(value):
            templated[name] = value
        elif name in _IGNORED or name.startswith(_PREFIX_IGNORED):
            ignored[name] = value
        elif name in _VLLM_KNOB_VARS or name in _OLLAMA_VARS:
            if not active:
                ignored[name] = value  # the other engine's settings: not this revision
        else:
            unknown[name] = value

    for var in _VLLM_SECRETS:
        if is_template(data.get(var)):
            templated[var] = data[var]  # a vault lookup is a reference, not a value: keep it
    if engine == "vllm" and not _truthy(data.get("vllm_enable_tool_calling")) and "vllm_tool_call_parser" in data:
        ignored["vllm_tool_call_parser"] = data["vllm_tool_call_parser"]  # the script drops it

    def get(name: str) -> Any:
        return None if name in templated else data.get(name)

    result = _parse_vllm(get, data, warnings) if engine == "vllm" else _parse_ollama(get, warnings)
    return AnsibleImport(
        engine=engine,
        secrets=tuple(
            SecretRef(variable=var, purpose=purpose, templated=is_template(data[var]))
            for var, purpose in _VLLM_SECRETS.items()
            if var in data and not _empty(data[var])
        ),
        templated=templated,
        unknown=unknown,
        ignored_known=ignored,
        warnings=tuple(warnings),
        **result,
    )


def _parse_vllm(get: Any, data: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    knobs: dict[str, Any] = {}
    model = str(get("vllm_model") or "")
    if not model:
        warnings.append("vllm_model is not set (or is a Jinja expression)")
    port = get("vllm_port")
    host = get("vllm_host")
    # The script: --tensor-parallel-size always; --pipeline-parallel-size only when > 1.
    if not _empty(get("vllm_tensor_parallel_size")):
        knobs["tensor_parallel_size"] = _number(get("vllm_tensor_parallel_size"))
    pp = _number(get("vllm_pipeline_parallel_size"))
    if isinstance(pp, int) and pp > 1:
        knobs["pipeline_parallel_size"] = pp
    for var, knob in (
        ("vllm_max_model_len", "max_model_len"),
        ("vllm_gpu_memory_utilization", "gpu_memory_utilization"),
        ("vllm_max_num_seqs", "max_num_seqs"),
        ("vllm_max_num_batched_tokens", "max_num_batched_tokens"),  # only when defined
    ):
        if not _empty(get(var)):
            knobs[knob] = _number(get(var))
    if _truthy(get("vllm_enforce_eager")):
        knobs["enforce_eager"] = True
    if _truthy(get("vllm_enable_tool_calling")):
        knobs["enable_auto_tool_choice"] = True
        if not _empty(get("vllm_tool_call_parser")):
            knobs["tool_call_parser"] = str(get("vllm_tool_call_parser"))
    if not _empty(get("vllm_reasoning_parser")):
        knobs["reasoning_parser"] = str(get("vllm_reasoning_parser"))
    if not _empty(get("vllm_speculative_config")):
        knobs["speculative_config"] = _json_or_text(get("vllm_speculative_config"))
    if _truthy(get("vllm_enable_prefix_caching")):
        knobs["enable_prefix_caching"] = True
    elif "vllm_enable_prefix_caching" in data:
        warnings.append(
            "vllm_enable_prefix_caching is false, but the script then passes no flag: vLLM's own default (on) applies"
        )
    chunked = get("vllm_enable_chunked_prefill")
    if chunked is None and "vllm_enable_chunked_prefill" not in data:
        chunked = True  # role default
    if _truthy(chunked):
        knobs["enable_chunked_prefill"] = True
    quant = get("vllm_quantization")
    if not _empty(quant) and str(quant).strip() != "none":
        knobs["quantization"] = str(quant).strip()
    kv = get("vllm_kv_cache_dtype")
    if not _empty(kv) and str(kv).strip() != "auto":
        knobs["kv_cache_dtype"] = str(kv).strip()
    rope = get("vllm_rope_scaling")
    if not _empty(rope):
        knobs["hf_overrides"] = {"rope_scaling": _json_or_text(rope)}
    offload = _number(get("vllm_cpu_offload_gb"))
    if isinstance(offload, int | float) and offload > 0:
        knobs["cpu_offload_gb"] = offload
    if not _empty(get("vllm_attention_backend")):
        knobs["attention_backend"] = str(get("vllm_attention_backend")).strip()
    env = dict(VLLM_SCRIPT_ENV)
    if not _empty(get("vllm_hf_cache_dir")):
        env["HF_HOME"] = str(get("vllm_hf_cache_dir"))
    warnings.append("the group_vars pin no exact vLLM version; the revision uses the latest known")
    return {
        "engine_version": "",
        "model": model,
        "served_name": model.rstrip("/").rsplit("/", 1)[-1] if model else "",
        "host": str(host) if host is not None else "0.0.0.0",  # noqa: S104 - role default
        "port": int(_number(port)) if port is not None and isinstance(_number(port), int) else None,
        "knobs": knobs,
        "env": env,
    }


def _parse_ollama(get: Any, warnings: list[str]) -> dict[str, Any]:
    models = get("ollama_models") or []
    if isinstance(models, str):
        models = [models]
    model = str(models[0]) if models else ""
    if len(models) > 1:
        warnings.append(f"ollama_models lists {len(models)} tags; the revision serves the first, {model!r}")
    knobs: dict[str, Any] = dict(OLLAMA_ROLE_KNOBS)
    if not _empty(get("ollama_num_ctx")):
        knobs["context_length"] = _number(get("ollama_num_ctx"))
    port = _number(get("ollama_port"))
    version = get("ollama_version")
    return {
        "engine_version": "" if _empty(version) else str(version),
        "model": model,
        "served_name": model,
        "host": str(get("ollama_host") or "0.0.0.0"),  # noqa: S104 - role default
        "port": port if isinstance(port, int) else None,
        "knobs": knobs,
        "env": {},
    }


# --- export ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnsibleExport:
    text: str
    not_exported: dict[str, str]  # knob/env name -> why it has no group_vars variable


_VLLM_VAR_OF = {
    "tensor_parallel_size": "vllm_tensor_parallel_size",
    "pipeline_parallel_size": "vllm_pipeline_parallel_size",
    "max_model_len": "vllm_max_model_len",
    "max_num_seqs": "vllm_max_num_seqs",
    "max_num_batched_tokens": "vllm_max_num_batched_tokens",
    "enforce_eager": "vllm_enforce_eager",
    "tool_call_parser": "vllm_tool_call_parser",
    "reasoning_parser": "vllm_reasoning_parser",
    "enable_prefix_caching": "vllm_enable_prefix_caching",
    "enable_chunked_prefill": "vllm_enable_chunked_prefill",
    "cpu_offload_gb": "vllm_cpu_offload_gb",
    "attention_backend": "vllm_attention_backend",
}


def render_group_vars(
    *,
    engine: str,
    model: str,
    knobs: dict[str, Any],
    env: dict[str, str] | None = None,
    engine_version: str = "",
    host: str | None = None,
    port: int | None = None,
    preserved: dict[str, Any] | None = None,
) -> AnsibleExport:
    """A group_vars YAML text for a revision; `preserved` (unknown, ignored and templated
    variables from an import) is written back verbatim unless the revision sets it."""
    env = dict(env or {})
    out: dict[str, Any] = {"inference_engine": engine}
    not_exported: dict[str, str] = {}
    if engine == "vllm":
        out.update(_vllm_vars(model, knobs, env, host, port, not_exported))
    elif engine == "ollama":
        out.update(_ollama_vars(model, knobs, env, engine_version, host, port, not_exported))
    else:
        raise AnsibleVarsError(f"the Ansible roles run vllm or ollama, not {engine!r}")
    merged = dict(preserved or {})
    for key, value in out.items():
        if value is None and key in merged:
            continue  # e.g. a templated port the revision did not set
        merged[key] = "" if value is None and key in _VLLM_SECRETS else value
    ordered = {k: merged[k] for k in out if k in merged} | {k: v for k, v in merged.items() if k not in out}
    text = "---\n# Exported by llm-controlpanel from a deployment revision.\n" + yaml.safe_dump(
        ordered, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return AnsibleExport(text=text, not_exported=not_exported)


def _vllm_vars(
    model: str,
    knobs: dict[str, Any],
    env: dict[str, str],
    host: str | None,
    port: int | None,
    not_exported: dict[str, str],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "vllm_model": model,
        "vllm_host": host,
        "vllm_port": port,
        "vllm_quantization": knobs.get("quantization", "none"),
        "vllm_kv_cache_dtype": knobs.get("kv_cache_dtype", "auto"),
        "vllm_enable_tool_calling": bool(knobs.get("enable_auto_tool_choice")),
        "vllm_speculative_config": "",
        "vllm_rope_scaling": "",
        "vllm_cpu_offload_gb": 0,
        "vllm_pipeline_parallel_size": 1,
        "vllm_reasoning_parser": "",
        "vllm_enforce_eager": False,
        "vllm_enable_prefix_caching": False,
        "vllm_enable_chunked_prefill": False,
        # Secrets are stored apart from revisions: only a preserved Jinja reference (a vault
        # lookup) is written back, never a value.
        "vllm_api_key": None,
        "vllm_hf_token": None,
    }
    for knob, value in knobs.items():
        if knob in ("quantization", "kv_cache_dtype", "enable_auto_tool_choice"):
            continue
        if knob == "gpu_memory_utilization":
            out["vllm_gpu_memory_utilization"] = str(value)  # the role keeps it a string
        elif knob == "speculative_config":
            out["vllm_speculative_config"] = (
                value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            )
        elif knob == "hf_overrides" and isinstance(value, dict) and set(value) == {"rope_scaling"}:
            rope = value["rope_scaling"]
            out["vllm_rope_scaling"] = rope if isinstance(rope, str) else json.dumps(rope, separators=(",", ":"))
        elif knob in _VLLM_VAR_OF:
            out[_VLLM_VAR_OF[knob]] = value
        else:
            not_exported[knob] = "the seed's vLLM role has no variable for this knob"
    for key, value in env.items():
        if key == "HF_HOME":
            out["vllm_hf_cache_dir"] = value
        elif VLLM_SCRIPT_ENV.get(key) != value:
            not_exported[key] = (
                "the start script only exports CUDA_VISIBLE_DEVICES=0,1, NCCL_P2P_DISABLE=1 "
                "and VLLM_USE_FLASHINFER_SAMPLER=0"
            )
    return out


def _ollama_vars(
    model: str,
    knobs: dict[str, Any],
    env: dict[str, str],
    version: str,
    host: str | None,
    port: int | None,
    not_exported: dict[str, str],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ollama_version": version or None,
        "ollama_host": host,
        "ollama_port": port,
        "ollama_models": [model],
        "ollama_num_ctx": knobs.get("context_length"),
    }
    for knob, value in knobs.items():
        if knob == "context_length":
            continue
        if OLLAMA_ROLE_KNOBS.get(knob) != value:
            not_exported[knob] = "the Ollama role fixes OLLAMA_NUM_PARALLEL=2 and OLLAMA_KEEP_ALIVE=30m"
    for key in env:
        not_exported[key] = "the Ollama role has no variable for extra environment"
    return out
