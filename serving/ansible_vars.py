"""Import and export the seed's Ansible `group_vars` (tests/fixtures/ansible/NOTES.md).

`parse_group_vars(text)` turns a group_vars YAML text into engine, model, served name,
port, adapter knobs and env, applying the start script's translation rules (e.g.
`--quantization` only unless "none", `--pipeline-parallel-size` only when > 1), so the
knobs describe exactly the command the script would run. Secrets (`vllm_api_key`,
`vllm_hf_token`) are reported by variable name only, never copied. Every variable not
understood is kept in `unknown`; understood ones that are not part of a revision (Open
WebUI, resilience, paths, the other engine) go to `ignored_known`.

`render_group_vars(...)` writes a revision back as such a file, preserving the unknown
and ignored variables passed in. Pure: no Django, no I/O (PyYAML's pure-Python safe
loader and dumper).

Hostile input (issue 11). A group_vars text is untrusted: an operator pastes it, and
whoever later applies our export runs Ansible with it on their controller.

- Parsing (`load_group_vars`). Only plain YAML data: the loader refuses tags that build
  objects (`!!python/...`, and any local tag but Ansible's `!unsafe`), more than
  `MAX_ALIASES` alias uses (a group_vars file needs few; an alias bomb needs many),
  more than `MAX_NODES` nodes or nesting deeper than `MAX_YAML_DEPTH` while composing,
  and, measured AFTER parsing with aliases expanded, more than `MAX_VALUES` values, more
  than `MAX_TOTAL_TEXT` characters of text, or nesting deeper than `MAX_DEPTH`. Keys
  are text (top-level ones valid Ansible variable names), no NUL anywhere, numbers are
  finite and 64-bit (`.nan`, `.inf`, `1e999` refused). Dates stay text. A refused file
  raises AnsibleVarsError with one clear sentence.

- Templating. A value "holds a template" when any string in it - nested in lists or
  mappings, keys included - contains `{{`, `{%` or `{#` (Ansible templates exactly those).
  The panel never evaluates it, and:
  * it never becomes a setting: a templated vllm_*/ollama_* variable leaves its knob, env
    variable, model or port unset (the engine's or role's default applies); its text is
    kept as inert data in `templated` (the revision's extras), like unknown variables;
  * the export never writes anything Ansible would evaluate, whatever is stored (old
    revisions, knobs typed in the UI): every string holding a template is written with
    Ansible's `!unsafe` tag, which makes Ansible use the text literally and never render
    it (checked with ansible-core 2.19: a `lookup('pipe', ...)` marked `!unsafe` prints
    as text and runs nothing, in scalars, list items, nested values and keys). The only
    exception is a *plain reference* that can run nothing and carries no panel-chosen
    data flow: the whole string is `{{ name }}` with `name` one of `SAFE_REFERENCES`
    (the connection user and host names, e.g. the seed's `vllm_user: "{{ ansible_user }}"`),
    or, for a secret variable only, the conventional vault name of that same secret
    (`vllm_hf_token: "{{ vault_hf_token }}"`). Filters, calls, lookups, attribute access
    and any other name are inert. The export lists inert variables in `inert` and in a
    comment at the top of the file;
  * the import says so: `warnings` name the variables whose templates were not imported
    and will be exported inert, and those kept as plain references.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from serving.ansible_role import (
    CACHE_ENV,
    ROLE_DEFAULTS,
    ROLE_VLLM_FLOOR,
    ROLE_VLLM_VERSION,
    VLLM_SCRIPT_ENV,
    RoleInput,
    RoleVars,
    vllm_role_vars,
)
from serving.engines.base import EngineConfigError
from serving.engines.versions import VLLM_ATTENTION_BACKEND_FLAG_SINCE, VLLM_ATTENTION_ENV_IGNORED_SINCE, at_least
from serving.safety import MAX_INT, UnsafeValueError, check_json_value

# The Ollama role's fixed settings (the seed's Ansible role).
OLLAMA_ROLE_KNOBS = {"num_parallel": 2, "keep_alive": "30m"}

# Limits on a group_vars text (the seed's file: ~60 variables, no alias, depth 2, 3 KB).
MAX_TEXT_CHARS = 1_000_000  # before parsing
MAX_ALIASES = 20  # alias uses (`*name`, merge keys included) while composing
MAX_NODES = 20_000  # YAML nodes composed, aliases not expanded
MAX_YAML_DEPTH = 40  # nesting while composing (PyYAML recurses; refuse long before Python's limit)
MAX_VALUES = 5_000  # after parsing, aliases expanded: containers plus scalars
MAX_DEPTH = 12  # after parsing
MAX_TOTAL_TEXT = 1_000_000  # after parsing, aliases expanded: characters in all strings and keys
MAX_STRING = 100_000  # one string

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

# Templating (see the module docstring for the policy).
TEMPLATE_MARKERS = ("{{", "{%", "{#")
# Plain references an export may leave live: connection names, no secrets, nothing chosen by
# whoever imported the file can flow anywhere else through them.
SAFE_REFERENCES = frozenset({"ansible_user", "ansible_host", "inventory_hostname", "inventory_hostname_short"})
# A secret variable may refer to its own vault variable by the conventional names.
SECRET_REFERENCES = {
    "vllm_api_key": frozenset({"vault_vllm_api_key", "vault_api_key"}),
    "vllm_hf_token": frozenset({"vault_vllm_hf_token", "vault_hf_token"}),
}
_PLAIN_REFERENCE = re.compile(r"\{\{[ \t]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*\}\}")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


class AnsibleVarsError(ValueError):
    """The text is not a group_vars mapping this panel accepts (one clear sentence)."""


@dataclass(frozen=True)
class SecretRef:
    """A secret the group_vars reference: stored apart from revisions, by name."""

    variable: str  # e.g. "vllm_api_key"
    purpose: str  # "api_key" | "hf_token"
    templated: bool  # the value is a Jinja expression (e.g. a vault lookup)


@dataclass(frozen=True)
class AnsibleImport:
    engine: str  # a key of ROLES: "vllm" | "ollama"
    engine_version: str  # "" when the vars do not pin one
    model: str
    served_name: str
    host: str | None
    port: int | None
    knobs: dict[str, Any]
    env: dict[str, str]
    secrets: tuple[SecretRef, ...] = ()
    templated: dict[str, Any] = field(default_factory=dict)  # understood, but Jinja: inert text, no setting
    unknown: dict[str, Any] = field(default_factory=dict)
    ignored_known: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def preserved(self) -> dict[str, Any]:
        """Everything an export must write back (templates made inert by the export)."""
        return {**self.ignored_known, **self.unknown, **self.templated}


# --- templates -------------------------------------------------------------------------------


def _strings(value: object) -> list[str]:
    """Every string in `value`, keys included (iterative: no recursion limit to hit)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            for key, sub in item.items():
                stack.append(key)
                stack.append(sub)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def _holds_template(text: str) -> bool:
    return any(marker in text for marker in TEMPLATE_MARKERS)


def is_template(value: object) -> bool:
    """Whether Ansible would template anything in `value` (a string, or one nested in a
    list or mapping, keys included)."""
    return any(_holds_template(text) for text in _strings(value))


def is_plain_reference(text: str, *, variable: str = "") -> bool:
    """`{{ name }}` and nothing else, with `name` one the export may leave live (policy above)."""
    match = _PLAIN_REFERENCE.fullmatch(text)
    if match is None:
        return False
    name = match.group(1)
    return name in SAFE_REFERENCES or name in SECRET_REFERENCES.get(variable, frozenset())


def _needs_unsafe(text: str, variable: str) -> bool:
    return _holds_template(text) and not is_plain_reference(text, variable=variable)


# --- loading ---------------------------------------------------------------------------------


class _GroupVarsLoader(yaml.SafeLoader):
    """SafeLoader with budgets while composing: aliases, nodes, depth. Knows `!unsafe`
    (Ansible's "never template this"), keeps dates as text, refuses every other tag."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise AnsibleVarsError(
                    f"it uses more than {MAX_ALIASES} YAML aliases (*name); a group_vars file needs few, "
                    "and this many can expand without limit (an alias bomb)"
                )
            return super().compose_node(parent, index)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise AnsibleVarsError(f"it holds more than {MAX_NODES:,} YAML values")
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise AnsibleVarsError(f"it is nested more than {MAX_YAML_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    raise AnsibleVarsError("a !unsafe value must be text, a list or a mapping")


def _refuse_tag(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if node.tag == "!vault":
        raise AnsibleVarsError(
            "it holds a vault-encrypted value (!vault), which the panel cannot read: refer to a vault "
            'variable instead (e.g. vllm_hf_token: "{{ vault_hf_token }}") or store the secret on the host'
        )
    raise AnsibleVarsError(f"it uses the YAML tag {node.tag[:60]!r}, which an import does not accept")


def _construct_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    return loader.construct_scalar(node)


_GroupVarsLoader.add_constructor("!unsafe", _construct_unsafe)
_GroupVarsLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_text)
for _tag in ("tag:yaml.org,2002:binary", "tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs"):
    _GroupVarsLoader.add_constructor(_tag, _refuse_tag)
_GroupVarsLoader.add_constructor(None, _refuse_tag)  # any other tag (SafeLoader's fallback)


def _check_parsed(data: object) -> None:
    """Caps measured on the parsed value, aliases expanded (the composer's budget bounds the
    input; this bounds what a shared anchor expands to)."""
    try:
        check_json_value(data, field="group_vars", max_depth=MAX_DEPTH, max_items=MAX_VALUES, max_text=MAX_STRING)
    except UnsafeValueError as exc:
        if "too large" in str(exc):
            raise AnsibleVarsError(f"it holds more than {MAX_VALUES:,} values once YAML aliases are expanded") from None
        raise AnsibleVarsError(str(exc)) from None
    total = sum(len(text) for text in _strings(data))  # at most MAX_VALUES strings, checked above
    if total > MAX_TOTAL_TEXT:
        raise AnsibleVarsError(
            f"it holds {total:,} characters of text once YAML aliases are expanded (at most {MAX_TOTAL_TEXT:,})"
        )


def load_group_vars(text: str) -> dict[str, Any]:
    """The variables of a group_vars text, or AnsibleVarsError (module docstring: the limits)."""
    if len(text) > MAX_TEXT_CHARS:
        raise AnsibleVarsError(f"it is larger than {MAX_TEXT_CHARS:,} characters")
    if "\x00" in text:
        raise AnsibleVarsError("it contains a NUL character")
    try:
        data = yaml.load(text, Loader=_GroupVarsLoader)  # noqa: S506 - a SafeLoader subclass
    except AnsibleVarsError:
        raise
    except yaml.YAMLError as exc:
        raise AnsibleVarsError(f"not valid YAML: {str(exc)[:300]}") from exc
    except RecursionError as exc:  # belt and braces: the depth budget stops far earlier
        raise AnsibleVarsError("it is nested too deeply") from exc
    except (TypeError, ValueError) as exc:  # e.g. a list as a mapping key
        raise AnsibleVarsError(f"not a plain YAML mapping: {str(exc)[:200]}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise AnsibleVarsError("group_vars must be a mapping of variable names to values")
    for key in data:
        if not isinstance(key, str):
            raise AnsibleVarsError(f"the variable name {str(key)[:60]!r} is not text")
        if not _VARIABLE_NAME.fullmatch(key):
            raise AnsibleVarsError(f"{key[:60]!r} is not a valid Ansible variable name")
    _check_parsed(data)
    return data


# --- parsing ---------------------------------------------------------------------------------


def _empty(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _number(value: object, name: str) -> Any:
    """ "0.95" -> 0.95, "4096" -> 4096 (Ansible often quotes numbers); else unchanged.
    A number that is not finite or beyond 64 bits is refused, naming the variable."""
    if isinstance(value, str):
        text = value.strip()
        for cast in (int, float):
            try:
                value = cast(text)
                break
            except ValueError:  # includes ints of more than 4,300 digits
                continue
        else:
            return value
    if isinstance(value, float) and not math.isfinite(value):
        raise AnsibleVarsError(f"{name} must be a finite number, not {value!r}")
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise AnsibleVarsError(f"{name} is out of range")
    return value


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object, name: str) -> str:
    """A variable that must be one value (text, number or boolean), as text."""
    if isinstance(value, dict | list | tuple):
        raise AnsibleVarsError(
            f"{name} must be a single value, not a {'mapping' if isinstance(value, dict) else 'list'}"
        )
    return "" if value is None else str(value)


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not a number JSON allows")


def _json_or_text(value: object, name: str) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value, parse_constant=_refuse_constant)
        except json.JSONDecodeError:
            return value  # the adapter will reject it with a clear message
        except (ValueError, RecursionError) as exc:
            raise AnsibleVarsError(f"{name} is not acceptable JSON: {str(exc)[:120]}") from exc
    try:
        check_json_value(value, field=name)
    except UnsafeValueError as exc:
        raise AnsibleVarsError(str(exc)) from exc
    return value


def _template_notes(data: dict[str, Any]) -> list[str]:
    """What the import did with templates, in words (the policy in the module docstring)."""
    inert: list[str] = []
    references: list[str] = []
    for name, value in data.items():
        texts = [t for t in _strings(value) if _holds_template(t)]
        if not texts:
            continue
        (inert if any(_needs_unsafe(t, name) for t in texts) else references).append(name)
    notes = []
    if inert:
        notes.append(
            f"Jinja templates in {', '.join(inert)} were not evaluated and set nothing on this revision; "
            "their text is kept as inert data, and an export that writes it back marks it !unsafe, so Ansible "
            "uses it literally and never runs it. Keep such templates in your own inventory, not in the panel."
        )
    if references:
        notes.append(
            f"{', '.join(references)} refer to another variable ({{{{ name }}}}); kept as such references, "
            "which run nothing."
        )
    return notes


def parse_group_vars(text: str, *, engine_version: str | None = None) -> AnsibleImport:
    """The revision a group_vars text describes. `engine_version`: the vLLM it runs; by default
    the one the role installs (`vllm>=0.17.0`: the newest release, ROLE_VLLM_VERSION)."""
    data = load_group_vars(text)
    engine = _text(data.get("inference_engine") or "vllm", "inference_engine").strip()
    warnings: list[str] = []
    if engine not in ROLES:
        warnings.append(f"inference_engine {engine[:40]!r} is neither vllm nor ollama; read as vllm")
        engine = "vllm"
    role = ROLES[engine]

    unknown: dict[str, Any] = {}
    ignored: dict[str, Any] = {}
    templated: dict[str, Any] = {}
    for name, value in data.items():
        if name in _ENGINE_VARS or name in _VLLM_SECRETS:
            continue
        active = name in role.variables
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
            templated[var] = data[var]  # a vault reference is not a value: kept (inert unless conventional)

    defaulted = sorted(n for n in role.defaults if n not in data and n not in ("vllm_venv_dir", "vllm_api_key"))

    def get(name: str) -> Any:
        """The value the role's start script uses: the file's, else the role's default (vLLM's
        role has defaults); None for a template, which sets nothing."""
        if name in templated:
            return None
        if name not in data:
            return role.defaults.get(name)
        return data.get(name)

    if defaulted:
        warnings.append(
            "not in the group_vars, so the role's defaults apply (imported as the role runs them): "
            + ", ".join(f"{n}={role.defaults[n]!r}" for n in defaulted)
        )

    result = role.parse(get, data, warnings, engine_version)
    for name in result.pop("kept"):
        ignored[name] = data[name]  # understood, but the role's script runs nothing from it
    warnings.extend(_template_notes(data))
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


def _vllm_version(engine_version: str | None, warnings: list[str]) -> str:
    if engine_version is not None and engine_version.strip():
        version = engine_version.strip()
        try:
            at_least("vllm", version, ROLE_VLLM_FLOOR)
        except EngineConfigError as exc:
            raise AnsibleVarsError(f"the engine version {version[:40]!r} is not a vLLM version: {exc}") from None
        return version
    warnings.append(
        f"the role installs vllm>={ROLE_VLLM_FLOOR} (pip takes the newest release) and keeps it: recorded as "
        f"{ROLE_VLLM_VERSION}, the newest the panel knows; give the version your host runs if it is older"
    )
    return ROLE_VLLM_VERSION


def _parse_vllm(
    get: Callable[[str], Any], data: dict[str, Any], warnings: list[str], engine_version: str | None
) -> dict[str, Any]:
    knobs: dict[str, Any] = {}
    kept: list[str] = []  # understood variables that set nothing here: written back as they are
    tool_calling = data.get("vllm_enable_tool_calling", ROLE_DEFAULTS["vllm_enable_tool_calling"])
    if not _truthy(tool_calling) and "vllm_tool_call_parser" in data:
        kept.append("vllm_tool_call_parser")  # the script drops it
    version = _vllm_version(engine_version, warnings)
    model = _text(get("vllm_model"), "vllm_model").strip()
    if not model:
        warnings.append("vllm_model is not set (or is a Jinja expression)")
    port = _integer(_number(get("vllm_port"), "vllm_port"))
    host = get("vllm_host")
    _vllm_sizes(get, knobs)
    _vllm_features(get, data, knobs, warnings)
    env = _vllm_env(get, data, version, knobs, kept, warnings)
    return {
        "engine_version": version,
        "model": model,
        "served_name": model.rstrip("/").rsplit("/", 1)[-1] if model else "",
        "host": _text(host, "vllm_host") if host is not None else "0.0.0.0",  # noqa: S104 - role default
        "port": port,
        "knobs": knobs,
        "env": env,
        "kept": kept,
    }


def _vllm_sizes(get: Callable[[str], Any], knobs: dict[str, Any]) -> None:
    """Parallelism, context, memory share and batch sizes."""
    # The script: --tensor-parallel-size always; --pipeline-parallel-size only when > 1.
    if not _empty(get("vllm_tensor_parallel_size")):
        knobs["tensor_parallel_size"] = _number(get("vllm_tensor_parallel_size"), "vllm_tensor_parallel_size")
    pp = _integer(_number(get("vllm_pipeline_parallel_size"), "vllm_pipeline_parallel_size"))
    if pp is not None and pp > 1:
        knobs["pipeline_parallel_size"] = pp
    for var, knob in (
        ("vllm_max_model_len", "max_model_len"),
        ("vllm_gpu_memory_utilization", "gpu_memory_utilization"),
        ("vllm_max_num_seqs", "max_num_seqs"),
        ("vllm_max_num_batched_tokens", "max_num_batched_tokens"),  # only when defined
    ):
        if not _empty(get(var)):
            knobs[knob] = _number(get(var), var)


def _vllm_features(get: Callable[[str], Any], data: dict[str, Any], knobs: dict[str, Any], warnings: list[str]) -> None:
    """Switches, parsers, speculation, quantization, KV cache type, RoPE scaling and CPU offload."""
    if _truthy(get("vllm_enforce_eager")):
        knobs["enforce_eager"] = True
    if _truthy(get("vllm_enable_tool_calling")):
        knobs["enable_auto_tool_choice"] = True
        if not _empty(get("vllm_tool_call_parser")):
            knobs["tool_call_parser"] = _text(get("vllm_tool_call_parser"), "vllm_tool_call_parser")
    if not _empty(get("vllm_reasoning_parser")):
        knobs["reasoning_parser"] = _text(get("vllm_reasoning_parser"), "vllm_reasoning_parser")
    if not _empty(get("vllm_speculative_config")):
        knobs["speculative_config"] = _json_or_text(get("vllm_speculative_config"), "vllm_speculative_config")
    if _truthy(get("vllm_enable_prefix_caching")):
        knobs["enable_prefix_caching"] = True
    elif "vllm_enable_prefix_caching" in data:
        warnings.append(
            "vllm_enable_prefix_caching is false, but the script then passes no flag: vLLM's own default (on) applies"
        )
    chunked = get("vllm_enable_chunked_prefill")
    if _truthy(chunked):
        knobs["enable_chunked_prefill"] = True
    quant = _text(get("vllm_quantization"), "vllm_quantization").strip()
    if quant and quant != "none":
        knobs["quantization"] = quant
    kv = _text(get("vllm_kv_cache_dtype"), "vllm_kv_cache_dtype").strip()
    if kv and kv != "auto":
        knobs["kv_cache_dtype"] = kv
    rope = get("vllm_rope_scaling")
    if not _empty(rope):
        knobs["hf_overrides"] = {"rope_scaling": _json_or_text(rope, "vllm_rope_scaling")}
    offload = _number(get("vllm_cpu_offload_gb"), "vllm_cpu_offload_gb")
    if isinstance(offload, int | float) and not isinstance(offload, bool) and offload > 0:
        knobs["cpu_offload_gb"] = offload


def _vllm_env(
    get: Callable[[str], Any],
    data: dict[str, Any],
    version: str,
    knobs: dict[str, Any],
    kept: list[str],
    warnings: list[str],
) -> dict[str, str]:
    """The variables the role's script sets: its fixed ones, the attention backend (a knob on a
    vLLM that takes the flag) and the caches."""
    env = dict(VLLM_SCRIPT_ENV)
    backend = get("vllm_attention_backend")
    backend = "" if _empty(backend) else _text(backend, "vllm_attention_backend").strip()
    if backend and not at_least("vllm", version, VLLM_ATTENTION_BACKEND_FLAG_SINCE):
        knobs["attention_backend"] = backend  # the adapter exports VLLM_ATTENTION_BACKEND itself
    elif backend and not at_least("vllm", version, VLLM_ATTENTION_ENV_IGNORED_SINCE):
        env["VLLM_ATTENTION_BACKEND"] = backend  # deprecated since 0.13, still honoured: as the script sets it
    elif backend and "vllm_attention_backend" in data:
        kept.append("vllm_attention_backend")
        warnings.append(
            f"vllm_attention_backend ({backend[:40]}) becomes VLLM_ATTENTION_BACKEND in the role's script, which "
            f"vLLM {version} ignores: the revision selects no attention backend, as the role's vLLM runs; set the "
            "attention_backend knob (--attention-backend) on a new revision to choose one (the role cannot pass it)"
        )
    # The script always sets both caches to vllm_hf_cache_dir (the role's default when unset).
    cache = get("vllm_hf_cache_dir")
    if not _empty(cache):
        for key in CACHE_ENV:
            env[key] = _text(cache, "vllm_hf_cache_dir")
    return env


def _parse_ollama(
    get: Callable[[str], Any], data: dict[str, Any], warnings: list[str], engine_version: str | None
) -> dict[str, Any]:
    models = get("ollama_models") or []
    if isinstance(models, str | int | float):
        models = [models]
    if not isinstance(models, list) or not all(isinstance(m, str | int | float) for m in models):
        raise AnsibleVarsError("ollama_models must be a list of model tags")
    model = str(models[0]).strip() if models else ""
    if len(models) > 1:
        warnings.append(f"ollama_models lists {len(models)} tags; the revision serves the first, {model[:80]!r}")
    knobs: dict[str, Any] = dict(OLLAMA_ROLE_KNOBS)
    if not _empty(get("ollama_num_ctx")):
        knobs["context_length"] = _number(get("ollama_num_ctx"), "ollama_num_ctx")
    version = get("ollama_version")
    return {
        "engine_version": "" if _empty(version) else _text(version, "ollama_version").strip(),
        "model": model,
        "served_name": model,
        "host": _text(get("ollama_host") or "0.0.0.0", "ollama_host"),  # noqa: S104 - role default
        "port": _integer(_number(get("ollama_port"), "ollama_port")),
        "knobs": knobs,
        "env": {},
        "kept": [],
    }


# --- export ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnsibleExport:
    text: str
    not_exported: dict[str, str]  # knob/env/variable name -> why the role runs something else
    inert: tuple[str, ...] = ()  # variables holding Jinja text, written marked !unsafe
    defaults: dict[str, str] = field(default_factory=dict)  # variable -> the default written for it


class _Unsafe(str):
    """Text Ansible must never template: dumped with Ansible's `!unsafe` tag."""


class _GroupVarsDumper(yaml.SafeDumper):
    pass


def _represent_unsafe(dumper: yaml.SafeDumper, data: _Unsafe) -> yaml.Node:
    return dumper.represent_scalar("!unsafe", str(data), style="'")


_GroupVarsDumper.add_representer(_Unsafe, _represent_unsafe)


def _neutralised(value: object, variable: str) -> tuple[Any, bool]:
    """`value` with every string Ansible would template (keys included) made `!unsafe`,
    except plain references the policy allows; and whether anything was."""
    changed = False

    def walk(item: object) -> Any:
        nonlocal changed
        if isinstance(item, str):
            if _needs_unsafe(item, variable):
                changed = True
                return _Unsafe(item)
            return item
        if isinstance(item, dict):
            return {walk(key): walk(sub) for key, sub in item.items()}
        if isinstance(item, list | tuple):
            return [walk(sub) for sub in item]
        return item

    return walk(value), changed


def render_group_vars(engine: str, role: RoleInput) -> AnsibleExport:
    """A group_vars YAML text for a revision; `role.preserved` (unknown, ignored and templated
    variables from an import) is written back unless the revision sets it. Every string
    Ansible would template is written `!unsafe` (listed in `inert`), except the plain
    references the module docstring allows. For vLLM every variable the role's start script
    reads is written (serving.ansible_role)."""
    out: dict[str, Any] = {"inference_engine": engine}
    not_exported: dict[str, str] = {}
    defaults: dict[str, str] = {}
    if engine not in ROLES:
        raise AnsibleVarsError(f"the Ansible roles run vllm or ollama, not {engine!r}")
    role_vars = ROLES[engine].render(role)
    out.update(role_vars.values)
    not_exported.update(role_vars.not_exported)
    defaults.update(role_vars.defaults)
    merged = dict(role.preserved) if isinstance(role.preserved, Mapping) else {}
    for key, value in out.items():
        if value is None and key in merged:
            continue  # e.g. a templated port the revision did not set
        merged[key] = "" if value is None and key in _VLLM_SECRETS else value
    ordered = {k: merged[k] for k in out if k in merged} | {k: v for k, v in merged.items() if k not in out}
    # Whatever is stored (old revisions, knobs typed in the UI), nothing leaves templated.
    safe: dict[str, Any] = {}
    inert: list[str] = []
    for key, value in ordered.items():
        if not isinstance(key, str) or not _VARIABLE_NAME.fullmatch(key):
            not_exported[str(key)[:60]] = "not a valid Ansible variable name"
            continue
        try:
            check_json_value(value, field=key, max_depth=MAX_DEPTH, max_items=MAX_VALUES, max_text=MAX_STRING)
        except UnsafeValueError as exc:
            not_exported[key] = f"not exportable: {exc}"
            continue
        safe[key], changed = _neutralised(value, key)
        if changed:
            inert.append(key)
    header = "---\n# Exported by llm-controlpanel from a deployment revision.\n"
    for name, why in defaults.items():
        header += _comment(f"Default written: {name}: {why}")
    for name, why in not_exported.items():
        header += _comment(f"Not exported: {name}: {why}")
    if inert:
        header += (
            "# Values tagged !unsafe hold Jinja text kept as it was imported or typed: Ansible uses\n"
            "# them literally and never evaluates them. Variables: " + ", ".join(inert) + "\n"
        )
    text = header + yaml.dump(
        safe, Dumper=_GroupVarsDumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return AnsibleExport(text=text, not_exported=not_exported, inert=tuple(inert), defaults=defaults)


def _comment(text: str) -> str:
    """One YAML comment line; no line break or Jinja marker can leave it."""
    flat = " ".join(str(text).split())
    return "# " + flat.replace("{", "(").replace("}", ")") + "\n"


def _ollama_vars(role: RoleInput) -> RoleVars:
    knobs = role.knobs
    not_exported: dict[str, str] = {}
    out: dict[str, Any] = {
        "ollama_version": role.engine_version or None,
        "ollama_host": role.host,
        "ollama_port": role.port,
        "ollama_models": [role.model],
        "ollama_num_ctx": knobs.get("context_length"),
    }
    for knob, value in knobs.items():
        if knob == "context_length":
            continue
        if OLLAMA_ROLE_KNOBS.get(knob) != value:
            not_exported[knob] = "the Ollama role fixes OLLAMA_NUM_PARALLEL=2 and OLLAMA_KEEP_ALIVE=30m"
    for key in role.env:
        not_exported[key] = "the Ollama role has no variable for extra environment"
    return RoleVars(values=out, not_exported=not_exported)


@dataclass(frozen=True)
class Role:
    """One of the seed's Ansible roles, by its `inference_engine` value: the variables it reads,
    the defaults it applies to those a group_vars text leaves out, how such a text becomes a
    revision's settings (`parse`: engine_version, model, served_name, host, port, knobs, env, and
    `kept`: understood variables that set nothing, written back as they are), and how a
    revision is written back as its variables (`render`)."""

    variables: frozenset[str]
    defaults: Mapping[str, Any]
    parse: Callable[[Callable[[str], Any], dict[str, Any], list[str], str | None], dict[str, Any]]
    render: Callable[[RoleInput], RoleVars]


ROLES: dict[str, Role] = {
    "vllm": Role(frozenset(_VLLM_KNOB_VARS), ROLE_DEFAULTS, _parse_vllm, vllm_role_vars),
    "ollama": Role(frozenset(_OLLAMA_VARS), {}, _parse_ollama, _ollama_vars),
}
