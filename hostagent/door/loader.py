"""The agent's Loader for the front door: an on-demand revision loads through the path a switch
takes (its launch made into a LaunchSpec on this host, the host's preflight, the supervisor's
launch and health gate), in a supervisor of its own (state folder <state>/ondemand/r<id>: record,
log, starts journal), on the port the door gave it; an unload stops it gracefully (SIGTERM to its
group, SIGKILL after the grace period). The host's pinned revision is the one the host's own
supervisor runs (switched by the panel's operations): the door proxies to it, `load` only waits
for it to be healthy, and nothing here starts or stops it. While the panel relaunches it (the agent
started and the panel queued a start of its active revision: `relaunching`), a load of it waits
for that start as it waits for a switch, instead of saying that nothing runs.

A load's error is shown to the clients that waited: it names the revision and the reason (a
preflight check, the engine's exit), never the engine's key or command line.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostagent.frontdoor.scheduler import NotYet
from hostagent.launch import launch_spec
from hostagent.preflight import host_preflight
from hostagent.runtime.errors import HostRuntimeError
from hostagent.runtime.supervisor import Supervisor
from hostagent.runtime.watchdog import Watchdog
from serving.engines.base import EngineConfigError
from serving.wire import RevisionLaunch

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
    launch: RevisionLaunch = field(repr=False)  # holds the engine's key
    pinned: bool = False  # the host's active revision: the host supervisor's engine


class AgentLoader:
    STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL after this

    def __init__(self, supervisor: Supervisor, root: Path, *, gpus: bool, ready_timeout: float = 900.0) -> None:
        self.supervisor = supervisor  # the host's own: the pinned revision's
        self.root, self.gpus, self.ready_timeout = root, gpus, ready_timeout
        self.served: dict[str, Served] = {}
        self.installs: Mapping[str, Any] = {}  # the host's engine installs as the panel's document says
        self.claimed: set[str] = set()  # revisions a switch is taking over: the supervisor's from now on
        # The pinned revision a switch replaces -> None while the switch runs, then the monotonic
        # time until which requests for it still wait for the panel's new table (a rollback
        # serves it again at once).
        self.leaving: dict[str, float | None] = {}
        # The revision the panel queued a start of when the agent registered (its engine did not
        # survive the restart) -> the monotonic time until which its start is awaited; the switch
        # that starts it claims it from then on.
        self.relaunching: dict[str, float] = {}
        self._started: dict[str, str] = {}  # model name -> revision id of the engines this loader runs
        self._starting: dict[str, threading.Lock] = {}  # per revision: one start (and its undoing) at a time

    def update(self, served: Mapping[str, Served], installs: Mapping[str, Any] | None = None) -> None:
        """The table's models from now on (on the door's event loop, with the table)."""
        self.served = dict(served)
        if installs is not None:
            self.installs = dict(installs)
        still = {s.revision_id for s in self.served.values() if s.pinned}
        for revision_id, until in list(self.leaving.items()):
            if until is not None and revision_id not in still:
                del self.leaving[revision_id]  # the new table took over from it

    def name_of(self, revision_id: str) -> str | None:
        return next((s.name for s in self.served.values() if s.revision_id == revision_id), None)

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
        while True:
            served = self.served.get(name)
            if served is None:
                raise LoadError(f"`{name}` is not served by this host any more")
            if not (served.pinned or served.revision_id in self.claimed or self._active(served.revision_id)):
                break
            if await asyncio.to_thread(self._wait_pinned, served):
                return
        abandoned = threading.Event()
        try:
            await asyncio.to_thread(self._start_once, served, abandoned)
        except asyncio.CancelledError:
            # The door gave up on this load (its load deadline); the start goes on in its thread,
            # which stops the engine once the start returns, so the load leaves nothing running.
            abandoned.set()
            raise

    def _start_once(self, served: Served, abandoned: threading.Event) -> None:
        with self._starting.setdefault(served.revision_id, threading.Lock()):
            self._start(served)
            self._started[served.name] = served.revision_id
            if abandoned.is_set():
                self._started.pop(served.name, None)
                self.supervisor_of(served.revision_id).stop()

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

    def _wait_pinned(self, served: Served) -> bool:
        """True once the host's supervisor serves `served` and it answers its health check; False
        when the table now serves it on demand (load it so). NotYet while it starts, while a
        switch replaces it (until the panel's new table routes its aliases on) and while its
        engine, crashed, waits for the watchdog's restart; LoadError when nothing will serve it."""
        rev = served.revision_id
        current = self.served.get(served.name)
        if current is None or current.revision_id != rev:
            raise LoadError(f"`{served.name}` is not served by this host any more")
        if not (current.pinned or rev in self.claimed or self._active(rev)):
            return False
        status = self.supervisor.status(probe=True)
        mine = status.running and status.revision_id == rev
        until = self.leaving.get(rev, 0.0)
        switching = rev in self.leaving and until is None
        after_switch = until is not None and time.monotonic() < until
        relaunching = time.monotonic() < self.relaunching.get(rev, 0.0)
        if mine and status.healthy and not switching:
            return True
        # Crashed, the watchdog to restart it (or restarting it: between its stop and start the
        # record is gone, the supervisor's lock held).
        crashed = not status.running and (status.revision_id == rev or self.supervisor.state.busy())
        crashed = crashed and not self._gave_up()
        if mine or crashed or switching or after_switch or relaunching or rev in self.claimed:
            raise NotYet(served.name)
        now = status.revision_label if status.running else "nothing"
        raise LoadError(
            f"`{served.name}` is this host's pinned revision {served.label}, which its engine supervisor "
            f"runs; it runs {now} now: start or switch to {served.label} from the panel"
        )

    def _gave_up(self) -> bool:
        """The watchdog gave up restarting the host's engine (its budget is spent)."""
        return Watchdog(self.supervisor, lambda _revision_id: None).gave_up

    def _start(self, served: Served) -> None:
        sup = self.supervisor_of(served.revision_id)
        status = sup.status(probe=True)
        if status.running and status.revision_id == served.revision_id and status.healthy:
            return
        refused = served.launch.memory.refused  # the planner cannot read it: a switch to it is refused too
        if refused:
            raise LoadError(f"{served.label} was refused on this host: {refused}")
        installs = dict(self.installs)
        try:
            spec = launch_spec(served.launch, installs=installs)
        except (HostRuntimeError, EngineConfigError) as exc:
            raise LoadError(f"{served.label} was refused on this host: {getattr(exc, 'reason', None) or exc}") from exc
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

    def adopt_leftovers(self, served: Mapping[str, Served]) -> list[str]:
        """On-demand engines a previous agent left running (it was killed before it could stop
        them). An engine of a revision `served` (the kept table) still serves on demand, alive and
        answering its health check, is this loader's again, found by revision as the pinned one
        is: its model name is returned for the door to count loaded, nothing is restarted. Any
        other is stopped: the door would not route to it, and it would hold memory."""
        wanted = {s.revision_id: s.name for s in served.values() if not s.pinned}
        adopted, stopped = [], []
        for folder in sorted(self.root.glob("r*")) if self.root.is_dir() else []:
            sup = Supervisor(folder, stop_grace=self.STOP_GRACE_S)
            status = sup.status(probe=True)
            rev = status.revision_id or ""
            name = wanted.get(rev)
            if name and status.running and status.healthy and folder.name == f"r{rev}" and not self._active(rev):
                self._started[name] = rev
                adopted.append(f"{name} (pid {status.pid})")
                continue
            result = sup.stop()
            if result.was_running:
                stopped.append(result.revision_label or folder.name)
        if adopted:
            log.info("front door: on-demand engines still running adopted again: %s", ", ".join(adopted))
        if stopped:
            log.warning("front door: stopped on-demand engines left running: %s", ", ".join(stopped))
        return [name for name in self._started if name in wanted.values()]
