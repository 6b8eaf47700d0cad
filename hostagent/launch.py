"""A revision's launch on this host: the panel's plain launch (engine config with its API
key) made into a LaunchSpec with this host's executable, bind address and model folders."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.conf import settings

from hostagent.runtime.confine import confine, working_folder
from serving.engines.base import EngineConfig, EngineConfigError, LaunchSpec
from serving.engines.registry import get_adapter
from serving.launch import HostFacts, RevisionSpec, engine_config
from serving.launch import launch as serving_launch

from .binaries import resolve_binary
from .local import host_model_dirs

CONFIG_FIELDS = {"engine", "engine_version", "model", "served_name", "port", "knobs", "env", "api_key"}


def launch_spec(launch: dict[str, Any], *, installs: dict[str, Any] | None = None) -> LaunchSpec:
    """The LaunchSpec of `launch`, confined to this host's model folders (raises
    PathOutsideModelFolders before anything starts) and run from the first one, so a bare
    file name is read there. The panel's serving spec (`launch["spec"]`) goes through the same
    serving.launch.launch the panel's pages call, with this host's facts: its bind address,
    executable, copy of the weights and model folders. Raises EngineConfigError when the
    panel could not complete it (a secret it names is not set)."""
    if launch.get("error"):
        raise EngineConfigError(str(launch["error"]))
    values = {k: v for k, v in (launch.get("config") or {}).items() if k in CONFIG_FIELDS}
    engine = str(values.get("engine") or launch["engine"])
    version = str(values.get("engine_version") or "")
    installs = installs if installs is not None else launch.get("installs") or {}
    binary = resolve_binary(engine, version, installs=installs)
    model_dirs = host_model_dirs()
    if isinstance(launch.get("spec"), dict):
        facts = HostFacts(
            bind_host=settings.ENGINE_BIND_HOST,
            binary=binary,
            local_weights=launch.get("local_weights") or None,
            model_dirs=tuple(model_dirs),
        )
        spec = RevisionSpec.from_dict(launch["spec"])
        config = engine_config(spec, facts, api_key=values.get("api_key") or "")
        made = serving_launch(spec, facts, api_key=values.get("api_key") or "")
    else:  # a panel from before the serving spec: its engine config as it sent it
        config = EngineConfig(**values, host=settings.ENGINE_BIND_HOST, binary=binary)
        made = get_adapter(engine).launch_spec(config)
    cwd = working_folder(model_dirs)
    paths = [(c.field, c.path) for c in get_adapter(engine).concerns(config) if c.kind == "path"]
    confine(paths, model_dirs, cwd=cwd)
    return dataclasses.replace(made, cwd=cwd)


def launch_port(launch: dict[str, Any]) -> int:
    """The port a revision's launch asks its engine to listen on."""
    return int((launch.get("config") or {}).get("port") or 0)


def launch_installs(launch: dict[str, Any]) -> dict[str, Any]:
    installs = launch.get("installs")
    return installs if isinstance(installs, dict) else {}


def launch_revision(launch: dict[str, Any]) -> tuple[str, str]:
    """(revision id, label such as "r12") of a launch."""
    return str(launch.get("id") or ""), str(launch.get("label") or f"r{launch.get('number', '?')}")


def launch_engine(launch: dict[str, Any]) -> str:
    """The engine a launch runs ("llama.cpp", "vllm", ...; "" when it does not say)."""
    return str((launch.get("config") or {}).get("engine") or launch.get("engine") or "")


def launch_api_key(launch: dict[str, Any]) -> str | None:
    """The engine's own API key, which the front door sends upstream and clients never see."""
    return (launch.get("config") or {}).get("api_key") or None
