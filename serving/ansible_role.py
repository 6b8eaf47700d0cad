"""What the seed's vLLM Ansible role renders, and a revision written as its variables.

The role (tmseidel/local-llm-setup, tests/fixtures/ansible/NOTES.md; its start-script template
and defaults were read for issue 14) writes `start.sh`, which exports a fixed environment, activates its venv and
`exec`s `{{ vllm_venv_dir }}/bin/vllm serve`. Some flags it always passes (host, port,
`--gpu-memory-utilization`, `--max-model-len`, `--max-num-seqs`, `--tensor-parallel-size`,
the served name), `--max-num-batched-tokens` whenever the variable is defined (the role's
defaults define it), and some variables it always exports (the HF caches, the attention
backend, three Blackwell workarounds). A variable left out of group_vars silently takes the
role's default, which is how a 32K model once got `--max-model-len 262144`.

`vllm_role_vars` therefore writes every variable the start script reads. Where the revision
leaves a flag the role always passes to vLLM's own default, it writes that default when it is
a known constant (`defaults`); where it cannot be written at all, or the role would run
something else, it says why in `not_exported` (the export lists both in its header). The
export test renders the role's template with ansible-core and compares the script's argv and
environment with our own start script's.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serving.engines.versions import (
    LATEST_KNOWN,
    VLLM_ATTENTION_BACKEND_FLAG_SINCE,
    VLLM_ATTENTION_ENV_IGNORED_SINCE,
    at_least,
)

# The start script always exports these (the role's start.sh template).
VLLM_SCRIPT_ENV = {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_P2P_DISABLE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
# ... and both cache variables, set to vllm_hf_cache_dir.
CACHE_ENV = ("HF_HOME", "HUGGINGFACE_HUB_CACHE")

# The role installs `vllm>=0.17.0` into a fresh venv (pip takes the newest release then) and
# keeps whatever is installed afterwards. An import records the newest release the panel knows.
ROLE_VLLM_FLOOR = "0.17.0"
ROLE_VLLM_VERSION = LATEST_KNOWN["vllm"]
# VLLM_ATTENTION_BACKEND: honoured before 0.13, deprecated (still honoured) until 0.26, then
# gone from vLLM and silently ignored (serving/engines/versions.py: VLLM_ATTENTION_ENV_IGNORED_SINCE).

# The role's defaults (roles/vllm/defaults/main.yml): what each variable the start script reads
# takes when group_vars leave it out. An import applies them (the role runs them); an export
# writes every one of them explicitly instead.
ROLE_DEFAULTS: dict[str, Any] = {
    "vllm_venv_dir": "/opt/vllm/env",
    "vllm_hf_cache_dir": "/opt/vllm/hf_cache",
    "vllm_host": "0.0.0.0",  # noqa: S104 - the role's default bind address
    "vllm_port": 8001,
    "vllm_quantization": "none",
    "vllm_attention_backend": "TRITON_ATTN",
    "vllm_reasoning_parser": "qwen3",
    "vllm_enable_tool_calling": True,
    "vllm_tool_call_parser": "qwen3_coder",
    "vllm_speculative_config": "",
    "vllm_enforce_eager": True,
    "vllm_max_model_len": 262144,
    "vllm_gpu_memory_utilization": "0.95",
    "vllm_max_num_seqs": 4,
    "vllm_max_num_batched_tokens": 4096,
    "vllm_kv_cache_dtype": "fp8",
    "vllm_enable_prefix_caching": True,
    "vllm_enable_chunked_prefill": True,
    "vllm_rope_scaling": "",
    "vllm_cpu_offload_gb": 0,
    "vllm_tensor_parallel_size": 2,
    "vllm_pipeline_parallel_size": 1,
    "vllm_api_key": "",
}
# vLLM's own defaults for flags the role always passes (a revision that leaves them unset).
VLLM_DEFAULTS: dict[str, Any] = {"gpu_memory_utilization": 0.9, "tensor_parallel_size": 1}

# Why a revision's secret never reaches the role's variables (no value is ever exported).
SECRET_REASONS = {
    "api_key_secret": "the role passes vllm_api_key on the command line (--api-key); the panel never exports a "
    "key: set vllm_api_key from your vault",
    "hf_token_secret": "the role exports vllm_hf_token as HF_TOKEN; the panel never exports a token: set it from "
    "your vault",
}

# knob -> role variable, for knobs written as they are.
_DIRECT = {
    "max_num_seqs": "vllm_max_num_seqs",
    "max_num_batched_tokens": "vllm_max_num_batched_tokens",
    "tool_call_parser": "vllm_tool_call_parser",
    "reasoning_parser": "vllm_reasoning_parser",
}
# Flags the role passes only as `--x` when true: false means "vLLM's default".
_SWITCHES = {
    "enforce_eager": "vllm_enforce_eager",
    "enable_prefix_caching": "vllm_enable_prefix_caching",
    "enable_chunked_prefill": "vllm_enable_chunked_prefill",
    "enable_auto_tool_choice": "vllm_enable_tool_calling",
}
# Bool knobs whose false the adapter passes as `--no-x` (the role can only leave the flag out).
_NEGATED = {"enable_prefix_caching", "enable_chunked_prefill"}


@dataclass
class RoleVars:
    """The role's variables for a revision, and what they cannot say."""

    values: dict[str, Any] = field(default_factory=dict)
    not_exported: dict[str, str] = field(default_factory=dict)  # name -> why the role runs something else
    defaults: dict[str, str] = field(default_factory=dict)  # variable -> which default was written


def venv_of(binary: str | None) -> str | None:
    """`/x/venv` for `/x/venv/bin/vllm`, the only executable the role's script can run."""
    if binary and binary.startswith("/") and binary.endswith("/bin/vllm"):
        return binary[: -len("/bin/vllm")] or None
    return None


def _json_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class RoleInput:
    """A revision as an Ansible role reads it: what `render_group_vars` hands each engine's role."""

    model: str
    knobs: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    engine_version: str = ""
    host: str | None = None
    port: int | None = None
    served_name: str = ""
    binary: str | None = None  # the executable the revision runs (its venv becomes vllm_venv_dir)
    native_context: int | None = None  # the model's (vLLM's max-model-len default)
    preserved: Mapping[str, Any] = field(default_factory=dict)  # what an import kept, written back
    api_key_secret: str = ""
    hf_token_secret: str = ""


def vllm_role_vars(role: RoleInput) -> RoleVars:
    """Every variable the role's start script reads, for this revision (module docstring)."""
    knobs, env, engine_version = role.knobs, role.env, role.engine_version
    kept = dict(role.preserved)
    out = RoleVars()
    v = out.values
    version_label = f"vLLM {engine_version or ROLE_VLLM_VERSION}"
    _placement(out, role, kept, version_label)
    _fixed_flags(out, role)
    _switches_and_values(out, knobs)
    _attention(out, knobs, env, engine_version, kept, version_label)
    _environment(out, env, kept)
    # Secrets: the role passes the key as --api-key and the token as HF_TOKEN, from its own
    # variables; the panel's engines take them from host secrets. Never a value here: None
    # keeps an imported vault reference, else the export writes "" (none).
    v["vllm_api_key"] = None
    v["vllm_hf_token"] = None
    if role.api_key_secret:
        out.not_exported["api_key_secret"] = SECRET_REASONS["api_key_secret"]
    if role.hf_token_secret:
        out.not_exported["hf_token_secret"] = SECRET_REASONS["hf_token_secret"]
    handled = {"quantization", "kv_cache_dtype", "speculative_config", "hf_overrides", "cpu_offload_gb"}
    handled |= {"pipeline_parallel_size", "attention_backend", "max_model_len", *VLLM_DEFAULTS, *_DIRECT, *_SWITCHES}
    for knob in knobs:
        if knob not in handled:
            out.not_exported[knob] = "the seed's vLLM role has no variable for this knob"
    return out


def _placement(out: RoleVars, role: RoleInput, kept: Mapping[str, Any], version_label: str) -> None:
    """The model, where the engine listens, and the venv it runs from."""
    model, v = role.model, out.values
    v["vllm_model"] = model
    if role.served_name and role.served_name != model.split("/")[-1]:
        out.not_exported["served_name"] = (
            f"the role always serves the model as the last part of vllm_model ({model.split('/')[-1]!r}), "
            f"not {role.served_name!r}"
        )
    v["vllm_host"] = role.host
    v["vllm_port"] = role.port
    venv = venv_of(role.binary) or (kept.get("vllm_venv_dir") if isinstance(kept.get("vllm_venv_dir"), str) else None)
    if venv:
        v["vllm_venv_dir"] = venv
    else:
        out.not_exported["binary"] = (
            f"no {version_label} install is recorded on the host, so the role's venv is unknown: it runs "
            f"{ROLE_DEFAULTS['vllm_venv_dir']}/bin/vllm, installing vllm>={ROLE_VLLM_FLOOR} there if it is missing"
        )


def _fixed_flags(out: RoleVars, role: RoleInput) -> None:
    """The flags the role always passes: the revision's value, else the default it would get."""
    knobs, v = role.knobs, out.values
    for knob in VLLM_DEFAULTS:
        var = f"vllm_{knob}"
        value = knobs.get(knob, VLLM_DEFAULTS[knob])
        if knob not in knobs:
            out.defaults[var] = (
                f"vLLM's default {value}, written because the role always passes --{knob.replace('_', '-')}"
            )
        v[var] = str(value) if knob == "gpu_memory_utilization" else value
    if "max_model_len" in knobs:
        v["vllm_max_model_len"] = knobs["max_model_len"]
    elif role.native_context:
        v["vllm_max_model_len"] = role.native_context
        out.defaults["vllm_max_model_len"] = (
            f"the model's native context {role.native_context:,} (vLLM's default), written because the role always "
            "passes --max-model-len"
        )
    else:
        out.not_exported["max_model_len"] = (
            "the role always passes --max-model-len (its default 262144); this revision leaves it to vLLM, which "
            "takes the model's own context, unknown to the catalog: set max_model_len on the revision"
        )
    for knob, var in _DIRECT.items():
        if knob in knobs:
            v[var] = knobs[knob]
    always = {
        "max_num_seqs": "the role always passes --max-num-seqs (its default 4)",
        "max_num_batched_tokens": "the role's defaults define vllm_max_num_batched_tokens (4096), so it always "
        "passes --max-num-batched-tokens",
    }
    for knob, why in always.items():
        if knob not in knobs:
            out.not_exported[knob] = (
                f"{why}; this revision leaves it to vLLM, whose default depends on the GPU and version: "
                f"set {knob} on the revision"
            )


def _switches_and_values(out: RoleVars, knobs: Mapping[str, Any]) -> None:
    """Switches, and the values with a "none" spelling."""
    v = out.values
    for knob, var in _SWITCHES.items():
        value = knobs.get(knob)
        v[var] = bool(value)
        if value is False and knob in _NEGATED:
            out.not_exported[knob] = f"the role cannot pass --no-{knob.replace('_', '-')}; it leaves vLLM's default"
    if knobs.get("tool_call_parser") and not knobs.get("enable_auto_tool_choice"):
        out.not_exported["tool_call_parser"] = (
            "the role passes --tool-call-parser only together with --enable-auto-tool-choice"
        )
    v.setdefault("vllm_tool_call_parser", "")
    v.setdefault("vllm_reasoning_parser", "")
    v["vllm_quantization"] = knobs.get("quantization", "none")
    kv = knobs.get("kv_cache_dtype", "auto")
    v["vllm_kv_cache_dtype"] = kv
    if kv == "auto" and "kv_cache_dtype" in knobs:
        out.defaults["vllm_kv_cache_dtype"] = "auto: the role then passes no --kv-cache-dtype, vLLM's default (auto)"
    v["vllm_speculative_config"] = _json_text(knobs["speculative_config"]) if "speculative_config" in knobs else ""
    v["vllm_rope_scaling"] = ""
    overrides = knobs.get("hf_overrides")
    if isinstance(overrides, dict) and set(overrides) == {"rope_scaling"}:
        v["vllm_rope_scaling"] = _json_text(overrides["rope_scaling"])
    elif overrides is not None:
        out.not_exported["hf_overrides"] = 'the role\'s only override is vllm_rope_scaling ({"rope_scaling": ...})'
    offload = knobs.get("cpu_offload_gb", 0)
    if isinstance(offload, bool) or not isinstance(offload, int | float) or offload != int(offload):
        out.not_exported["cpu_offload_gb"] = "the role passes --cpu-offload-gb only as a whole number of GiB"
        v["vllm_cpu_offload_gb"] = 0
    else:
        v["vllm_cpu_offload_gb"] = int(offload)
    v["vllm_pipeline_parallel_size"] = knobs.get("pipeline_parallel_size", 1)


def _attention(
    out: RoleVars,
    knobs: Mapping[str, Any],
    env: Mapping[str, str],
    engine_version: str,
    kept: Mapping[str, Any],
    version_label: str,
) -> None:
    """The role always exports VLLM_ATTENTION_BACKEND={{ vllm_attention_backend }}."""
    ignored = at_least("vllm", engine_version, VLLM_ATTENTION_ENV_IGNORED_SINCE)
    knob = knobs.get("attention_backend")
    from_env = env.get("VLLM_ATTENTION_BACKEND")
    if from_env:
        out.values["vllm_attention_backend"] = from_env
        return
    if knob and not at_least("vllm", engine_version, VLLM_ATTENTION_BACKEND_FLAG_SINCE):
        out.values["vllm_attention_backend"] = knob  # the adapter exports the variable too
        return
    written = kept.get("vllm_attention_backend")
    written = written if isinstance(written, str) and written else ROLE_DEFAULTS["vllm_attention_backend"]
    out.values["vllm_attention_backend"] = written
    if knob:
        out.not_exported["attention_backend"] = (
            f"{version_label} takes --attention-backend, which the role cannot pass; it exports "
            f"VLLM_ATTENTION_BACKEND instead, which {version_label} "
            + ("ignores" if ignored else "still honours, deprecated")
        )
    elif ignored:
        out.not_exported["VLLM_ATTENTION_BACKEND"] = (
            f"the role always exports VLLM_ATTENTION_BACKEND (written: {written}); {version_label} ignores it"
        )
    else:
        out.not_exported["VLLM_ATTENTION_BACKEND"] = (
            f"the role always exports VLLM_ATTENTION_BACKEND (written: {written}), which selects the attention "
            f"backend this revision leaves to {version_label}"
        )


def _environment(out: RoleVars, env: Mapping[str, str], kept: Mapping[str, Any]) -> None:
    home, hub = env.get("HF_HOME"), env.get("HUGGINGFACE_HUB_CACHE")
    cache = home or hub
    if cache:
        out.values["vllm_hf_cache_dir"] = cache
        if home != hub:
            out.not_exported["HUGGINGFACE_HUB_CACHE" if home else "HF_HOME"] = (
                f"the role sets both HF_HOME and HUGGINGFACE_HUB_CACHE to vllm_hf_cache_dir ({cache}); this revision "
                "sets "
                + ("only HF_HOME" if not hub else "only HUGGINGFACE_HUB_CACHE" if not home else "them apart")
                + ": the hub cache moves, another download"
            )
    else:
        written = kept.get("vllm_hf_cache_dir")
        written = written if isinstance(written, str) and written else ROLE_DEFAULTS["vllm_hf_cache_dir"]
        out.values["vllm_hf_cache_dir"] = written
        out.not_exported["HF_HOME"] = (
            f"the role always sets HF_HOME and HUGGINGFACE_HUB_CACHE to vllm_hf_cache_dir (written: {written}); "
            "this revision uses the engine user's default cache: another cache, another download"
        )
    for key, value in VLLM_SCRIPT_ENV.items():
        if env.get(key) != value:
            out.not_exported[key] = f"the role's start script always exports {key}={value}" + (
                f", not {env[key]!r}" if key in env else "; this revision does not set it"
            )
    for key in env:
        if key not in VLLM_SCRIPT_ENV and key not in CACHE_ENV and key != "VLLM_ATTENTION_BACKEND":
            out.not_exported[key] = (
                "the role's start script exports only the HF caches, CUDA_VISIBLE_DEVICES=0,1, NCCL_P2P_DISABLE=1, "
                "VLLM_ATTENTION_BACKEND and VLLM_USE_FLASHINFER_SAMPLER=0"
            )
