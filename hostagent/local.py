"""This host's own things: its engine supervisor and state folder, its model folders, and
the engine state it reports. Read from the agent's settings (the host's environment)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict

from django.conf import settings

from hostagent.runtime.confine import install_dirs_from_env, model_dirs_from_env
from hostagent.runtime.supervisor import Supervisor

from .binaries import carried_executable, worker_llama_build


def state_dir(host_name: str) -> Path:
    return Path(settings.HOST_STATE_DIR) / host_name


def supervisor_for(host_name: str) -> Supervisor:
    return Supervisor(state_dir(host_name))


def host_model_dirs() -> list[str]:
    return model_dirs_from_env(os.environ, data_dir=str(settings.DATA_DIR))


def host_install_dirs() -> list[str]:
    """The folders an install may read a wheelhouse or a source checkout from (none by default)."""
    return install_dirs_from_env(os.environ)


class EngineState(TypedDict):
    """What this host's engine is doing, as the agent reports it (register, heartbeat): the panel
    stores and shows it as reported."""

    running: bool
    phase: str
    engine: str | None
    revision_id: str | None
    revision_label: str | None
    served_name: str | None
    port: int | None
    pid: int | None
    healthy: bool | None
    health: str  # healthy | starting | unhealthy
    started_at: str | None
    watchdog_paused: bool
    bind_host: str
    carried: dict[str, str]  # engine -> the build the worker carries itself
    carried_executables: dict[str, str]  # engine -> that build's executable


def engine_state(sup: Supervisor) -> EngineState:
    status = sup.status(probe=True)
    return {
        "running": status.running,
        "phase": status.phase,
        "engine": status.engine,
        "revision_id": status.revision_id,
        "revision_label": status.revision_label,
        "served_name": status.served_name,
        "port": status.port,
        "pid": status.pid,
        "healthy": status.healthy,
        "health": "healthy" if status.healthy else ("starting" if status.phase == "starting" else "unhealthy"),
        "started_at": status.started_at,
        "watchdog_paused": status.watchdog_paused,
        "bind_host": settings.ENGINE_BIND_HOST,  # so pages show the command line this host really runs
        # Engine builds the host's worker carries itself (not installed by the panel), which a
        # revision at "latest" runs when nothing is installed: the panel shows them.
        "carried": {"llama.cpp": build} if (build := worker_llama_build()) else {},
        # ...and where those builds' executables are, so the pages show the command it really runs.
        "carried_executables": {"llama.cpp": path} if build and (path := carried_executable("llama.cpp")) else {},
    }
