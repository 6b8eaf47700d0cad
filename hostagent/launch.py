"""A revision's launch on this host: the panel's RevisionLaunch (serving.wire) run as
`serving.launch.launch(launch.spec, this host's HostFacts, api_key=launch.api_key)`, confined to
this host's model folders."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from hostagent.runtime.confine import confine, working_folder
from serving.engines.base import EngineConfigError, LaunchSpec
from serving.engines.registry import get_adapter
from serving.launch import HostFacts, engine_config
from serving.launch import launch as serving_launch
from serving.wire import RevisionLaunch

from .binaries import Installs, resolve_binary
from .context import current_or_none
from .local import host_model_dirs


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
