"""Shared by every host operation: progress reporting, the host's supervisor, launch specs, engine state."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from deployments.engines.base import LaunchSpec
from deployments.engines.registry import get_adapter
from deployments.models import DeploymentRevision, Operation
from deployments.runtime_bridge import engine_config_for_revision
from deployments.services.operations import operation_progress
from hardware.runtime.confine import confine, model_dirs_from_env, working_folder
from hardware.runtime.supervisor import Supervisor

from .binaries import resolve_binary, worker_llama_build


class Reporter:
    """Progress for one operation: stage, fraction and log lines, through the service."""

    def __init__(self, op: Operation, *, start: float = 0.0, span: float = 1.0) -> None:
        self.op = op
        self.start = start
        self.span = span
        self.cancel_requested = False

    def __call__(self, stage: str, fraction: float, message: str) -> None:
        self.cancel_requested = operation_progress(
            op_id=self.op.pk, stage=stage, progress=self.start + self.span * fraction, log=f"[{stage}] {message}"
        )

    def log(self, message: str) -> None:
        self.cancel_requested = operation_progress(op_id=self.op.pk, log=message)

    def scaled(self, start: float, span: float) -> Reporter:
        return Reporter(self.op, start=start, span=span)


def state_dir(host_name: str) -> Path:
    return Path(settings.HOST_STATE_DIR) / host_name


def supervisor_for(host_name: str) -> Supervisor:
    return Supervisor(state_dir(host_name))


def host_model_dirs() -> list[str]:
    return model_dirs_from_env(os.environ, data_dir=str(settings.DATA_DIR))


def launch_spec_for(revision: DeploymentRevision) -> LaunchSpec:
    """The launch of `revision` on this host, with its secrets, confined to this host's model
    folders (raises PathOutsideModelFolders before anything starts) and run from the first
    one, so a bare file name is read there."""
    config = engine_config_for_revision(
        revision,
        bind_host=settings.ENGINE_BIND_HOST,
        resolve_secrets=True,
        binary=resolve_binary(revision.engine, revision.engine_version, installs=revision.host.engine_installs),
    )
    adapter = get_adapter(revision.engine)
    model_dirs = host_model_dirs()
    cwd = working_folder(model_dirs)
    paths = [(c.field, c.path) for c in adapter.concerns(config) if c.kind == "path"]
    confine(paths, model_dirs, cwd=cwd)
    return dataclasses.replace(adapter.launch_spec(config), cwd=cwd)


def engine_state(sup: Supervisor) -> dict[str, Any]:
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
    }
