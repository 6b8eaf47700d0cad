"""Engine installs: the adapter's steps into HOST_STATE_DIR/venvs/<engine>-<version>, every
output line streamed into the operation's log, progress = step/steps, cancel through the
panel's answer; then the version read back from the venv goes to the panel with the end.

A wheelhouse or a source folder is read only from this host's own install folders
(CONTROLPANEL_INSTALL_DIRS), resolved here with symlinks followed: the panel checked the
name as text, the host checks what it really is, whatever the order says."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from hostagent.binaries import install_dir, installed_binary, installs_root
from hostagent.context import AgentContext
from hostagent.install_progress import BuildProgress, compiling_stage
from hostagent.local import host_install_dirs
from hostagent.panel import PanelPort
from hostagent.runtime.confine import confine_install_folder
from hostagent.runtime.errors import HostRuntimeError
from hostagent.runtime.installs import (
    install_pinned,
    stop_leftover_steps,
    venv_package_versions,
    venv_python,
)
from hostagent.runtime.installs import run_install as run_steps
from serving.agent_reports import InstallDetails, InstallRecord
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter, install_key, venv_packages
from serving.wire import Order

from .outcome import Cancelled, Outcome, Refused


def running_steps_dir() -> Path:
    """Where the install step that runs now is noted (hostagent.runtime.installs)."""
    return Path(settings.HOST_STATE_DIR) / "installs" / "running"


def stop_leftover_installs() -> list[str]:
    """At the agent's start: stop the install steps its previous run left running (a compile
    would go on with nobody to read it); the panel marks their operations lost."""
    return stop_leftover_steps(running_steps_dir())


class _LogStream:
    """Install output into the operation: lines batched at most FLUSH_S apart (one report per
    pip or compiler line would be thousands), stage "step i/n: ..." with progress (i-1)/n, and
    each flush answers whether a cancel was asked for. A step whose lines say how far its
    compile is (hostagent.install_progress) reports that fraction instead, as "compiling: 42 %
    (step i/n: ...)": the compile is nearly all of the install's time, and the panel's estimate
    of the time left reads it."""

    FLUSH_S = 0.5

    def __init__(self, panel: PanelPort, op_id: str) -> None:
        self.panel = panel
        self.op_id = op_id
        self.pending: list[str] = []
        self.flushed = time.monotonic()
        self.cancel = False
        self.stage: str | None = None
        self.step_stage: str | None = None
        self.progress = 0.0
        self.build = BuildProgress()

    def flush(self) -> None:
        text = "\n".join(self.pending) if self.pending else None
        self.pending.clear()
        self.flushed = time.monotonic()
        self.cancel = self.panel.progress(self.op_id, stage=self.stage, progress=self.progress, log=text)

    def line(self, p: Any) -> None:  # hostagent.runtime.installs.InstallProgress
        step_stage = f"step {p.step}/{p.steps}: {p.description}"
        if step_stage != self.step_stage:
            if self.pending:
                self.flush()
            self.step_stage, self.build = step_stage, BuildProgress()
            self.stage, self.progress = step_stage, (p.step - 1) / p.steps
        fraction = self.build.feed(p.line)
        if fraction is not None:
            self.stage, self.progress = compiling_stage(fraction, step_stage), fraction
        self.pending.append(p.line)
        if time.monotonic() - self.flushed >= self.FLUSH_S:
            self.flush()

    def cancelled(self) -> bool:
        if time.monotonic() - self.flushed >= self.FLUSH_S:
            self.flush()
        return self.cancel


def _confined(wheelhouse: Any, source_dir: Any) -> tuple[str | None, str | None]:
    """The real paths of the folders an install reads, each inside this host's install folders
    (PathOutsideInstallFolders otherwise)."""
    folders: dict[str, str | None] = {}
    for field, value in (("wheelhouse", wheelhouse), ("source_dir", source_dir)):
        if value in (None, ""):
            folders[field] = None
        elif not isinstance(value, str):
            raise HostRuntimeError(f"{field}: not a path")
        else:
            folders[field] = confine_install_folder(field, value, host_install_dirs())
    return folders["wheelhouse"], folders["source_dir"]


@dataclass(frozen=True)
class InstallParams:
    """An install order's parameters (deployments' install request): the engine, its version
    ("" = the newest), and the folders it may read from, as the panel checked them as text."""

    engine: str
    version: str = ""
    source_dir: Any = None
    wheelhouse: Any = None
    cuda: bool = False
    existing: Any = None  # a venv already on the host to record as the install (nothing is installed)

    @classmethod
    def of(cls, order: Order) -> InstallParams:
        params = order.params
        engine, version = params.get("engine"), params.get("version") or ""
        if not isinstance(engine, str) or not engine or not isinstance(version, str):
            raise Refused("This host refuses the install: the order names no engine and version.")
        return cls(
            engine,
            version,
            params.get("source_dir"),
            params.get("wheelhouse"),
            bool(params.get("cuda")),
            params.get("existing"),
        )


def _planned_packages(engine: str, venv: str | Path) -> dict[str, str | None] | None:
    """{distribution: version, or None where the venv has none} for the distributions of the
    engine's venv the planner reads (registry.venv_packages: transformers, vllm-gguf-plugin for
    vLLM), recorded with the install so that its plans judge what the venv holds; None when the
    planner reads none, or the venv could not be read."""
    names = venv_packages(engine)
    return venv_package_versions(venv, names) if names else None


def run_install(ctx: AgentContext, order: Order) -> Outcome:
    op_id, panel, params = order.id, ctx.panel, InstallParams.of(order)
    if params.existing not in (None, ""):
        return adopt_existing(ctx, order, params)
    engine, version = params.engine, params.version
    adapter = get_adapter(engine)
    key = install_key(version)
    target = install_dir(engine, key)
    try:
        wheelhouse, source_dir = _confined(params.wheelhouse, params.source_dir)
    except HostRuntimeError as exc:
        raise Refused(f"This host refuses the install: {exc.reason}") from exc
    try:
        steps = adapter.install_steps(
            version,
            venv_dir=str(target),
            python=sys.executable,  # the agent's interpreter: a venv of it always has venv and pip
            wheelhouse=wheelhouse,
            source_dir=source_dir,
            cuda=params.cuda,
        )
    except EngineConfigError as exc:
        raise Refused(f"This host refuses the install: {exc}") from exc
    log_path = Path(settings.HOST_STATE_DIR) / "installs" / f"{engine}-{key}-{op_id}.log"
    if panel.progress(op_id):
        raise Cancelled("Cancelled before the install started.")

    stream = _LogStream(panel, op_id)
    distribution = adapter.install_distribution(source_dir=source_dir)
    what = f"{engine} {version or '(latest)'}"
    panel.progress(op_id, stage="installing", progress=0.0, log=f"installing {what} into {target}")
    if distribution:
        result = install_pinned(
            steps,
            target,
            distribution,
            log_path=log_path,
            expected=lambda found: adapter.version_from_distribution(found) == version,
            on_line=stream.line,
            cancelled=stream.cancelled,
            running_dir=running_steps_dir(),
        )
    else:
        result = run_steps(
            steps, log_path=log_path, on_line=stream.line, cancelled=stream.cancelled, running_dir=running_steps_dir()
        )
    stream.flush()
    summary: dict[str, Any] = {
        "engine": engine,
        "version": key,
        "path": str(source_dir or target),
        "steps": result.steps,
        "steps_done": result.steps_done,
        "seconds": round(result.seconds, 1),
        "log_path": result.log_path,
    }
    if result.cancelled:
        raise Cancelled(result.reason, result=summary)
    if not result.ok:
        tail = "\n".join(result.log_tail[-20:])
        summary.update(reason=result.reason, log_tail=result.log_tail)
        return Outcome.failed(f"Install of {what} failed: {result.reason}\n--- log tail ---\n{tail}", summary)
    installed = adapter.version_from_distribution(result.version) if result.version else version
    path = str(source_dir or target)
    binary = installed_binary(engine, path) or ""
    details = InstallDetails(
        distribution=distribution or "",
        package_version=(result.version or "") if distribution else "",
        packages=_planned_packages(engine, target) if distribution else None,
        source_dir=str(source_dir or ""),
    )
    if not binary and not adapter.installs_system_wide:
        summary["reason"] = f"the install finished but no {engine} executable was found in {path}"
        return Outcome.failed(summary["reason"], summary)
    panel.progress(op_id, stage="installed", progress=1.0, log=f"{engine} {installed or '(latest)'} at {path}")
    summary.update(version=install_key(installed), binary=binary, **details.to_dict())
    return Outcome.succeeded(summary, install=InstallRecord(engine, installed or "", path, binary, details))


def adopt_existing(ctx: AgentContext, order: Order, params: InstallParams) -> Outcome:
    """Record a venv already on this host (inside its install folders, or one the panel installed
    here: read again after a `pip install` into it) as the engine's install: nothing is installed;
    the venv's own Python says which of the engine's distributions it holds and at which version
    (the order's version, when it names one, must be that one), and the executable is the one that
    distribution runs."""
    adapter = get_adapter(params.engine)
    if not isinstance(params.existing, str):
        raise Refused("This host refuses the install: existing: not a path")
    try:
        folder = confine_install_folder("existing", params.existing, [*host_install_dirs(), str(installs_root())])
    except HostRuntimeError as exc:
        raise Refused(f"This host refuses the install: {exc.reason}") from exc
    own = adapter.install_distribution()
    distributions = [d for d in (own, *adapter.other_distributions) if d]
    if not distributions or not venv_python(folder).is_file():
        raise Refused(f"This host refuses the install: {folder} is not a Python venv holding {params.engine}.")
    ctx.panel.progress(order.id, stage="reading the venv", progress=0.0, log=f"reading {params.engine} in {folder}")
    # One run of the venv's Python reads the engine's distributions and the packages the planner reads.
    planned = venv_packages(params.engine)
    read = venv_package_versions(folder, [*distributions, *planned]) or {}
    found = next(((d, v) for d in distributions if (v := read.get(d))), None)
    if found is None:
        return Outcome.failed(f"{folder} holds none of {', '.join(distributions)}: no {params.engine} to record.", {})
    distribution, package_version = found
    installed = adapter.version_from_distribution(package_version)
    if params.version and installed != params.version:
        return Outcome.failed(
            f"{folder} holds {distribution} {package_version}, not {params.engine} {params.version}.", {}
        )
    inside = adapter.other_distributions.get(distribution)
    binary = str(Path(folder) / inside) if inside else installed_binary(params.engine, folder) or ""
    if not binary or not Path(binary).is_file():
        return Outcome.failed(f"{folder} holds {distribution} {package_version} but no {params.engine} executable.", {})
    details = InstallDetails(
        distribution=distribution,
        package_version=package_version,
        packages={name: read.get(name) for name in planned} if planned else None,
        adopted=True,
    )
    ctx.panel.progress(
        order.id, stage="installed", progress=1.0, log=f"{params.engine} {installed} at {folder} runs {binary}"
    )
    summary = {"engine": params.engine, "version": install_key(installed), "path": folder, "binary": binary}
    summary.update(details.to_dict())
    return Outcome.succeeded(summary, install=InstallRecord(params.engine, installed or "", folder, binary, details))
