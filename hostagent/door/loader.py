"""The agent's Loader for the front door: an on-demand revision loads through the path a switch
takes (its launch made into a LaunchSpec on this host, the host's preflight, the supervisor's
launch and health gate), in a supervisor of its own (state folder <state>/ondemand/r<id>: record,
log, starts journal), on the port the door gave it; an unload stops it gracefully (SIGTERM to its
group, SIGKILL after the grace period). The host's pinned revision is the one the host's own
supervisor runs (switched by the panel's operations): the door proxies to it, `load` only waits
for it to be healthy, and nothing here starts or stops it.

A load's error is shown to the clients that waited: it names the revision and the reason (a
preflight check, the engine's exit), never the engine's key or command line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostagent.launch import launch_installs, launch_spec
from hostagent.preflight import host_preflight
from hostagent.runtime.errors import HostRuntimeError
from hostagent.runtime.supervisor import Supervisor
from serving.engines.base import EngineConfigError

__all__ = ["AgentLoader", "LoadError", "Served"]

log = logging.getLogger("controlpanel.agent")


class LoadError(RuntimeError):
    """Why a revision could not be loaded, in words for the clients that waited."""


@dataclass(frozen=True)
class Served:
    """One model of the door's table as the loader sees it."""

    name: str
    revision_id: str
    label: str
    launch: dict[str, Any] = field(repr=False)  # with the port the door gave it; holds the engine's key
    pinned: bool = False  # the host's active revision: the host supervisor's engine


class AgentLoader:
    PINNED_WAIT_S = 900.0  # how long a request may wait for the host's pinned engine to be healthy
    STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL after this
    POLL_S = 0.2

    def __init__(self, supervisor: Supervisor, root: Path, *, gpus: bool, ready_timeout: float = 900.0) -> None:
        self.supervisor = supervisor  # the host's own: the pinned revision's
        self.root, self.gpus, self.ready_timeout = root, gpus, ready_timeout
        self.served: dict[str, Served] = {}
        self.claimed: set[str] = set()  # revisions a switch is taking over: the supervisor's from now on
        self._started: dict[str, str] = {}  # model name -> revision id of the engines this loader runs

    def update(self, served: Mapping[str, Served]) -> None:
        """The table's models from now on (on the door's event loop, with the table)."""
        self.served = dict(served)

    def supervisor_of(self, revision_id: str) -> Supervisor:
        return Supervisor(self.root / f"r{revision_id}", stop_grace=self.STOP_GRACE_S)

    def started(self, revision_id: str) -> str | None:
        """The model name of this loader's engine of `revision_id`, if it started one."""
        return next((name for name, rev in self._started.items() if rev == revision_id), None)

    def engines(self, loaded: set[str]) -> dict[str, Supervisor]:
        """The supervisor of each loaded model's engine: the host's for the pinned revision."""
        sups = {}
        for name in loaded:
            served = self.served.get(name)
            if served is not None and (served.pinned or self._active(served.revision_id)):
                sups[name] = self.supervisor
            elif name in self._started:
                sups[name] = self.supervisor_of(self._started[name])
        return sups

    def exited(self, loaded: set[str]) -> list[str]:
        """Loaded models whose engine is gone: one this loader started that died (crash, OOM
        kill), or the pinned revision when the host's supervisor no longer runs it (Stop)."""
        gone = [name for name, rev in self._started.items() if not self.supervisor_of(rev).status().running]
        status = self.supervisor.status()
        for name in loaded - set(self._started):
            served = self.served.get(name)
            if (
                served is not None
                and served.pinned
                and not (status.running and status.revision_id == served.revision_id)
            ):
                gone.append(name)
        return gone

    def running(self) -> set[str]:
        """The models whose engines this loader started and that still run."""
        return {name for name, rev in self._started.items() if self.supervisor_of(rev).status().running}

    # -- the Loader protocol --------------------------------------------------------------------

    async def load(self, name: str) -> None:
        served = self.served.get(name)
        if served is None:
            raise LoadError(f"`{name}` is not served by this host any more")
        if served.pinned or served.revision_id in self.claimed or self._active(served.revision_id):
            await asyncio.to_thread(self._wait_pinned, served)
            return
        await asyncio.to_thread(self._start, served)
        self._started[name] = served.revision_id

    async def unload(self, name: str) -> None:
        revision_id = self._started.pop(name, None)
        if revision_id is None or self._active(revision_id):
            return  # not ours to stop: the host's pinned engine is the panel's switch's business
        await asyncio.to_thread(self.supervisor_of(revision_id).stop)

    async def close(self) -> None:
        """Stop every engine this loader started (the agent is stopping)."""
        for name in list(self._started):
            await self.unload(name)

    # -- work, in a thread ------------------------------------------------------------------------

    def _active(self, revision_id: str) -> bool:
        record = self.supervisor.state.read_engine()
        return record is not None and record.revision_id == revision_id

    def _wait_pinned(self, served: Served) -> None:
        """Return once the host's supervisor serves `served` and it answers its health check."""
        deadline = time.monotonic() + self.PINNED_WAIT_S
        while True:
            status = self.supervisor.status(probe=True)
            mine = status.running and status.revision_id == served.revision_id
            if mine and status.healthy:
                return
            if not mine and served.revision_id not in self.claimed:  # a switch to it may still start it
                now = status.revision_label if status.running else "nothing"
                raise LoadError(
                    f"`{served.name}` is this host's pinned revision {served.label}, which its engine supervisor "
                    f"runs; it runs {now} now: start or switch to {served.label} from the panel"
                )
            if time.monotonic() >= deadline:
                raise LoadError(f"{served.label}'s engine is not healthy after {self.PINNED_WAIT_S:g} s")
            time.sleep(self.POLL_S)

    def _start(self, served: Served) -> None:
        sup = self.supervisor_of(served.revision_id)
        status = sup.status(probe=True)
        if status.running and status.revision_id == served.revision_id and status.healthy:
            return
        try:
            spec = launch_spec(served.launch)
        except (HostRuntimeError, EngineConfigError) as exc:
            raise LoadError(f"{served.label} was refused on this host: {getattr(exc, 'reason', None) or exc}") from exc
        installs = launch_installs(served.launch)
        checks = host_preflight(served.launch, spec, sup, installs=installs, cpu_only=not self.gpus)
        failed = [check.message for check in checks if check.failed]
        if failed:
            raise LoadError(f"{served.label} was refused before it started: {' '.join(failed)}")
        t0 = time.monotonic()
        try:
            sup.start(
                spec,
                revision_label=served.label,
                revision_id=served.revision_id,
                ready_timeout=self.ready_timeout,
                verify=False,  # the waiting requests are the first ones; the health gate is /health and the name
            )
        except HostRuntimeError as exc:
            raise LoadError(f"{served.label} did not come up: {getattr(exc, 'reason', None) or exc}") from exc
        finally:
            sup.forget_secrets()
        log.info("front door: %s (%s) loaded in %.1f s", served.name, served.label, time.monotonic() - t0)

    def stop_leftovers(self) -> list[str]:
        """Stop on-demand engines a previous agent left running (killed before it could stop
        them): the door starts knowing nothing loaded, so they would hold memory unrouted."""
        stopped = []
        for folder in sorted(self.root.glob("r*")) if self.root.is_dir() else []:
            result = Supervisor(folder, stop_grace=self.STOP_GRACE_S).stop()
            if result.was_running:
                stopped.append(result.revision_label or folder.name)
        if stopped:
            log.warning("front door: stopped on-demand engines left running: %s", ", ".join(stopped))
        return stopped
