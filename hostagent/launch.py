"""A revision's launch on this host: the panel's RevisionLaunch (serving.wire) run as
`serving.launch.launch(launch.spec, this host's HostFacts, api_key=launch.api_key)`, confined to
this host's model folders."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from hostagent.frontdoor.table import TableError
from hostagent.runtime.confine import confine, working_folder
from serving.engines.base import EngineConfigError, LaunchSpec
from serving.engines.registry import get_adapter
from serving.launch import HostFacts, engine_config
from serving.launch import launch as serving_launch
from serving.wire import RevisionLaunch, WireError

from .binaries import resolve_binary
from .context import current_or_none
from .local import host_model_dirs

Installs = Mapping[str, Any]  # the host's engine installs as the panel recorded them (HostBrief.engine_installs)


def as_launch(launch: RevisionLaunch | Mapping[str, Any]) -> RevisionLaunch:
    """`launch` as the typed value (RevisionLaunch.from_dict of the plain JSON; WireError when it
    breaks the shape)."""
    return launch if isinstance(launch, RevisionLaunch) else RevisionLaunch.from_dict(launch)


def known_installs() -> Installs:
    """The installs the running agent last heard of from the panel ({} outside an agent)."""
    ctx = current_or_none()
    return ctx.installs if ctx is not None else {}


def host_facts(launch: RevisionLaunch, *, installs: Installs | None = None) -> HostFacts:
    """This host's facts for `launch`: its bind address, the executable of the engine version it
    installed, its copy of the weights and its model folders."""
    installs = known_installs() if installs is None else installs
    return HostFacts(
        bind_host=settings.ENGINE_BIND_HOST,
        binary=resolve_binary(launch.engine, launch.spec.version, installs=dict(installs)),
        local_weights=launch.local_weights,
        model_dirs=tuple(host_model_dirs()),
    )


def launch_spec(launch: RevisionLaunch | Mapping[str, Any], *, installs: Installs | None = None) -> LaunchSpec:
    """The LaunchSpec of `launch`, confined to this host's model folders (raises
    PathOutsideModelFolders before anything starts) and run from the first one that exists, so
    a bare file name is read there. Raises EngineConfigError when the panel could not complete
    the launch (`launch.error`: a secret it names is not set) or the engine refuses the spec."""
    launch = as_launch(launch)
    if launch.error:
        raise EngineConfigError(launch.error)
    facts = host_facts(launch, installs=installs)
    # "" when the panel sent no key: None would stand the secret's MASK in for it.
    api_key = launch.api_key or ""
    made = serving_launch(launch.spec, facts, api_key=api_key)
    cwd = working_folder(facts.model_dirs)
    concerns = get_adapter(launch.engine).concerns(engine_config(launch.spec, facts, api_key=api_key))
    confine([(c.field, c.path) for c in concerns if c.kind == "path"], facts.model_dirs, cwd=cwd)
    return dataclasses.replace(made, cwd=cwd)


# The front door's table (hostagent.door) reads a launch through these until it holds the
# RevisionLaunch itself; each takes the typed value or its plain JSON, and a launch that breaks
# the shape refuses the table (TableError, naming the field).


def _door_launch(launch: RevisionLaunch | Mapping[str, Any]) -> RevisionLaunch:
    try:
        return as_launch(launch)
    except WireError as exc:
        raise TableError(str(exc)) from exc


def launch_port(launch: RevisionLaunch | Mapping[str, Any]) -> int:
    """The port a revision's launch asks its engine to listen on."""
    return _door_launch(launch).port


def launch_installs(launch: RevisionLaunch | Mapping[str, Any]) -> dict[str, Any]:
    """The host's installs to resolve `launch`'s engine with (the agent's, not the launch's)."""
    return dict(known_installs())


def launch_revision(launch: RevisionLaunch | Mapping[str, Any]) -> tuple[str, str]:
    """(revision id, label such as "r12") of a launch."""
    typed = _door_launch(launch)
    return str(typed.id), typed.label


def launch_engine(launch: RevisionLaunch | Mapping[str, Any]) -> str:
    """The engine a launch runs ("llama.cpp", "vllm", ...)."""
    return _door_launch(launch).engine


def launch_api_key(launch: RevisionLaunch | Mapping[str, Any]) -> str | None:
    """The engine's own API key, which the front door sends upstream and clients never see."""
    return _door_launch(launch).api_key
