"""One serving spec: a revision becomes the command a host runs here, and only here.

- `RevisionSpec`: what a revision asks for (engine, version, model, knobs, env, served name,
  port, the name of its API key secret). Frozen; made from a row by the panel
  (deployments.runtime_bridge.revision_spec) or from an order by the agent.
- `HostFacts`: what only the host knows: the executable it installed, the local copy of
  downloaded weights, the address engines bind, the address clients reach, its model folders
  and GPUs.
- `launch(spec, facts)` -> `LaunchSpec` (argv, env, port, health URL, served name, served
  context): the revision page's command, the switch confirmation, the diff's command rows,
  the start script and systemd unit, the API, and the agent's own start all call it.
- `derive(parent, changes)`: a new revision's spec from an old one, as the web form, the API
  and the CLI make it.

Pure: no Django, no I/O. Engine facts (how a knob is read, what the engine loads) belong to
the engine adapters (serving.engines); this module only puts a spec and a host together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.secrets_mask import MASK
from serving.binds import address_refusal
from serving.engines.base import ContextInputs, EngineConfig, EngineConfigError, LaunchSpec, ModelRef, ServedContext
from serving.engines.registry import get_adapter

__all__ = [
    "HostFacts",
    "LaunchSpec",
    "ModelRef",
    "RevisionSpec",
    "derive",
    "engine_config",
    "launch",
    "served_context",
    "working_folder",
]


@dataclass(frozen=True)
class RevisionSpec:
    """What a revision asks an engine to serve. The API key is only ever named here."""

    engine: str
    version: str
    model: ModelRef
    knobs: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    served_name: str = ""
    port: int = 8080
    api_key_secret: str = ""
    hf_token_secret: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (the agent's order carries it)."""
        values = dataclasses.asdict(self)
        values["knobs"], values["env"] = dict(self.knobs), dict(self.env)
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RevisionSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        model = values.get("model")
        model_names = {f.name for f in dataclasses.fields(ModelRef)}
        values["model"] = ModelRef(**{k: v for k, v in (model or {}).items() if k in model_names})
        values["knobs"] = dict(values.get("knobs") or {})
        values["env"] = {str(k): str(v) for k, v in (values.get("env") or {}).items()}
        return cls(**values)


@dataclass(frozen=True)
class HostFacts:
    """What only the host knows about running a spec there."""

    bind_host: str = "127.0.0.1"  # where engines listen (the agent's CONTROLPANEL_ENGINE_BIND_HOST)
    reachable_address: str = ""  # where clients reach them ("" = not known)
    binary: str | None = None  # the installed executable (None: the engine's bare name)
    local_weights: str | None = None  # the host's downloaded copy of the model
    model_dirs: tuple[str, ...] = ()
    gpu_indices: tuple[int, ...] = ()

    @property
    def reachable_from_elsewhere(self) -> bool:
        """Clients on other machines can reach this address: set, and not refused by the one
        loopback rule (serving.binds.address_refusal: loopback, unspecified, link-local in any
        spelling)."""
        return not address_refusal(self.reachable_address)


def engine_config(spec: RevisionSpec, facts: HostFacts, *, api_key: str | None = None) -> EngineConfig:
    """The engine contract for `spec` on a host with `facts`. `api_key` is the resolved secret
    (the agent only); without it a named secret appears as MASK, where the engine takes it."""
    adapter = get_adapter(spec.engine)
    key = api_key if api_key is not None else (MASK if spec.api_key_secret else None)
    return EngineConfig(
        engine=spec.engine,
        engine_version=spec.version,
        model=adapter.model_reference(spec.model, facts.local_weights),
        served_name=spec.served_name,
        host=facts.bind_host,
        port=spec.port,
        knobs=adapter.launch_knobs(spec.knobs, spec.model),
        env=dict(spec.env),
        api_key=key or None,
        binary=facts.binary,
        gpu_indices=tuple(facts.gpu_indices),
    )


def served_context(spec: RevisionSpec, *, planned: int | None = None) -> ServedContext:
    """The context one request can use, as the engine reads the spec's knobs."""
    adapter = get_adapter(spec.engine)
    knobs = adapter.launch_knobs(spec.knobs, spec.model)
    return adapter.served_context(ContextInputs(knobs, spec.model.native_context, spec.env, planned))


def working_folder(model_dirs: Sequence[str], *, is_dir: Callable[[str], bool] = lambda _folder: True) -> str | None:
    """Where the engine runs, so a bare file name (`--chat-template-file gemma3.jinja`) is read
    there: the first of the host's model folders that `is_dir` (the agent checks its disk; the
    panel takes the folders as the host reported them). None when there is none."""
    return next((d for d in model_dirs if d and is_dir(d)), None)


def launch(spec: RevisionSpec, facts: HostFacts, *, api_key: str | None = None) -> LaunchSpec:
    """The process the host runs for `spec`: argv, env, port, URLs, served name and context,
    run from the host's working folder (`working_folder`, so the start script and the unit read
    a bare file name where the agent's own start does). EngineConfigError (naming the field)
    when the engine would refuse the spec."""
    config = engine_config(spec, facts, api_key=api_key)
    made = get_adapter(spec.engine).launch_spec(config)
    return dataclasses.replace(
        made,
        served_context=served_context(spec).per_sequence,
        cwd=working_folder(facts.model_dirs),
        purpose=spec.model.purpose,
    )


# --- a new revision from an old one -------------------------------------------------------------

SPEC_FIELDS = ("engine", "version", "model", "knobs", "env", "served_name", "port", "api_key_secret", "hf_token_secret")


def derive(parent: RevisionSpec | None, changes: Mapping[str, Any]) -> RevisionSpec:
    """The spec of a new revision made from `parent` with `changes` (the web form, the API and
    the CLI all make one this way):

    - a field given in `changes` replaces the parent's (None = not given);
    - `set` changes single knobs on top ({knob: None} removes one); `set_env` likewise for env;
    - a different engine starts from no knobs and the engine's latest version (the parent's
      knobs and version are another engine's), but keeps env, served name, secrets and port
      unless they are given;
    - without a parent, `engine` and `model` are required (EngineConfigError naming them).
    """
    given = {k: v for k, v in changes.items() if v is not None}
    unknown = set(given) - set(SPEC_FIELDS) - {"set", "set_env"}
    if unknown:
        raise EngineConfigError(f"cannot derive a revision from {', '.join(sorted(unknown))}", field=min(unknown))
    if parent is None:
        missing = [name for name in ("engine", "model") if name not in given]
        if missing:
            raise EngineConfigError(
                f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} needed for a host's first revision",
                field=missing[0],
            )
        parent = RevisionSpec(engine=str(given["engine"]), version="", model=given["model"])
    engine = str(given.get("engine", parent.engine))
    same_engine = engine == parent.engine
    knobs = dict(given["knobs"]) if "knobs" in given else (dict(parent.knobs) if same_engine else {})
    for name, value in (changes.get("set") or {}).items():
        if value is None:
            knobs.pop(name, None)
        else:
            knobs[name] = value
    env = dict(given["env"]) if "env" in given else dict(parent.env)
    for name, value in (changes.get("set_env") or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return RevisionSpec(
        engine=engine,
        version=str(given.get("version", parent.version if same_engine else "")),
        model=given.get("model", parent.model),
        knobs=knobs,
        env=env,
        served_name=str(given.get("served_name", parent.served_name)),
        port=given.get("port", parent.port),
        api_key_secret=str(given.get("api_key_secret", parent.api_key_secret)),
        hf_token_secret=str(given.get("hf_token_secret", parent.hf_token_secret)),
    )
