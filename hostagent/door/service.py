"""The front door in the agent's process: its own thread and event loop, started before the
agent's Celery worker and stopped after it; and a thread that keeps its tables in step with the
panel (GET serving every CONTROLPANEL_AGENT_SERVING_S, at once after an operation ends) and
reports its state and usage totals (POST serving/report, through the outbox when the panel is away).

    service = start_front_door(ctx, gpus=True)   # None when CONTROLPANEL_FRONT_DOOR_BIND=off
    ...
    service.close()                               # stop listening, finish answers, stop on-demand engines
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
from django.conf import settings

from hostagent.context import AgentContext
from hostagent.frontdoor import FrontDoor, FrontDoorSettings, KeyTable, RoutingTable
from hostagent.frontdoor.settings import BIND_ENV
from hostagent.frontdoor.table import TableError
from hostagent.frontdoor.usage import UsageRow
from hostagent.held import ONDEMAND_DIR
from hostagent.local import state_dir
from hostagent.panel import CredentialRefused, PanelAway, PanelError
from hostagent.runtime.local_http import engine_get
from serving.agent_reports import DoorModelState, DoorReport, TableRefusal, UsageTotal
from serving.binds import split_bind
from serving.host_events import HostEventReport

from .loader import AgentLoader
from .memory import engine_memory, free_for_loads
from .tables import ServingSet, ServingStore, serving_set

__all__ = ["FrontDoorService", "door_settings", "start_front_door"]

log = logging.getLogger("controlpanel.agent")
T = TypeVar("T")
OFF = "off"
REASON_CHARS = 500  # of a refused table's reason, in the report
HEALTH_TIMEOUT_S = 5.0  # how long the door's own /health may take before it counts as down
# In the host's state folder while the door is reported down: the next run's door, once it answers,
# reports it up (the usual fix of a door that cannot listen is a free port and an agent restart).
DOWN_FILE = "door-down.txt"


def note_door_down(state: Path, reason: str) -> None:
    """Keep, across agent restarts, that the door was reported down and why."""
    with contextlib.suppress(OSError):  # the report went; only its door.up would be missed
        state.mkdir(parents=True, exist_ok=True)
        (state / DOWN_FILE).write_text(reason)


def _noted_down(state: Path) -> str | None:
    try:
        return (state / DOWN_FILE).read_text() or "(no reason noted)"
    except OSError:
        return None


def door_settings(environ: Mapping[str, str] | None = None) -> FrontDoorSettings | None:
    """The door's settings from the host's environment; None when CONTROLPANEL_FRONT_DOOR_BIND
    is `off`. Raises SettingsError naming a bad variable."""
    environ = os.environ if environ is None else environ
    if (environ.get(BIND_ENV) or "").strip().lower() == OFF:
        return None
    return FrontDoorSettings.from_env(environ)


class FrontDoorService:
    def __init__(
        self,
        ctx: AgentContext,
        door_settings: FrontDoorSettings,
        *,
        gpus: bool,
        state: Path,
        interval: float,
        ready_timeout: float = 900.0,
        relaunching: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.settings = dataclasses.replace(door_settings, host_name=ctx.host)  # its engines' series' `host`
        self.gpus = gpus
        self.interval = interval
        self.store = ServingStore(state)
        self.loader = AgentLoader(ctx.supervisor, state / ONDEMAND_DIR, gpus=gpus, ready_timeout=ready_timeout)
        if relaunching:  # requests for it wait for the panel's start of it, as for an on-demand load
            self.loader.relaunching[relaunching] = time.monotonic() + self.RELAUNCH_WAIT_S
        self.version: str | None = None
        self.refused: TableRefusal | None = None  # the panel's last table, when refused
        self.loop = asyncio.new_event_loop()
        self.door: FrontDoor | None = None
        self.started_s: float | None = None  # seconds from start() to listening
        self._thread = threading.Thread(target=self.loop.run_forever, name="front-door", daemon=True)
        self._sync: threading.Thread | None = None
        self._closing = threading.Event()
        self._said: dict[str, str] = {}  # per step, the problem last logged
        self.state = state
        self.down: str | None = _noted_down(state)  # why the door does not answer, while it does not

    # -- life ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen (raises OSError when the bind address is taken), serve the last table kept on
        disk at once, then follow the panel from a thread of its own."""
        t0 = time.monotonic()
        kept = self._kept()
        adopted = self.loader.adopt_leftovers(kept.served if kept else {})
        self._thread.start()

        async def begin() -> FrontDoor:
            table, keys = (kept.table, kept.keys) if kept else (RoutingTable(), KeyTable())
            if kept:
                self.loader.update(kept.served, kept.document.engine_installs)
            door = FrontDoor(table, self.loader, self._free_memory, self.settings, keys=keys)
            for name in adopted:  # before the pinned loads start: what they hold is counted
                door.scheduler.adopt(name)
            door.ledger.restore(UsageRow(**total.to_dict()) for total in self.store.usage())
            if kept and kept.limits:
                door.update_limits(**kept.limits)
            await door.start()
            return door

        try:
            self.door = self.call(begin)
        except BaseException:
            self._stop_loop()
            raise
        self.version = kept.version if kept else None
        self.started_s = time.monotonic() - t0
        log.info(
            "front door listening on %s (%d model(s) from the kept table, %.2f s)",
            self.bind,
            len(kept.table.models) if kept else 0,
            self.started_s,
        )
        self.ctx.door = self  # a switch asks it to give its revision's engine up first
        self._sync = threading.Thread(target=self._follow, name="front-door-sync", daemon=True)
        self._sync.start()

    async def _free_memory(self) -> dict[str, int]:
        """Free bytes per device for the door's next load (memory.free_for_loads): the loaded
        models' planned bytes are theirs even where their engines hold less yet."""
        door = self.door
        rows = door.scheduler.state() if door is not None else []
        planned = {row["name"]: row["memory"] for row in rows if row["phase"] == "loaded"}
        sups = self.loader.engines(set(planned))
        return await asyncio.to_thread(free_for_loads, planned, sups, gpus=self.gpus)

    @property
    def bind(self) -> str:
        """HOST:PORT it listens on (the port bound, when the settings asked for any)."""
        port = self.door.port if self.door is not None else self.settings.port
        return dataclasses.replace(self.settings, port=port).bind

    def close(self, timeout: float = 90.0) -> None:
        """Stop following the panel, stop listening (answers in flight finish), stop the
        on-demand engines this door started; a last report says what it served."""
        self._closing.set()
        if self.ctx.door is self:
            self.ctx.door = None
        self.ctx.serving_poke.set()
        if self._sync is not None:
            self._sync.join(timeout=10)
        if self.door is not None:
            try:
                self.report()
            except Exception:  # noqa: BLE001 - the last report is a courtesy; stopping goes on
                log.exception("front door: the last report failed")
            door = self.door

            async def end() -> None:
                try:
                    await door.stop()
                finally:
                    await self.loader.close()

            try:
                asyncio.run_coroutine_threadsafe(end(), self.loop).result(timeout)
            except Exception:  # noqa: BLE001 - stopping goes on whatever happened
                log.exception("front door did not stop cleanly")
        self._stop_loop()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()

    def call(self, fn: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Run `fn` on the door's event loop (a coroutine function is awaited there)."""

        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    # -- a switch of the host's supervisor ------------------------------------------------------------

    LEAVING_GRACE_S = 30.0  # after a switch, how long requests for the revision it replaced wait for the new table
    RELAUNCH_WAIT_S = 120.0  # at start, how long requests wait for the panel's start of the pinned revision to begin

    def hand_over(self, revision_id: str) -> None:
        """A switch to `revision_id` begins: drain and stop the door's own engine of it (it holds
        the port the switch starts it on) and start none until handed_over(); drain the pinned
        revision it replaces (requests in flight finish, new ones wait for the switch and follow
        their alias to the new revision)."""
        self.loader.claimed.add(revision_id)
        self.loader.relaunching.pop(revision_id, None)  # the start is under way: claimed until it ends
        door = self.door
        if door is None:
            return
        wait = door.settings.drain_timeout_s + 60.0
        name = self.loader.started(revision_id)
        if name is not None:
            log.info("front door: handing %s over to the switch", name)
            if not self.call(lambda: door.scheduler.give_up(name), timeout=wait):
                log.warning("front door: %s still answers after draining; the switch's port check decides", name)
        record = self.ctx.supervisor.state.read_engine()
        outgoing = record.revision_id if record is not None else None
        if outgoing and outgoing != revision_id:
            self.loader.leaving[outgoing] = None
            old = self.loader.name_of(outgoing)
            if old is not None:
                log.info("front door: draining %s before the switch stops it", old)
                if not self.call(lambda: door.scheduler.give_up(old, "switch"), timeout=wait):
                    log.warning("front door: %s still answers requests after draining; the switch stops it", old)

    def handed_over(self, revision_id: str) -> None:
        """The switch ended. Rolled back (the revision it replaced runs again): that revision is
        loaded again in the door at once, so its state, the panel's page and the lab router say it
        serves, as it does; else requests for it wait a grace period for the panel's new table."""
        self.loader.claimed.discard(revision_id)
        until = time.monotonic() + self.LEAVING_GRACE_S
        record = self.ctx.supervisor.state.read_engine()
        back = record.revision_id if record is not None and record.revision_id != revision_id else None
        for outgoing, at in list(self.loader.leaving.items()):
            if outgoing == back:
                del self.loader.leaving[outgoing]
            elif at is None:
                self.loader.leaving[outgoing] = until
        door = self.door
        if back is not None and door is not None:
            # The same table again: its pinned models that are not loaded load (health checked) now.
            self.call(lambda: door.update_table(door.scheduler.table))
        self.ctx.serving_poke.set()

    # -- the panel's serving set --------------------------------------------------------------------

    def _set(self, answer: object) -> ServingSet:
        record = self.ctx.supervisor.state.read_engine()
        return serving_set(
            answer,
            bind_host=settings.ENGINE_BIND_HOST,
            active_revision=record.revision_id if record is not None else None,
        )

    def _kept(self) -> ServingSet | None:
        answer = self.store.answer()
        if answer is None:
            return None
        try:
            return self._set(answer)
        except TableError as exc:
            log.warning("front door: the kept serving table is refused (%s); waiting for the panel", exc)
            return None

    def apply(self, answer: object) -> ServingSet:
        """Serve `answer` from the next request on (raises TableError, nothing changed)."""
        new = self._set(answer)
        for served in new.served.values():
            self.ctx.remember(served.launch if served.pinned else None)
        door = self.door
        assert door is not None

        def swap() -> None:
            self.loader.update(new.served, new.document.engine_installs)
            door.update_table(new.table)
            door.update_keys(new.keys)
            if new.limits:
                door.update_limits(**new.limits)

        self.call(swap)
        self.store.save_answer(new.document)
        self.version = new.version
        log.info(
            "front door: serving set %s, %d model(s), %d key(s)", new.version, len(new.table.models), len(new.keys.keys)
        )
        return new

    def poll(self) -> bool:
        """Ask the panel once; True when the table changed. A table refused (TableError) is kept in
        `refused` (its version and the reason) for the next report, so the panel's host page says
        why the door still serves its previous table; the next table served clears it."""
        answer = self.ctx.panel.serving(self.version)
        if answer is None:
            self.refused = None  # the panel's table is the one served
            return False
        try:
            self.apply(answer)
        except TableError as exc:
            version = answer.get("version") if isinstance(answer, dict) else None
            self.refused = TableRefusal(version=str(version or "")[:64], reason=str(exc)[:REASON_CHARS])
            raise
        self.refused = None
        return True

    def report(self) -> None:
        door = self.door
        if door is None:
            return
        state, rows, loaded = self.call(lambda: (door.state(), door.usage(), door.scheduler.loaded()))
        measured = engine_memory(self.loader.engines(loaded), gpus=self.gpus)
        models = tuple(
            dataclasses.replace(model, measured=measured.get(model.name, {}))
            for model in map(DoorModelState.from_dict, state)
        )
        usage = tuple(UsageTotal(**dataclasses.asdict(row)) for row in rows)
        self.store.save_usage(usage)
        report = DoorReport(version=self.version, bind=self.bind, state=models, usage=usage, refused=self.refused)
        self.ctx.panel.serving_report(report)

    def reap(self) -> None:
        """A loaded model whose engine is gone (died, or the pinned one stopped) is unloaded in the
        door, so the next request loads it again, or says why not, instead of failing on a dead port."""
        door = self.door
        if door is None:
            return
        for name in self.loader.exited(self.call(door.scheduler.loaded)):
            log.warning("front door: the engine of %s is gone; the next request for it loads it again", name)

            async def unload(name: str = name) -> bool:
                return await door.scheduler.give_up(name, "exited")

            self.call(unload, timeout=door.settings.drain_timeout_s + 60)

    def watch(self) -> None:
        """Ask the door's own /health, as a client would: the first miss reports the door down
        (host event door.down, with what the client got), the first answer after that back up."""
        host, port = split_bind(self.bind)
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104 - a wildcard bind's loopback
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}/health"
        try:
            engine_get(url, timeout=HEALTH_TIMEOUT_S).raise_for_status()  # never through a proxy
        except httpx.HTTPError as exc:
            if self.down is None and not self._closing.is_set():
                self.down = f"The front door on {self.bind} does not answer its /health: {type(exc).__name__}: {exc}"
                log.error("front door: %s", self.down)
                note_door_down(self.state, self.down)
                self.ctx.panel.host_event(HostEventReport("door.down", self.down))
            return
        if self.down is not None:
            log.info("front door: answers again on %s", self.bind)
            self.ctx.panel.host_event(
                HostEventReport("door.up", f"It answers on {self.bind} again. It was down: {self.down}")
            )
            self.down = None
            (self.state / DOWN_FILE).unlink(missing_ok=True)

    def _follow(self) -> None:
        while not self._closing.is_set():
            for step in (self.watch, self.poll, self.reap, self.report):
                try:
                    step()
                    self._said.pop(step.__name__, None)
                except (PanelAway, PanelError, CredentialRefused, TableError) as exc:
                    self._quietly(step.__name__, f"front door: {step.__name__}: {exc}")
                except Exception:  # noqa: BLE001 - the door keeps serving whatever the panel says
                    log.exception("front door: %s failed", step.__name__)
            self.ctx.serving_poke.wait(self.interval)
            self.ctx.serving_poke.clear()

    def _quietly(self, step: str, message: str) -> None:
        """Log a problem once while it lasts (the loop asks every few seconds)."""
        if message != self._said.get(step):
            log.warning("%s (keeping the current table)", message)
            self._said[step] = message


def start_front_door(
    ctx: AgentContext, *, door: FrontDoorSettings | None, gpus: bool, relaunching: str | None = None
) -> FrontDoorService | None:
    """Start the door when `door` (door_settings()) is set; None when it is off. `relaunching`: the
    revision id the panel queued a start of at registration (requests for it wait for that start)."""
    if door is None:
        log.info("front door off (%s=off)", BIND_ENV)
        return None
    service = FrontDoorService(
        ctx,
        door,
        gpus=gpus,
        state=state_dir(ctx.host),
        interval=settings.AGENT_SERVING_S,
        ready_timeout=settings.ENGINE_READY_TIMEOUT_S,
        relaunching=relaunching,
    )
    service.start()
    return service
