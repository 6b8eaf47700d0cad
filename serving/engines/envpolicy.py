"""Which environment variables a revision may hand to an engine (an allowlist, pure).

Engines read much of their configuration from the environment, and some of it is a way
out of the engine: llama-server's `LLAMA_ARG_STATIC_PATH` serves a folder over HTTP,
`LD_PRELOAD` loads any library into the process, `VLLM_PLUGINS` imports any module,
`NCCL_NET_PLUGIN` loads a shared object. So the policy is an allowlist:

- **allowed**: the variables a user of these engines really sets (GPU selection, NCCL
  tuning, the engines' documented tuning switches, cache folders under the host's model
  folders), each with a checked value. Anyone who may create revisions may set them.
- **refused**: variables that load code, move the engine's flags out of the panel's view
  (`LLAMA_ARG_*`: use the knob), hold secrets (use the secret store) or that the panel sets
  itself. Nobody may set them; the message says what to do instead.
- **admin**: anything else. Engines grow new variables faster than this table, so an
  admin may still set one; it is recorded on the revision as privileged and shown on the
  revision, the diff and the switch confirmation.

The other half is what an engine gets from the host: `inherited_env` keeps only the
variables in HOST_INHERITED from the agent's environment (the process basics, GPU and
library paths, caches, the host's proxy and CA settings), never a copy of it: the agent's
environment holds the broker URL and its host token, which would let code in an engine read
its host's launches and secrets. Nothing named CONTROLPANEL_* crosses, whatever is asked.

Sources: vllm/envs.py, llama.cpp common/arg.cpp (every flag has an LLAMA_ARG_* twin),
ollama envconfig/config.go, sglang srt/environ.py, NCCL's environment variable docs.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from serving.engines.base import EngineConfigError, shown_value
from serving.engines.versions import VLLM_ATTENTION_ENV_IGNORED_SINCE, at_least

ALL = ("vllm", "llama.cpp", "ollama", "sglang")
Tier = Literal["allowed", "admin"]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"^[A-Za-z0-9_.:,=+-]*$")  # no '/', no spaces: not a path, not a command
_DEVICES = re.compile(r"^(|-1|[0-9]+(,[0-9]+)*|(GPU|MIG)-[A-Za-z0-9-]+(,(GPU|MIG)-[A-Za-z0-9/-]+)*)$")
_DURATION = re.compile(r"^-?\d+(\.\d+)?(ns|us|ms|s|m|h)?$|^(\d+(h|m|s))+$")
MAX_VALUE_LEN = 1024


@dataclass(frozen=True)
class EnvRule:
    """One allowed variable (or a family, when `name` ends with `*`) and how its value is checked."""

    name: str
    kind: str  # "bool" | "int" | "token" | "devices" | "choice" | "duration" | "path"
    engines: tuple[str, ...] = ALL
    choices: tuple[str, ...] = ()
    maximum: int = 2**31 - 1
    before: str = ""  # the engine version from which the engine ignores it ("" = still read)
    help: str = ""

    def matches(self, name: str) -> bool:
        return name.startswith(self.name[:-1]) if self.name.endswith("*") else name == self.name


@dataclass(frozen=True)
class Refusal:
    pattern: str  # a name, or a shell-style pattern such as `LD_*` or `NCCL_*_FILE`
    reason: str

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)


_CODE = "it makes the engine load code the panel does not control"
REFUSED: tuple[Refusal, ...] = (
    Refusal("LD_*", f"{_CODE} (the dynamic loader reads it)"),
    Refusal("PATH", "it changes which programs the engine runs; the panel picks the engine binary"),
    Refusal("PYTHON*", f"{_CODE} (the Python interpreter reads it)"),
    Refusal("VIRTUAL_ENV", "the panel picks the engine's venv"),
    Refusal("LLAMA_ARG_*", "llama-server reads every flag from an LLAMA_ARG_* variable: set the knob instead"),
    Refusal("OLLAMA_HOST", "the panel sets the address and port from the revision"),
    Refusal("OLLAMA_*", "Ollama's settings are knobs (context_length, num_parallel, models, ...): set the knob"),
    Refusal("VLLM_PLUGINS", _CODE),
    Refusal("VLLM_ALLOW_INSECURE_SERIALIZATION", f"{_CODE} (pickle over the wire)"),
    Refusal("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "it lets any API client load adapters from paths on the host"),
    Refusal("VLLM_SERVER_DEV_MODE", "it opens development endpoints (sleep, reset, collective RPC) to API clients"),
    Refusal("VLLM_LOGGING_CONFIG_PATH", "it reads a file outside the model folders"),
    Refusal("VLLM_TORCH_PROFILER_DIR", "it writes files outside the model folders"),
    Refusal("VLLM_API_KEY", "it is a secret: store it as a host secret and name it as the revision's API key"),
    Refusal("LLAMA_API_KEY", "it is a secret: store it as a host secret and name it as the revision's API key"),
    Refusal("NCCL_NET_PLUGIN", f"{_CODE} (a shared object)"),
    Refusal("NCCL_TUNER_PLUGIN", f"{_CODE} (a shared object)"),
    Refusal("NCCL_PROFILER_PLUGIN", f"{_CODE} (a shared object)"),
    Refusal("NCCL_*_FILE", "it reads or writes a file outside the model folders"),
    Refusal("*_TOKEN", "it is a secret: store it as a host secret and name it on the revision"),
    Refusal("*_API_KEY", "it is a secret: store it as a host secret and name it on the revision"),
    Refusal("*_PASSWORD", "it is a secret: store it as a host secret"),
    Refusal("*_SECRET", "it is a secret: store it as a host secret"),
    Refusal("CONTROLPANEL_*", "it is the panel's own setting; the agent's settings never reach an engine"),
)

_CACHE_HELP = "a cache folder; it must lie under the host's model folders"
ALLOWED: tuple[EnvRule, ...] = (
    # GPUs and threads
    EnvRule("CUDA_VISIBLE_DEVICES", "devices", help="GPU indices or UUIDs, e.g. 0,1"),
    EnvRule("CUDA_DEVICE_ORDER", "choice", choices=("FASTEST_FIRST", "PCI_BUS_ID")),
    EnvRule("CUDA_LAUNCH_BLOCKING", "bool"),
    EnvRule("CUDA_MODULE_LOADING", "choice", choices=("LAZY", "EAGER")),
    EnvRule("OMP_NUM_THREADS", "int", maximum=4096),
    EnvRule("MKL_NUM_THREADS", "int", maximum=4096),
    EnvRule("TOKENIZERS_PARALLELISM", "bool"),
    EnvRule("PYTORCH_CUDA_ALLOC_CONF", "token", engines=("vllm", "sglang"), help="e.g. expandable_segments:True"),
    EnvRule("TORCH_CUDA_ARCH_LIST", "token", engines=("vllm", "sglang")),
    # NCCL tuning (the plugin and file variables are refused above)
    EnvRule("NCCL_*", "token", engines=("vllm", "sglang"), help="NCCL tuning, e.g. NCCL_P2P_DISABLE=1"),
    # Hugging Face hub behaviour and caches
    EnvRule("HF_HUB_OFFLINE", "bool", engines=("vllm", "sglang")),
    EnvRule("TRANSFORMERS_OFFLINE", "bool", engines=("vllm", "sglang")),
    EnvRule("HF_HUB_ENABLE_HF_TRANSFER", "bool", engines=("vllm", "sglang")),
    EnvRule("HF_HUB_DISABLE_TELEMETRY", "bool", engines=("vllm", "sglang")),
    EnvRule("HF_HUB_DOWNLOAD_TIMEOUT", "int", engines=("vllm", "sglang"), maximum=86400),
    EnvRule("HF_HOME", "path", engines=("vllm", "sglang"), help=_CACHE_HELP),
    EnvRule("HF_HUB_CACHE", "path", engines=("vllm", "sglang"), help=_CACHE_HELP),
    EnvRule("HUGGINGFACE_HUB_CACHE", "path", engines=("vllm", "sglang"), help=_CACHE_HELP),
    EnvRule("TRANSFORMERS_CACHE", "path", engines=("vllm", "sglang"), help=_CACHE_HELP),
    # vLLM (vllm/envs.py)
    EnvRule(
        "VLLM_ATTENTION_BACKEND",
        "token",
        engines=("vllm",),
        before=VLLM_ATTENTION_ENV_IGNORED_SINCE,
        help="removed in vLLM 0.26: use the attention_backend knob",
    ),
    EnvRule("VLLM_USE_V1", "bool", engines=("vllm",)),
    EnvRule("VLLM_USE_FLASHINFER_SAMPLER", "bool", engines=("vllm",)),
    EnvRule("VLLM_FLASH_ATTN_VERSION", "int", engines=("vllm",), maximum=4),
    EnvRule("VLLM_SKIP_P2P_CHECK", "bool", engines=("vllm",)),
    EnvRule("VLLM_PP_LAYER_PARTITION", "token", engines=("vllm",)),
    EnvRule("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "bool", engines=("vllm",)),
    EnvRule("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "bool", engines=("vllm",)),
    EnvRule("VLLM_WORKER_MULTIPROC_METHOD", "choice", engines=("vllm",), choices=("spawn", "fork")),
    EnvRule("VLLM_LOGGING_LEVEL", "choice", engines=("vllm",), choices=("DEBUG", "INFO", "WARNING", "ERROR")),
    EnvRule("VLLM_ENGINE_ITERATION_TIMEOUT_S", "int", engines=("vllm",), maximum=86400),
    EnvRule("VLLM_RPC_TIMEOUT", "int", engines=("vllm",), maximum=86_400_000),
    EnvRule("VLLM_USE_DEEP_GEMM", "bool", engines=("vllm",)),
    EnvRule("VLLM_MARLIN_USE_ATOMIC_ADD", "bool", engines=("vllm",)),
    EnvRule("VLLM_DISABLE_COMPILE_CACHE", "bool", engines=("vllm",)),
    EnvRule("VLLM_ENABLE_V1_MULTIPROCESSING", "bool", engines=("vllm",)),
    EnvRule("VLLM_SLEEP_WHEN_IDLE", "bool", engines=("vllm",)),
    EnvRule("VLLM_CACHE_ROOT", "path", engines=("vllm",), help=_CACHE_HELP),
    # llama.cpp / ggml runtime (not flags: those are LLAMA_ARG_* and refused)
    EnvRule("GGML_CUDA_ENABLE_UNIFIED_MEMORY", "bool", engines=("llama.cpp", "ollama")),
    EnvRule("GGML_CUDA_P2P", "bool", engines=("llama.cpp",)),
    EnvRule("GGML_CUDA_NO_PINNED", "bool", engines=("llama.cpp", "ollama")),
    EnvRule("GGML_SCHED_MAX_COPIES", "int", engines=("llama.cpp",), maximum=64),
    EnvRule("LLAMA_LOG_COLORS", "bool", engines=("llama.cpp",)),
    EnvRule("LLAMA_LOG_TIMESTAMPS", "bool", engines=("llama.cpp",)),
    EnvRule("LLAMA_CACHE", "path", engines=("llama.cpp",), help=_CACHE_HELP),
    # SGLang (srt/environ.py)
    EnvRule("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "bool", engines=("sglang",)),
    EnvRule("SGLANG_ENABLE_JIT_DEEPGEMM", "bool", engines=("sglang",)),
    EnvRule("SGL_ENABLE_JIT_DEEPGEMM", "bool", engines=("sglang",)),
    EnvRule("SGLANG_DISABLE_CUDNN_CHECK", "bool", engines=("sglang",)),
    EnvRule("SGLANG_ENABLE_TORCH_COMPILE", "bool", engines=("sglang",)),
)

_BOOL_VALUES = {"0", "1", "true", "false", "True", "False", "TRUE", "FALSE", "yes", "no", "on", "off"}
_OLLAMA_EXTRA = (
    EnvRule("OLLAMA_DEBUG", "bool", engines=("ollama",)),
    EnvRule("OLLAMA_NOHISTORY", "bool", engines=("ollama",)),
    EnvRule("OLLAMA_NOPRUNE", "bool", engines=("ollama",)),
    EnvRule("OLLAMA_MULTIUSER_CACHE", "bool", engines=("ollama",)),
    EnvRule("OLLAMA_NEW_ENGINE", "bool", engines=("ollama",)),
    EnvRule("OLLAMA_GPU_OVERHEAD", "int", engines=("ollama",), maximum=2**50),
    EnvRule("OLLAMA_LOAD_TIMEOUT", "duration", engines=("ollama",)),
)


@dataclass(frozen=True)
class EnvDecision:
    """What the policy says about one variable the revision sets."""

    name: str
    value: str
    tier: Tier
    kind: str = ""  # the rule's kind ("path" values must lie under the model folders)
    note: str = ""


def _rule_for(name: str, engine: str) -> EnvRule | None:
    for rule in (*_OLLAMA_EXTRA, *ALLOWED):
        if rule.matches(name) and engine in rule.engines:
            return rule
    return None


def _refusal_for(name: str) -> Refusal | None:
    return next((r for r in REFUSED if r.matches(name)), None)


def _check_value(rule: EnvRule, name: str, value: str) -> None:
    def bad(why: str) -> EngineConfigError:
        return EngineConfigError(f"env {name}: {why}, not {shown_value(value)}", field="env")

    if rule.kind == "bool" and value not in _BOOL_VALUES:
        raise bad("must be 0 or 1 (or true/false)")
    if rule.kind == "int" and (not re.fullmatch(r"[0-9]{1,19}", value) or int(value) > rule.maximum):
        raise bad(f"must be a whole number from 0 to {rule.maximum}")
    if rule.kind == "token" and not _TOKEN.fullmatch(value):
        raise bad("may hold letters, digits and _ . : , = + - only")
    if rule.kind == "devices" and not _DEVICES.fullmatch(value):
        raise bad("must be GPU indices like 0,1 or GPU UUIDs")
    if rule.kind == "choice" and value not in rule.choices:
        raise bad(f"must be one of {', '.join(rule.choices)}")
    if rule.kind == "duration" and not _DURATION.fullmatch(value):
        raise bad("must be a duration like 5m")
    if rule.kind == "path" and not value.startswith("/"):
        raise bad("must be an absolute path under the host's model folders")


def classify_env(env: Mapping[str, str], *, engine: str, engine_version: str = "") -> list[EnvDecision]:
    """Check every variable against the policy. Refused names and bad values raise
    EngineConfigError (field "env"); the rest come back with their tier."""
    decisions: list[EnvDecision] = []
    for name, value in env.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise EngineConfigError(f"{name!r} is not a valid environment variable name", field="env")
        if not isinstance(value, str):
            raise EngineConfigError(f"env {name} must be text", field="env")
        if any(ch in value for ch in ("\n", "\r", "\x00")) or len(value) > MAX_VALUE_LEN:
            raise EngineConfigError(f"env {name} must be one line of at most {MAX_VALUE_LEN} characters", field="env")
        rule = _rule_for(name, engine)
        refusal = _refusal_for(name)
        if refusal is not None and (rule is None or rule.name.endswith("*")):
            raise EngineConfigError(f"env {name} is not allowed: {refusal.reason}", field="env")
        if rule is None:
            decisions.append(
                EnvDecision(name, value, "admin", note=f"{name} is not on {engine}'s list of known variables")
            )
            continue
        if rule.before and at_least(engine, engine_version, rule.before):
            raise EngineConfigError(f"env {name}: {rule.help or 'no longer read by this engine version'}", field="env")
        _check_value(rule, name, value)
        decisions.append(EnvDecision(name, value, "allowed", kind=rule.kind, note=rule.help))
    return decisions


def allowed_names(engine: str) -> list[str]:
    """The variables anyone may set for `engine` (families end with `*`), for help text."""
    return sorted({r.name for r in (*ALLOWED, *_OLLAMA_EXTRA) if engine in r.engines})


# What an engine (and every other process the agent starts) gets from the host ----------------
PANEL_PREFIX = "CONTROLPANEL_"  # the agent's own settings, its host token among them: never handed on
HOST_INHERITED: tuple[str, ...] = (
    # the process basics
    *("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TZ", "TMPDIR"),
    # GPUs and the libraries that drive them
    *("CUDA_*", "NVIDIA_*", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "LD_LIBRARY_PATH"),
    # caches and the hub mirror, for engines that fetch their own weights
    *("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_ENDPOINT", "HF_HUB_OFFLINE"),
    *("TRANSFORMERS_OFFLINE", "XDG_CACHE_HOME", "LLAMA_CACHE", "VLLM_CACHE_ROOT"),
    # the network the host sits in
    *("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"),
    *("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"),
)
_PASS_ENTRY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")


def pass_list(text: str) -> tuple[str, ...]:
    """A host's own additions to HOST_INHERITED ("HF_TOKEN, MY_SITE_*"): names, or a prefix
    ending with `*`. Raises ValueError naming a bad entry; CONTROLPANEL_* is never passed on."""
    entries = tuple(e.strip() for e in text.replace(",", " ").split() if e.strip())
    for entry in entries:
        if not _PASS_ENTRY.match(entry):
            raise ValueError(f"{entry!r} is not a variable name or a NAME_* family")
        if entry.upper().startswith(PANEL_PREFIX):
            raise ValueError(f"{entry!r}: the panel's own settings (CONTROLPANEL_*) never reach an engine")
    return entries


def inherited_env(environ: Mapping[str, str], *, also: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `environ` (the agent's) that a process it starts may see: HOST_INHERITED
    and the names in `also` (see pass_list), never CONTROLPANEL_*."""
    patterns = (*HOST_INHERITED, *also)
    return {
        name: value
        for name, value in environ.items()
        if not name.upper().startswith(PANEL_PREFIX) and any(fnmatch.fnmatchcase(name, p) for p in patterns)
    }
