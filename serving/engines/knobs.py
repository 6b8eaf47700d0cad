"""Knob specifications and the checks every adapter runs before anything starts.

A knob is an engine flag name with underscores (`tensor_parallel_size`,
`ctx_size`, ...). Each adapter declares a table of `KnobSpec`; `check_knobs` rejects
unknown names and unsafe or out-of-range values with `EngineConfigError(field=name)`.
Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from serving.engines.base import (
    OPENAI_CORE,
    ContextInputs,
    EngineConfig,
    EngineConfigError,
    FamilySupport,
    GgufLoader,
    GpuSplit,
    KvSlots,
    LaunchSpec,
    ModelRef,
    ParallelSizes,
    PlanEffect,
    ServedContext,
    gguf_split_part,
    shown_value,
)
from serving.engines.envpolicy import classify_env
from serving.engines.plan_effects import NO_EFFECT, Sets
from serving.engines.policy import Concern, model_concern, override_concerns, path_concern, source_concern
from serving.engines.versions import parse_version, version_at_or_after, version_lt
from serving.safety import UnsafeValueError, check_json_value

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Identifiers such as parser names, dtypes, quantization methods, attention backends.
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+:/-]*$")
MAX_TEXT = 4096  # characters in one text knob (a path, a parser name, an inline template)
INT_MAX = 2**31 - 1  # no engine takes a 64-bit setting; anything above is a typo or an attack
MAX_CONTEXT = 2**24  # 16M tokens: above every model's native context (the longest is 10M)
MAX_GPUS = 256  # parallel sizes and GPU indices
# ParallelSizes' fields, each the planner's setting its engine's knob `sets` (knob_for).
PARALLEL_SIZES = tuple(f.name for f in fields(ParallelSizes))


def check_text(field: str, value: str, *, allow_dash: bool = False) -> str:
    """Reject text that could break out of an argv element or a rendered script line."""
    if any(ch in value for ch in ("\n", "\r", "\x00")):
        raise EngineConfigError(f"{field} must be a single line", field=field)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no argv or database can carry it
            raise EngineConfigError(f"{field} contains text that is not valid Unicode", field=field) from None
    if not allow_dash and value.startswith("-"):
        raise EngineConfigError(f"{field} must not start with '-' (it would be read as another flag)", field=field)
    if value == "":
        raise EngineConfigError(f"{field} must not be empty", field=field)
    if len(value) > MAX_TEXT:
        raise EngineConfigError(f"{field} is too long (at most {MAX_TEXT} characters)", field=field)
    return value


@dataclass(frozen=True)
class KnobSpec:
    """How one knob is checked (`kind`), rendered (the adapter decides the flag) and planned
    (`plan`: what its value changes in the memory plan, or `plan_effects.NO_EFFECT`; named on
    every spec, so the adapter's table is the planner's too)."""

    name: str
    kind: str  # "int" | "float" | "bool" | "str" | "token" | "choice" | "json" | "path"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_min: bool = False
    choices: tuple[str, ...] = ()
    normalise: Callable[[Any], Any] | None = None  # custom check for special knobs
    help: str = ""
    # What the value can reach beyond serving (policy.py): given the knob's name and its
    # normalised value, the concerns it raises (a path to confine, code that needs an admin).
    concerns: Callable[[str, Any], list[Concern]] | None = None
    plan: PlanEffect = field(kw_only=True)


def reads_path(what: str) -> Callable[[str, Any], list[Concern]]:
    """A knob whose value is a file or folder the engine opens."""
    return lambda name, value: [path_concern(name, str(value), what=what)]


def reads_path_or_repo(what: str) -> Callable[[str, Any], list[Concern]]:
    """A knob naming another model: a repository (code concern) or a path."""

    def concerns(name: str, value: object) -> list[Concern]:
        found = source_concern(name, str(value), what=what)
        return [found] if found else []

    return concerns


def runs_code(message: str) -> Callable[[str, Any], list[Concern]]:
    """A bool knob that makes the engine run code from the model repository when true."""
    return lambda name, value: [Concern(name, "code", message)] if value is True else []


# `--trust-remote-code` (vLLM, SGLang): the engine runs the model repository's own Python.
TRUST_REMOTE_CODE = KnobSpec(
    "trust_remote_code",
    "bool",
    concerns=runs_code("trust_remote_code runs Python code from the model repository"),
    plan=NO_EFFECT,
)


def overrides_config(name: str, value: object) -> list[Concern]:
    return override_concerns(name, value) if isinstance(value, Mapping) else []


def _as_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "yes", "on", "1"):
        return True
    if isinstance(value, str) and value.lower() in ("false", "no", "off", "0"):
        return False
    raise EngineConfigError(f"{name} must be true or false, not {shown_value(value)}", field=name)


def _bound(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _as_number(spec: KnobSpec, value: Any) -> int | float:
    name = spec.name
    if isinstance(value, bool):
        raise EngineConfigError(f"{name} must be a number, not {shown_value(value)}", field=name)
    number: int | float
    if spec.kind == "int":
        if isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, int):
            number = value
        elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,18}", value.strip()):
            number = int(value.strip())
        else:
            raise EngineConfigError(f"{name} must be a whole number, not {shown_value(value)}", field=name)
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise EngineConfigError(f"{name} must be a number, not {shown_value(value)}", field=name) from None
        if number != number or number in (float("inf"), float("-inf")):
            raise EngineConfigError(f"{name} must be a finite number", field=name)
    low, high = spec.minimum, spec.maximum
    if high is None and spec.kind == "int":
        high = INT_MAX
    if low is not None and (number <= low if spec.exclusive_min else number < low):
        bound = f"greater than {_bound(low)}" if spec.exclusive_min else f"at least {_bound(low)}"
        raise EngineConfigError(f"{name} must be {bound}, not {shown_value(value)}", field=name)
    if high is not None and number > high:
        raise EngineConfigError(f"{name} must be at most {_bound(high)}, not {shown_value(value)}", field=name)
    return number


def json_object(name: str, value: object) -> dict[str, Any]:
    """A JSON knob's value: an object (or its text), checked for size and safety."""
    if isinstance(value, str):
        check_text(name, value, allow_dash=False)
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:
            # JSONDecodeError, a number past Python's digit limit, or nesting past the stack.
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "a number or nesting far too large"
            raise EngineConfigError(f"{name} is not valid JSON: {msg}", field=name) from None
    if not isinstance(value, dict):
        raise EngineConfigError(f"{name} must be a JSON object", field=name)
    try:
        check_json_value(value, field=name, max_depth=6, max_items=500, max_text=MAX_TEXT)
    except UnsafeValueError as exc:
        raise EngineConfigError(str(exc), field=name) from None
    return value


def choice_refusal(name: str, text: str, choices: tuple[str, ...], *, argparse: bool) -> str:
    """Why a choice knob refuses `text`, as the engine says it: an engine whose command line is
    Python's argparse (vLLM, SGLang) prints "argument --kv-cache-dtype: invalid choice: 'fp4'
    (choose from ...)", here naming the choices the panel offers; the others, the list."""
    if argparse:
        listed = ", ".join(repr(c) for c in choices)
        flag = "--" + name.replace("_", "-")
        return f"argument {flag}: invalid choice: {shown_value(text)} (choose from {listed})"
    return f"{name} must be one of {', '.join(choices)}; got {shown_value(text)}"


def normalise_knob(spec: KnobSpec, value: object, *, argparse: bool = False) -> Any:
    """Return the checked, normalised value of one knob (raise EngineConfigError). `argparse`: the
    engine's command line is Python's argparse (its refusal of a choice is argparse's sentence).
    Callers ask the adapter (`CheckedAdapter.knob_value`), which knows that."""
    name = spec.name
    if spec.normalise is not None:
        return spec.normalise(value)
    if spec.kind == "bool":
        return _as_bool(name, value)
    if spec.kind in ("int", "float"):
        return _as_number(spec, value)
    if spec.kind == "json":
        return json_object(name, value)
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise EngineConfigError(f"{name} must be text, not {shown_value(value)}", field=name)
    if spec.kind == "choice":
        if str(value) not in spec.choices:
            raise EngineConfigError(choice_refusal(name, str(value), spec.choices, argparse=argparse), field=name)
        return str(value)
    text = check_text(name, str(value))
    if spec.kind == "token" and not _TOKEN.match(text):
        raise EngineConfigError(f"{name} has characters that are not allowed: {text!r}", field=name)
    return text


def check_knobs(adapter: CheckedAdapter, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate every knob by `adapter`'s table; unknown names are errors. Returns the normalised knobs."""
    specs, engine = adapter.knobs, adapter.name
    out: dict[str, Any] = {}
    if len(knobs) > len(specs):
        raise EngineConfigError(f"{engine} has only {len(specs)} knobs; {len(knobs)} were given", field="knobs")
    for name, value in knobs.items():
        if not isinstance(name, str) or name not in specs:
            close = [k for k in specs if k.replace("_", "") == str(name).replace("_", "").replace("-", "")]
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise EngineConfigError(f"{engine} has no knob {name!r}{hint}", field=str(name))
        if value is None:
            continue
        out[name] = adapter.knob_value(name, value)
    return out


def check_env(env: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise EngineConfigError(f"{key!r} is not a valid environment variable name", field="env")
        if not isinstance(value, str):
            raise EngineConfigError(f"env {key} must be text", field="env")
        if any(ch in value for ch in ("\n", "\r", "\x00")):
            raise EngineConfigError(f"env {key} must be a single line", field="env")
        out[key] = value
    return out


def check_common(config: EngineConfig) -> None:
    """Checks shared by every adapter: model, served name, host, port, binary, secrets."""
    check_text("model", config.model)
    if config.served_name:
        check_text("served_name", config.served_name)
        if any(ch.isspace() for ch in config.served_name):
            raise EngineConfigError("served_name must not contain spaces", field="served_name")
    check_text("host", config.host)
    if not re.fullmatch(r"[A-Za-z0-9.:\[\]-]+", config.host):
        raise EngineConfigError(f"host {config.host!r} is not an address", field="host")
    if isinstance(config.port, bool) or not isinstance(config.port, int) or not 1 <= config.port <= 65535:
        raise EngineConfigError(f"port must be 1-65535, not {config.port!r}", field="port")
    if config.binary is not None:
        check_text("binary", config.binary)
    if config.api_key is not None and config.api_key != "":
        check_text("api_key", config.api_key, allow_dash=True)
    check_env(config.env)
    for index in config.gpu_indices:
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise EngineConfigError(f"GPU index {index!r} is not valid", field="gpu_indices")


def fmt_number(value: int | float) -> str:
    """Render a number the way a person would type it (0.95, 4096, not 4096.0)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def flag_value(value: object) -> str:
    """A checked knob's value as one argv word: a JSON object compact, a number as typed."""
    if isinstance(value, dict):
        return compact_json(value)
    return fmt_number(value) if isinstance(value, int | float) else str(value)


def flag_args(name: str, value: object, *, negatable: bool = False) -> list[str]:
    """The argv words of one knob for an engine whose flags are the knob names with dashes
    (vLLM, SGLang): true is the bare switch, false is `--no-x` where the engine has that form
    (`negatable`) and nothing otherwise, any other value follows its flag."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + flag[2:]] if negatable else []
    return [flag, flag_value(value)]


def base_env(config: EngineConfig) -> dict[str, str]:
    """The config's env plus CUDA_VISIBLE_DEVICES from gpu_indices (validated)."""
    env = check_env(config.env)
    if config.gpu_indices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in config.gpu_indices)
    return env


def url_host(host: str) -> str:
    """Where a local client should connect for a bind address (0.0.0.0 -> loopback)."""
    if host in ("0.0.0.0", ""):  # noqa: S104 - a bind address, mapped to loopback
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def default_served_name(model: str) -> str:
    """vLLM's and SGLang's default (and the seed's rule): the model's last path part."""
    return model.rstrip("/").rsplit("/", 1)[-1]


def openai_launch_spec(
    engine: str,
    config: EngineConfig,
    *,
    argv: list[str] | tuple[str, ...],
    env: dict[str, str],
    served_name: str,
    health_path: str = "/health",
    metrics: bool = True,
    secrets: tuple[str, ...] = (),
    private_files: dict[str, str] | None = None,
) -> LaunchSpec:
    """The LaunchSpec of an OpenAI-compatible server on config.host:config.port (every engine here)."""
    base = f"http://{url_host(config.host)}:{config.port}"
    return LaunchSpec(
        engine=engine,
        argv=tuple(argv),
        env=env,
        cwd=None,
        host=config.host,
        port=config.port,
        served_name=served_name,
        health_url=f"{base}{health_path}",
        models_url=f"{base}/v1/models",
        metrics_url=f"{base}/metrics" if metrics else None,
        chat_url=f"{base}/v1/chat/completions",
        completions_url=f"{base}/v1/completions",
        secret_values=secrets,
        private_files=dict(private_files or {}),
    )


def whole_tokens(value: object) -> int | None:
    """A plain whole number of tokens (an int, or digits with an optional minus), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) <= INT_MAX else None
    if isinstance(value, float) and value.is_integer() and abs(value) <= INT_MAX:
        return int(value)
    if isinstance(value, str) and len(value) <= 32 and re.fullmatch(r"-?[0-9]{1,12}", value.strip()):
        return int(value.strip())
    return None


def sized_context(
    knobs: Mapping[str, Any],
    name: str,
    parse: Callable[[Any], int | None],
    *,
    native: int | None,
    planned: int | None,
) -> ServedContext:
    """The served context of an engine whose one knob `name` is the per-request context (vLLM,
    SGLang): unset = the model's native context; a value the parser reads as None = chosen by
    the engine at start (the planner's figure when there is one)."""
    raw = knobs.get(name)
    if raw in (None, ""):
        if native:
            return ServedContext(native, native, f"model's native context ({name} unset)")
        return ServedContext(planned, planned, "planner") if planned else ServedContext(None, None, "unknown")
    try:
        value = parse(raw)
    except EngineConfigError:
        value = None
    if value is not None:
        return ServedContext(value, value, name)
    if planned:
        return ServedContext(planned, planned, f"{name}={raw}: planner's figure")
    return ServedContext(None, None, f"{name}={raw}: chosen by the engine at start")


class CheckedAdapter:
    """What every adapter checks before anything else: the common fields, the engine version,
    and each knob against the adapter's table; then the engine's own rules (`_check_rules`).

    It also holds the engine facts every adapter answers (overridden where the engine differs):
    which knob sets the context and how the engine reads it, the model reference it loads,
    whether it fetches its own weights, and where an install keeps its executable."""

    name: str
    label: str  # the engine's name as people write it ("vLLM")
    knobs: Mapping[str, KnobSpec]
    context_knob: str = ""  # the knob that sets the served context
    fetches_own_weights: bool = False  # the engine pulls its model itself (Ollama): no local copy is swapped in
    # The catalog's model formats (ModelVariant.format) its launch loads: what `model_reference` hands it.
    model_formats: frozenset[str] = frozenset({"hf"})
    install_executable: str | None = None  # the executable inside an install folder ("bin/vllm")
    vision_needs_projector = False  # images need a separate projector file (llama.cpp's mmproj)
    loads_hub_repository = False  # a model name it is given is looked up on the hub (vLLM, SGLang)
    quantization_knob = ""  # the knob that names a checkpoint's quantization ("" = read from the file)
    path_executable: str | None = None  # the executable's name on PATH when nothing is installed
    source_build_executable: str | None = None  # the executable a source build leaves in its tree
    carried_package: str | None = None  # a pip build carrying the executable (its module's get_binary_path())
    # Other pip distributions an adopted venv may hold, each with its executable inside the venv.
    other_distributions: Mapping[str, str] = MappingProxyType({})
    cpu_build = False  # a build of it serves on a host without GPUs (the planner sizes it in RAM)
    float32_as_16bit = False  # its dtype "auto" runs a float32 checkpoint in 16 bits
    installs_system_wide = False  # its installer puts the executable where it chooses, not in the install folder
    builds_from_checkout = False  # an install may build it from a source checkout on the host (source_dir)
    # What it does with a context beyond the model's trained length (no rope scaling), said after
    # "{engine} ": the planner's finding names it.
    beyond_trained_context = "answers worse past the trained length"
    env_knobs: Mapping[str, str] = {}  # server settings it reads from variables: {variable: knob}
    ggml_kv_cache = False  # its KV cache is llama.cpp's (ggml cache types, f16 unless set)
    # A paged KV cache: blocks of this many tokens when block_size is unset (vLLM's block manager);
    # a request's last block is whole, a sliding window straddles one block more, and a hybrid
    # model's recurrent state is paged with the attention blocks. 0: the pool is allocated token by
    # token (SGLang's token-to-KV pool).
    kv_block_default = 0
    # The memory knob's share is of the memory free at start, and holds the weights and the KV pool
    # alone: activations and CUDA graphs live in the rest (SGLang's mem_fraction_static). False: it
    # is a share of the whole memory that the profile run's activation peak and CUDA graphs also
    # come out of (vLLM's gpu_memory_utilization).
    static_memory_fraction = False
    family_support: Mapping[str, FamilySupport] = {}  # what its releases do with families of models
    gguf_loader: GgufLoader | None = None  # what its own GGUF loader reads (None: not judged)
    env_ignored_since: Mapping[str, str] = {}  # variables it stops reading from a release on: {variable: release}
    api_paths: frozenset[str] = OPENAI_CORE  # the OpenAI and Anthropic paths its server answers

    # Its command line is Python's argparse (vLLM, SGLang): a choice knob refuses a value off its
    # list with argparse's own sentence.
    argparse_command_line = False
    concurrency_knob = ""  # the knob that caps the requests served at once
    threads_knob = ""  # the knob of the CPU threads it computes with ("" = none the panel reads)

    def context_for(self, context: int, sequences: int) -> dict[str, Any]:
        """The knobs that serve `sequences` requests at once, each with `context` tokens."""
        return {self.context_knob: context, self.concurrency_knob: sequences}

    def kv_slots(
        self, context: int | None, parallel: int | None, unified: bool | None, *, vram: int, native: int | None
    ) -> KvSlots:
        """Only an engine with llama.cpp's KV cache (ggml_kv_cache) divides it into slots."""
        raise NotImplementedError(f"{self.label} has no llama.cpp KV slots")

    def default_memory_fraction(self, version: str, split: GpuSplit | None = None) -> float:
        """The share of each GPU's memory budgeted when the memory knob is unset: all of it for an
        engine without such a knob (it takes what its buffers need)."""
        return 1.0

    def batch_defaults(self, gpu_memory: int) -> tuple[int, int | None]:
        """Only an engine that splits tensors over GPUs (vLLM, SGLang) is sized by its batches."""
        raise NotImplementedError(f"{self.label} has no batch defaults")

    def serves_tool_calls(self, knobs: Mapping[str, Any]) -> bool:
        """Whether the server turns the model's tool calls into `tool_calls` (else a client's tool
        request fails, or the call arrives as text). SGLang: with a tool_call_parser."""
        return bool(knobs.get("tool_call_parser"))

    def model_reference(self, model: ModelRef, local_copy: str | None = None) -> str:
        """What the engine loads: the host's downloaded copy when there is one, else the repository.
        A GGUF, for an engine that loads one (model_formats), is its file: the host's downloaded copy,
        else the catalog's file (a bare name is read in the host's first model folder); the repository
        only for a GGUF row that names no file (made by hand: a hub import always names one), which
        such an engine may fail to load."""
        if model.format == "gguf" and "gguf" in self.model_formats:
            return local_copy or model.gguf_file or model.repo_id or model.name
        if local_copy and not self.fetches_own_weights:
            return local_copy
        return model.repo_id or model.name

    def launch_knobs(self, knobs: Mapping[str, Any], model: ModelRef) -> dict[str, Any]:
        """The knobs as the engine is given them: `vision` (a panel-side switch) taken out."""
        out = dict(knobs)
        out.pop("vision", None)
        return out

    def knob_value(self, name: str, value: object) -> Any:
        """Knob `name`'s `value` as the engine takes it, checked and normalised (EngineConfigError
        naming the knob, in the engine's words): what the launch renders and the planner reads."""
        return normalise_knob(self.knobs[name], value, argparse=self.argparse_command_line)

    def context_tokens(self, value: object) -> int | None:
        """The context the engine serves for `value` of its context knob, read as the engine reads
        it (None: chosen at start). EngineConfigError with the engine's reason when it refuses it."""
        if self.context_knob not in self.knobs:
            return None
        return whole_tokens(self.knob_value(self.context_knob, value))

    def knob_for(self, setting: str) -> str:
        """The knob whose value is the planner's `setting` (its table's `sets`): "tp" is vLLM's
        tensor_parallel_size and SGLang's tp_size. "" when none of its knobs is."""
        return next((n for n, s in self.knobs.items() if isinstance(s.plan, Sets) and s.plan.setting == setting), "")

    @property
    def placement_knobs(self) -> frozenset[str]:
        """Its parallel sizes' knobs: the knobs that set the planner's tp, pp and dp."""
        return frozenset(name for name in map(self.knob_for, PARALLEL_SIZES) if name)

    def parallel_sizes(self, knobs: Mapping[str, Any]) -> ParallelSizes | None:
        """Each size as the engine reads the knob that sets it (1: unset); None without a
        tensor-parallel knob (the engine spreads layers over the GPUs it sees)."""
        if not self.knob_for("tp"):
            return None
        sizes: dict[str, int] = {}
        for setting in PARALLEL_SIZES:
            name = self.knob_for(setting)
            if name and knobs.get(name) is not None:
                sizes[setting] = int(self.knob_value(name, knobs[name]))
        return ParallelSizes(**sizes)

    def parallel_knobs(self, sizes: ParallelSizes) -> dict[str, Any]:
        """Each size above 1 as the knob that sets it; {} when a size above 1 has no knob here (the
        engine cannot be started on that split, so it keeps its own)."""
        wanted = {setting: size for setting in PARALLEL_SIZES if (size := getattr(sizes, setting)) > 1}
        names = {setting: self.knob_for(setting) for setting in wanted}
        if not all(names.values()):
            return {}
        return {names[setting]: size for setting, size in wanted.items()}

    def served_context(self, asked: ContextInputs) -> ServedContext:
        """What context the engine serves with these knobs. `planned` = the planner's figure."""
        return sized_context(
            asked.knobs, self.context_knob, self.context_tokens, native=asked.native, planned=asked.planned
        )

    def validate(self, config: EngineConfig) -> None:
        self._checked(config)

    def _checked(self, config: EngineConfig) -> dict[str, Any]:
        """The config's knobs, checked and normalised (EngineConfigError naming the field)."""
        check_common(config)
        parse_version(self.name, config.engine_version)
        classify_env(config.env, engine=self.name, engine_version=config.engine_version)
        knobs = check_knobs(self, config.knobs)
        self._check_gguf_file(config, knobs)
        self._check_rules(config, knobs)
        return knobs

    def _check_gguf_file(self, config: EngineConfig, knobs: Mapping[str, Any]) -> None:
        """A GGUF file that the engine's own GGUF loader (gguf_loader) would not read as asked: a part
        of a split GGUF, where the release reads only the one file it is given, and a quantization
        knob other than gguf, which the loader sets itself whatever the knob says; and a release named
        that has no GGUF loader at all, where no package brings one back (GgufLoader.plugin). At latest
        (the host's newest install, which may be older) and where a plugin may serve it, that is the
        planner's finding (engine.gguf_removed): it also needs the GGUF's header and the host's venv."""
        loader, version = self.gguf_loader, (config.engine_version or "").strip()
        if loader is None or not config.model.lower().endswith(".gguf"):
            return
        if loader.removed_in and version_at_or_after(version, loader.removed_in) and loader.plugin is None:
            if version in ("", "latest"):
                return
            raise EngineConfigError(
                f"{self.label} {version} has no GGUF loader (it was removed in {loader.removed_in}), so it cannot "
                f"load {config.model.rsplit('/', 1)[-1]}: choose a version below {loader.removed_in}, or serve the "
                "GGUF with llama.cpp",
                field="engine_version",
            )
        split = gguf_split_part(config.model)
        since = loader.split_files
        if split and (since is None or version_lt(version, since)):
            who = f"{self.label} {version}" if since else self.label
            reads = f" (its GGUF loader reads every part from {since})" if since else ""
            upgrade = f", install {self.label} >= {since}" if since else ""
            raise EngineConfigError(
                f"{who} reads a GGUF from the one file it is given{reads}, and {config.model.rsplit('/', 1)[-1]} is "
                f"part {split.part} of {split.total}: merge the parts into one file (llama-gguf-split --merge) and "
                f"import that{upgrade}, or serve it with llama.cpp",
                field="model",
            )
        knob = self.quantization_knob
        if knob and knobs.get(knob, "gguf") != "gguf":
            raise EngineConfigError(
                f"{knob}={knobs[knob]} does not apply to a GGUF file: {self.label} loads one with its own "
                "quantization, gguf, whatever this says; drop it",
                field=knob,
            )

    def _check_rules(self, config: EngineConfig, knobs: dict[str, Any]) -> None:
        """The engine's own rules across knobs and the config (EngineConfigError); none here."""

    def concerns(self, config: EngineConfig) -> list[Concern]:
        """What this config reaches beyond serving (policy.py), after every check passed:
        paths to confine to the model folders, code and unknown variables that need an admin."""
        knobs = self._checked(config)
        found = self._model_concerns(config)
        for decision in classify_env(config.env, engine=self.name, engine_version=config.engine_version):
            field = f"env.{decision.name}"
            if decision.tier == "admin":
                found.append(Concern(field, "privileged", f"{decision.note}; only an admin may set it"))
            elif decision.kind == "path":
                found.append(path_concern(field, decision.value, what="a cache folder"))
        for name, value in knobs.items():
            spec = self.knobs[name]
            if spec.concerns is not None:
                found.extend(spec.concerns(name, value))
        return found

    def _model_concerns(self, config: EngineConfig) -> list[Concern]:
        found = model_concern(config)
        return [found] if found else []
