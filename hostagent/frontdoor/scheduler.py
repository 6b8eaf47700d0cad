"""Which models are loaded, and who waits for which. No HTTP here: `acquire()` hands a request a
`Lease` on a loaded model (loading it first when needed), `release()` gives it back.

- A request for a loaded model gets its lease at once. One for a model that is not loaded waits
  in the host's queue (at most `queue_max` requests, each at most `queue_wait_s`): past the bound
  QueueFull (429) or WaitExceeded (503), both with a Retry-After.
- Per key (`holder`: an inference key, or on an open door a client address): at most
  `key_inflight_max` requests answered or waiting at once (past it KeyBusy, 429), and at most
  `key_queue_share` of the queue's places waiting (past it KeyQueueShare, 429), so one key can
  neither take every engine slot nor fill the queue that other keys' on-demand models need.
- Room is decided one load at a time (one lock): a model loads only if its planned bytes fit on
  every device it uses, less the planned bytes of the loads still running, after unloading the
  least recently used on-demand models if needed; pinned models are never unloaded. Whether they
  fit is decided before anything is unloaded. The load itself runs outside the lock, so models
  that fit side by side load side by side; one that would need room while others load waits for
  them to finish first. Each load has its own deadline (`load_timeout_s`): past it the loader's
  load is cancelled, the model unloaded (whatever it started stopped) and its waiting requests
  answered LoadTimedOut with the reason.
- A swap finishes the loaded model's turn first: once a request waits for a model that needs a
  loaded one's room, the loaded one keeps taking (and answering) its own new requests until it has
  none in flight (and, for a model whose clients come back to it, no new one came within
  `turn_linger_s`), or for at most `turn_s` after that request arrived, whichever comes first;
  then it drains. Clients of two models sharing room for one get one swap per batch, not one per
  request, and the other model's waiters wait at most `turn_s`, the drain and a start.
- An unload drains: new requests for the model wait for its reload, those in flight finish. If
  they do not finish within `drain_timeout_s` (counted with the turn), the unload is abandoned
  (the model keeps serving, no stream is cut) and the load that wanted the room fails with Busy.
- Room on CPU hosts counts cores too: a model whose table entry has `threads` fits only if its
  threads and those of the models loaded or loading are at most the host's cores (`cores`, else
  this process's CPU affinity), so two CPU engines never share cores they each think are theirs.
- Each swap's timeline (turn, drain, stop, release, start, first_token, and the loader's own
  phases of the start when it tells them: spawn, health) goes to `frontdoor_swap_phase_seconds`
  and one log line per load.
- A failed load answers its waiting requests with LoadFailed and loads back what it unloaded, so
  the loaded set is what it was.
- A lease holds the model it was granted on: when an alias moves (`update_table`), requests in
  flight finish on the old engine. An alias that moves from a loaded model to one that is not
  loaded keeps routing to the old one while the new one loads, and flips once it is loaded (or
  its load failed); requests waiting for a model by an alias that now names another follow it.
- `lost(lease)`: the lease's engine is gone (a connection refused): the model is marked unloaded
  at once, so the request (and the next ones) load it again instead of failing on a dead port.
- Idle on-demand models are unloaded after their `idle_ttl_s`; models removed from the table
  once their last request is answered.
- `adopt(name)`: an engine the loader found still running (the agent restarted) is loaded from
  then on, with nothing started.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import os
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from .metrics import Metrics
from .redact import without_paths
from .settings import FrontDoorSettings
from .table import Mode, RoutingTable, ServedModel

__all__ = [
    "Busy",
    "FreeMemory",
    "KeyBusy",
    "KeyQueueShare",
    "Lease",
    "LoadFailed",
    "LoadTimedOut",
    "Loader",
    "NoRoom",
    "NotYet",
    "Phase",
    "QueueFull",
    "Refused",
    "Scheduler",
    "UnknownModel",
    "WaitExceeded",
]

log = logging.getLogger("controlpanel.frontdoor")

REAP_EVERY_S = 0.5
NOT_YET_POLL_S = 0.25
DEFAULT_LOAD_ESTIMATE_S = 5.0
MAX_MESSAGE = 2000  # characters of a loader's error shown to clients
CORES = "cores"  # room counted in CPU cores beside the memory devices (a table entry's `threads`)


class Loader(Protocol):
    """Starts and stops engines; the agent implements it with its supervisor.

    `load(name)` returns once the engine serves `name` at its table entry's upstream (health gate
    passed) and raises on failure, leaving no process behind. It must be idempotent: an engine
    already serving returns at once (the front door starts knowing nothing loaded). It raises
    NotYet when the engine will come up without its doing (another process starts it): the
    scheduler frees its lock and asks again shortly.
    `unload(name)` returns once the engine has stopped and its memory is released. A load's
    error message is shown to the clients that waited: it must hold no secret. A load past the
    door's deadline is cancelled, then `unload(name)` is called: together they must leave nothing
    of the load running."""

    async def load(self, name: str) -> None: ...

    async def unload(self, name: str) -> None: ...


# Free bytes per device ("gpu0", ..., "ram"), as the host measures them: memory held by any
# process, the panel's or not, is not free. May be a plain function or a coroutine function.
FreeMemory = Callable[[], Mapping[str, int] | Awaitable[Mapping[str, int]]]


class Refused(Exception):
    """A request the front door answers itself, with an OpenAI-style error."""

    status = 503
    code = "unavailable"
    kind = "server_error"

    def __init__(
        self, message: str, *, retry_after: float | None = None, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.details = dict(details or {})  # more for the client, beside the message (a load's progress)

    def copy(self) -> Refused:
        return type(self)(self.message, retry_after=self.retry_after, details=self.details)


class UnknownModel(Refused):
    status, code, kind = 404, "model_not_found", "invalid_request_error"


class QueueFull(Refused):
    status, code, kind = 429, "queue_full", "rate_limit_error"


class WaitExceeded(Refused):
    status, code = 503, "queue_timeout"


class KeyBusy(Refused):
    """One key's requests answered or waiting at once are at `key_inflight_max`."""

    status, code, kind = 429, "key_in_flight_limit", "rate_limit_error"


class KeyQueueShare(Refused):
    """One key's requests waiting for models to load fill its share of the queue."""

    status, code, kind = 429, "key_queue_share", "rate_limit_error"


class LoadFailed(Refused):
    status, code = 503, "model_load_failed"
    result = "failed"  # the frontdoor_loads result label


class NoRoom(LoadFailed):
    code, result = "no_room", "no_room"


class Busy(LoadFailed):
    code, result = "model_busy", "busy"


class LoadTimedOut(LoadFailed):
    code, result = "model_load_timeout", "timeout"


class NotYet(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a Loader's load(): the engine is not up yet but will be without this load's doing
    (another process starts it). The scheduler frees its lock and asks again shortly, while the
    requests keep waiting within their queue bound."""


class Removed(Refused):
    code = "model_removed"


class Phase(StrEnum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"
    DRAINING = "draining"
    UNLOADING = "unloading"


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[Lease]
    alias: str
    since: float
    slot: _Slot
    holder: str


@dataclass(eq=False)
class _Slot:
    """One served model's life in the front door."""

    model: ServedModel
    phase: Phase = Phase.UNLOADED
    in_flight: int = 0
    waiters: deque[_Waiter] = field(default_factory=deque)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    last_used: float = 0.0
    granted: int = 0  # leases granted so far (a turn watches for new ones)
    # Requests that came within `turn_linger_s` of one of its answers (its clients come back to it):
    # since its last load, and in the load before.
    returns: int = 0
    returns_before: int = 0
    last_release: float | None = None
    last_load_s: float | None = None
    loading_since: float | None = None  # when the load under way began (kept while the loader says NotYet)
    loaded_at: float | None = None  # when its last load ended: its first answer's first token is timed from here
    load_task: asyncio.Task[None] | None = None
    retired: bool = False  # gone from the table: unloaded once its last request is answered

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def name(self) -> str:
        return self.model.name


@dataclass(eq=False)
class Lease:
    """A request's hold on a loaded model: release it when the answer is finished."""

    model: ServedModel  # as it was when granted: a table update does not move a request in flight
    alias: str
    waited_s: float
    _slot: _Slot = field(repr=False)
    holder: str = ""  # whose per-key limits it counts against
    _first: Callable[[], None] | None = field(default=None, repr=False)

    def answering(self) -> None:
        """The engine's first bytes of the answer reached the front door (for the swap timeline)."""
        if self._first is not None:
            first, self._first = self._first, None
            first()


class Scheduler:
    def __init__(
        self,
        table: RoutingTable,
        loader: Loader,
        free_memory: FreeMemory,
        settings: FrontDoorSettings,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.loader, self.free_memory, self.clock = loader, free_memory, clock
        self.settings, self.metrics = settings, metrics
        self._table = RoutingTable()
        self._slots: dict[str, _Slot] = {}
        self._lock = asyncio.Lock()  # one room decision or unload at a time: memory is read between them
        self._loading: dict[str, dict[str, int]] = {}  # loads running outside the lock -> their planned bytes
        # Free bytes measured before the loads running now began, less the bytes of those loaded since.
        self._before_loads: dict[str, int] = {}
        self._loads_done = asyncio.Event()  # set (and replaced) each time a load ends
        self._waiting = 0
        self._holding: Counter[str] = Counter()  # per holder: requests answered or waiting
        self._queued: Counter[str] = Counter()  # per holder: requests waiting for a load
        self._holds: dict[str, str] = {}  # alias -> the loaded model it stays on while its new one loads
        self._tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self._timeline: dict[str, list[str]] = {}  # model about to load -> the phases of its swap so far
        self.update_table(table)

    @property
    def table(self) -> RoutingTable:
        return self._table

    def start(self) -> None:
        """Start the idle reaper and load the pinned models (in the running event loop)."""
        self._started = True
        self._spawn(self._reap_forever())
        for slot in self._slots.values():
            if slot.model.mode is Mode.PINNED:
                self._ensure_loading(slot)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- requests ---------------------------------------------------------------------------

    def resolve(self, label: str) -> ServedModel | None:
        """The model a request for `label` goes to now (an alias being moved: its old model while
        the new one loads)."""
        held = self._holds.get(label)
        slot = self._slots.get(held) if held is not None else None
        if slot is not None and slot.phase is Phase.LOADED:
            return slot.model
        return self._table.resolve(label)

    async def acquire(self, label: str, *, holder: str = "") -> Lease:
        """A lease on `label`'s model for `holder` (who the per-key limits count, shown in their
        refusals: "the key `name`", "the client 10.0.0.5"); release() it when answered."""
        model = self.resolve(label)
        if model is None:
            raise UnknownModel(f"The model `{label}` does not exist on this host.")
        slot = self._slots[model.name]
        cap = self.settings.key_inflight_max
        if cap and self._holding[holder] >= cap:
            self.metrics.queue_rejected.labels(model.name, "key_in_flight").inc()
            raise KeyBusy(
                f"{_who(holder)} already has {_requests(self._holding[holder])} being answered or waiting on this "
                f"host, its limit (the front door's per-key in-flight cap); try again when one is answered.",
                retry_after=1,
            )
        self._holding[holder] += 1
        try:
            return await self._acquire(slot, label, holder)
        except BaseException:
            self._let_go(holder)
            raise

    def _let_go(self, holder: str) -> None:
        self._holding[holder] -= 1
        if self._holding[holder] <= 0:
            del self._holding[holder]

    def _share(self) -> int:
        """The most waiting places one holder may take."""
        return max(1, math.floor(self.settings.queue_max * self.settings.key_queue_share))

    async def _acquire(self, slot: _Slot, label: str, holder: str) -> Lease:
        if slot.last_release is not None and self.clock() - slot.last_release <= self.settings.turn_linger_s:
            slot.returns += 1
        if slot.phase is Phase.LOADED:
            return self._lease(slot, label, 0.0, holder)
        if self._waiting >= self.settings.queue_max:
            self.metrics.queue_rejected.labels(slot.name, "full").inc()
            raise QueueFull(
                f"{self._waiting} requests are already waiting for models to load on this host; try again later.",
                retry_after=self._retry_after(slot),
            )
        if self._queued[holder] >= self._share():
            self.metrics.queue_rejected.labels(slot.name, "key_share").inc()
            raise KeyQueueShare(
                f"{_who(holder)} already has {_requests(self._queued[holder])} waiting for models to load, its "
                f"share of this host's queue ({self._share()} of {self.settings.queue_max} places); "
                "try again later.",
                retry_after=self._retry_after(slot),
            )
        waiter = _Waiter(asyncio.get_running_loop().create_future(), label, self.clock(), slot, holder)
        slot.waiters.append(waiter)
        self._waiting += 1
        self._queued[holder] += 1
        self._show_depth(slot)
        self._ensure_loading(slot)
        granted = False
        try:
            done, _ = await asyncio.wait({waiter.future}, timeout=self.settings.queue_wait_s)
            if not done:
                self.metrics.queue_rejected.labels(slot.name, "timeout").inc()
                raise self._wait_exceeded(waiter.slot, label)
            lease = waiter.future.result()
            granted = True
            return lease
        finally:
            self._waiting -= 1
            self._queued[holder] -= 1
            if self._queued[holder] <= 0:
                del self._queued[holder]
            with contextlib.suppress(ValueError):
                waiter.slot.waiters.remove(waiter)
            self._show_depth(waiter.slot)
            if not granted:
                self._abandon(waiter)

    def release(self, lease: Lease) -> None:
        self._let_go(lease.holder)
        self._give_back(lease)

    def _give_back(self, lease: Lease) -> None:
        slot = lease._slot
        slot.in_flight -= 1
        slot.last_used = slot.last_release = self.clock()
        self.metrics.in_flight.labels(slot.name).set(slot.in_flight)
        if slot.in_flight == 0:
            slot.idle.set()

    def _lease(self, slot: _Slot, alias: str, waited: float, holder: str) -> Lease:
        slot.in_flight += 1
        slot.granted += 1
        slot.idle.clear()
        slot.last_used = self.clock()
        self.metrics.in_flight.labels(slot.name).set(slot.in_flight)
        self.metrics.queue_wait.labels(slot.name, alias).observe(waited)
        lease = Lease(slot.model, alias, waited, slot, holder)
        if slot.loaded_at is not None:
            lease._first = lambda: self._first_token(slot)
        return lease

    def _first_token(self, slot: _Slot) -> None:
        if slot.loaded_at is None:
            return
        took, slot.loaded_at = self.clock() - slot.loaded_at, None
        self._phase(slot, "first_token", took)

    def _abandon(self, waiter: _Waiter) -> None:
        """A waiter that gave up (timeout, client gone): a lease granted meanwhile goes back."""
        future = waiter.future
        if future.done() and not future.cancelled() and future.exception() is None:
            self._give_back(future.result())  # acquire() lets go of the holder's count
        else:
            future.cancel()

    def _grant(self, slot: _Slot) -> None:
        now = self.clock()
        while slot.waiters:
            waiter = slot.waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_result(self._lease(slot, waiter.alias, now - waiter.since, waiter.holder))
        self._show_depth(slot)

    def _fail(self, slot: _Slot, error: Refused) -> None:
        while slot.waiters:
            waiter = slot.waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(error.copy())
        self._show_depth(slot)

    def _show_depth(self, slot: _Slot) -> None:
        self.metrics.queue_depth.labels(slot.name).set(len(slot.waiters))

    def _retry_after(self, slot: _Slot) -> float:
        return float(max(1, math.ceil(slot.last_load_s or DEFAULT_LOAD_ESTIMATE_S)))

    def progress(self, name: str) -> dict[str, Any]:
        """Where `name`'s load stands, for the clients that wait: its phase, the seconds its load
        under way has taken so far (None when none runs) and the seconds its last load took."""
        slot = self._slots.get(name)
        if slot is None:
            return {"phase": str(Phase.UNLOADED), "loading_s": None, "last_load_s": None}
        since = slot.loading_since if slot.phase is Phase.LOADING else None
        return {
            "phase": str(slot.phase),
            "loading_s": None if since is None else round(self.clock() - since, 3),
            "last_load_s": None if slot.last_load_s is None else round(slot.last_load_s, 3),
        }

    def _wait_exceeded(self, slot: _Slot, label: str) -> WaitExceeded:
        """A request waited its whole bound: what its model's load is doing, and a Retry-After of
        what the last load took less what this one has taken so far (at least 1 s)."""
        progress = self.progress(slot.name)
        so_far, last = progress["loading_s"], progress["last_load_s"]
        now = _DOING[slot.phase] + (f", {so_far:.1f} s into its load" if so_far is not None else "")
        now += f"; its last load took {last:.1f} s" if last is not None else "; it has not loaded here before"
        retry = self._retry_after(slot)
        if so_far is not None and last is not None:
            retry = float(max(1, math.ceil(last - so_far)))
        return WaitExceeded(
            f"`{label}` is not loaded yet after {self.settings.queue_wait_s:g} s of waiting ({now}); "
            f"try again in {retry:g} s.",
            retry_after=retry,
            details={"progress": {**progress, "model": slot.name, "waited_s": self.settings.queue_wait_s}},
        )

    # -- the table ---------------------------------------------------------------------------

    def update_table(self, table: RoutingTable) -> None:
        """Serve `table` from now on: new models are known (pinned ones loaded), moved aliases
        route new requests to their new model (once it is loaded, when the old one is), removed
        models unload once idle."""
        routes = {label: model.name for label in self._labels() if (model := self.resolve(label)) is not None}
        self._table = table
        for model in table.models:
            slot = self._slots.get(model.name)
            if slot is None:
                self._slots[model.name] = _Slot(model)
            else:
                slot.model, slot.retired = model, False
        served = set(table.names())
        for name, slot in self._slots.items():
            if name not in served:
                slot.retired = True
            elif slot.model.mode is Mode.PINNED and self._started:
                self._ensure_loading(slot)
        self._holds = {}
        for model in table.models:
            target = self._slots[model.name]
            for label in model.aliases:
                before = self._slots.get(routes.get(label, model.name))
                moving = before is not None and before is not target and before.phase is Phase.LOADED
                if moving and before is not None and target.phase is not Phase.LOADED:
                    self._holds[label] = before.name
                    if self._started:
                        self._ensure_loading(target)
        self._reroute()

    def _labels(self) -> list[str]:
        return [label for model in self._table.models for label in model.aliases]

    def _wanted(self, slot: _Slot) -> bool:
        """An alias waits for `slot` to load before it flips to it."""
        return any(
            (model := self._table.resolve(label)) is not None and model.name == slot.name for label in self._holds
        )

    def _flip(self, slot: _Slot) -> None:
        """`slot` is loaded, or could not be: the aliases held for it route to it from now on."""
        for label in [label for label in self._holds if self._table.resolve(label) == slot.model]:
            del self._holds[label]
        self._reroute()

    def _reroute(self) -> None:
        """Requests waiting by a label that now names another model wait for that one; those
        whose label names nothing any more are answered."""
        for slot in list(self._slots.values()):
            for waiter in list(slot.waiters):
                dest = self.resolve(waiter.alias)
                if dest is not None and dest.name == slot.name:
                    continue
                slot.waiters.remove(waiter)
                if dest is None:
                    if not waiter.future.done():
                        removed = f"`{waiter.alias}` was removed from this host while the request waited."
                        waiter.future.set_exception(Removed(removed, retry_after=1))
                    continue
                other = self._slots[dest.name]
                other.waiters.append(waiter)
                waiter.slot = other
                self._show_depth(other)
                if other.phase is Phase.LOADED:
                    self._grant(other)
                elif self._started:
                    self._ensure_loading(other)
            self._show_depth(slot)

    # -- loading -----------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _ensure_loading(self, slot: _Slot) -> None:
        if slot.load_task is None or slot.load_task.done():
            slot.load_task = self._spawn(self._bring_up(slot))

    async def _bring_up(self, slot: _Slot) -> None:
        try:
            while await self._try_bring_up(slot):
                await asyncio.sleep(NOT_YET_POLL_S)  # the lock is free meanwhile: other loads and drains go on
        finally:
            slot.loading_since = None  # loaded, failed or given up: the next load starts its own clock

    async def _try_bring_up(self, slot: _Slot) -> bool:
        """One attempt; True: the loader said NotYet, try again shortly. Room is decided under
        the lock (the slot's planned bytes reserved); the load runs outside it, beside others."""
        evicted: list[_Slot] = []
        while True:
            async with self._lock:
                if slot.retired:
                    if slot.phase is Phase.LOADING:
                        slot.phase = Phase.UNLOADED
                    return False
                if slot.phase is Phase.LOADED:
                    self._grant(slot)
                    return False
                if not slot.waiters and slot.model.mode is not Mode.PINNED and not self._wanted(slot):
                    if slot.phase is Phase.LOADING:
                        slot.phase = Phase.UNLOADED
                    return False  # everyone who asked gave up meanwhile
                loads_done = self._loads_done
                try:
                    room = await self._make_room(slot, evicted)
                except LoadFailed as no_room:
                    await self._failed(slot, no_room, evicted)
                    return False
                if room:
                    if not self._loading:
                        self._before_loads = dict(await self._measured())
                    slot.phase = Phase.LOADING
                    self._loading[slot.name] = self._need(slot)
                    break
            await loads_done.wait()  # it may fit once the loads running now have taken their share
        error: LoadFailed | None = None
        not_yet = False
        try:
            await self._load(slot)
        except NotYet:
            not_yet = True
        except LoadFailed as failed:
            error = failed
        finally:
            need = self._loading.pop(slot.name, {})
            if slot.phase is Phase.LOADED:  # what it takes is now taken: measured, no longer planned
                for device, size in need.items():
                    self._before_loads[device] = self._before_loads.get(device, 0) - size
            if not self._loading:
                self._before_loads = {}
            self._loads_done.set()
            self._loads_done = asyncio.Event()
        if not_yet:
            slot.phase = Phase.LOADING
            return True
        if error is not None:
            async with self._lock:
                await self._failed(slot, error, evicted)
            return False
        self._grant(slot)
        self._flip(slot)
        return False

    async def _failed(self, slot: _Slot, error: LoadFailed, evicted: list[_Slot]) -> None:
        """Answer `slot`'s waiting requests with `error`; load back what was unloaded for it (under the lock)."""
        self.metrics.loads.labels(slot.name, error.result).inc()
        log.warning("front door: %s", error.message)
        self._timeline.pop(slot.name, None)  # the next swap's timeline starts afresh
        self._fail(slot, error)
        self._flip(slot)
        await self._restore(evicted)

    async def _load(self, slot: _Slot) -> None:
        slot.phase = Phase.LOADING
        started = self.clock()
        if slot.loading_since is None:
            slot.loading_since = started
        deadline = self.settings.load_timeout_s
        try:
            async with asyncio.timeout(deadline) as timer:
                await self.loader.load(slot.name)
        except asyncio.CancelledError:
            slot.phase, slot.loading_since = Phase.UNLOADED, None
            raise
        except NotYet:
            raise  # the same load goes on: its start stays when it began
        except Exception as exc:
            slot.loading_since = None
            if timer.expired():
                await self._stop_late(slot)
                raise LoadTimedOut(
                    f"`{slot.name}` did not load within {deadline:g} s, the front door's load deadline; "
                    "its start was stopped.",
                    retry_after=self._retry_after(slot),
                ) from exc
            slot.phase = Phase.UNLOADED
            self._timeline.pop(slot.name, None)
            reason = str(exc) or type(exc).__name__
            why = without_paths(reason)[:MAX_MESSAGE]  # clients learn which file, not where the host keeps it
            if why != reason:
                log.warning("front door: loading %s failed: %s", slot.name, reason)
            raise LoadFailed(f"`{slot.name}` could not be loaded: {why}", retry_after=self._retry_after(slot)) from exc
        began = started if slot.loading_since is None else slot.loading_since  # NotYet's waits count: clients waited
        slot.last_load_s = self.clock() - began
        slot.phase, slot.loading_since = Phase.LOADED, None
        slot.last_used = slot.loaded_at = self.clock()
        slot.returns_before, slot.returns = slot.returns, 0
        self.metrics.loads.labels(slot.name, "ok").inc()
        self.metrics.load_seconds.labels(slot.name).observe(slot.last_load_s)
        self.metrics.loaded.labels(slot.name).set(1)
        notes = self._timeline.pop(slot.name, [])
        self._phase(slot, "start", slot.last_load_s)
        inside: list[str] = []  # the loader's own phases of the start, when it tells them
        for phase, seconds in _loader_phases(self.loader, slot.name).items():
            self._phase(slot, phase, seconds)
            inside.append(f"{phase} {seconds:.3f} s")
        start = f" ({', '.join(inside)})" if inside else ""
        swap = f" (after {', '.join(notes)})" if notes else ""
        log.info("front door: loaded %s in %.2f s%s%s", slot.name, slot.last_load_s, start, swap)

    async def _stop_late(self, slot: _Slot) -> None:
        """A load past its deadline was cancelled: whatever it started is stopped, its memory released."""
        try:
            await self.loader.unload(slot.name)
        except Exception:
            log.exception("front door: stopping %s after its load deadline failed", slot.name)
        finally:
            slot.phase = Phase.UNLOADED

    async def _measured(self) -> Mapping[str, int]:
        try:
            free = self.free_memory()
            measured = await free if inspect.isawaitable(free) else free
        except Exception as exc:
            raise LoadFailed(f"the host's free memory could not be read: {exc}") from exc
        cores = self._cores_free()
        return {**measured, **cores} if cores else measured

    async def _free(self) -> Mapping[str, int]:
        """Free bytes per device for the next load. While others load: what was free before they
        began less their planned bytes (an engine half up has taken only part of its share yet),
        or what is measured now when that is less."""
        measured = await self._measured()
        if not self._loading:
            return measured
        left = dict(self._before_loads)
        for need in self._loading.values():
            for device, size in need.items():
                left[device] = left.get(device, 0) - size
        return {device: min(measured.get(device, 0), left.get(device, 0)) for device in {*measured, *left}}

    @staticmethod
    def _shortfall(need: Mapping[str, int], free: Mapping[str, int]) -> dict[str, int]:
        return {device: size - free.get(device, 0) for device, size in need.items() if size > free.get(device, 0)}

    async def _make_room(self, slot: _Slot, evicted: list[_Slot]) -> bool:
        """Unload least recently used on-demand models until `slot`'s planned bytes fit, or raise
        NoRoom (before unloading anything) when even unloading all of them would not do. False:
        it does not fit beside the loads running now; ask again once one has ended."""
        need = self._need(slot)
        if not need:
            return True
        free = await self._free()
        short = self._shortfall(need, free)
        if not short:
            return True
        if self._loading:
            return False
        candidates = sorted(
            (
                other
                for other in self._slots.values()
                if other is not slot
                and other.phase is Phase.LOADED
                and (other.retired or other.model.mode is Mode.ON_DEMAND)
            ),
            key=lambda other: (not other.retired, other.last_used),
        )
        plan: list[_Slot] = []
        freed: Counter[str] = Counter()
        for other in candidates:
            if all(freed[d] >= short[d] for d in short):
                break
            holds = self._need(other)
            if any(holds.get(d, 0) > 0 for d in short):
                plan.append(other)
                freed.update({d: holds.get(d, 0) for d in short})
        if any(freed[d] < short[d] for d in short):
            raise NoRoom(self._no_room(slot, need, free, freed), retry_after=self._retry_after(slot))
        notes = self._timeline.setdefault(slot.name, [])
        for other in plan:
            deadline = self.clock() + self.settings.drain_timeout_s
            await self._finish_turn(other, slot, deadline, notes)
            if not await self._unload(other, "room", deadline=deadline, notes=notes):
                raise Busy(
                    f"no room for `{slot.name}` yet: `{other.name}` still answers {other.in_flight} requests "
                    f"after {self.settings.drain_timeout_s:g} s of draining; try again later.",
                    retry_after=self._retry_after(other),
                )
            evicted.append(other)
        started = self.clock()
        deadline = started + self.settings.memory_settle_s
        while short := self._shortfall(need, free := await self._free()):
            if self.clock() >= deadline:
                raise NoRoom(self._no_room(slot, need, free, Counter()), retry_after=self._retry_after(slot))
            await asyncio.sleep(0.02)
        self._phase(slot, "release", self.clock() - started, notes)
        return True

    async def _finish_turn(self, other: _Slot, slot: _Slot, deadline: float, notes: list[str]) -> None:
        """`other` is to make room for `slot`: it stays loaded, taking its own new requests at once,
        until it has none in flight, or `turn_s` after `slot`'s oldest waiter arrived, or the
        drain deadline, whichever comes first (under the lock)."""
        if other.phase is not Phase.LOADED or not (other.in_flight or other.returns or other.returns_before):
            return  # idle, and its clients do not come back to it: swapped at once
        started = self.clock()
        since = min((waiter.since for waiter in slot.waiters), default=started)
        until = min(since + self.settings.turn_s, deadline)
        while other.phase is Phase.LOADED and (left := until - self.clock()) > 0:
            if other.in_flight:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(other.idle.wait(), left)
                continue
            # Nothing in flight: a moment for its clients' next requests (a client sends its next
            # one a few milliseconds after the last answer); none came: its turn is over. Not for a
            # model whose clients have not come back to it so (clients alternating models never
            # do): it swaps at once.
            if not (other.returns or other.returns_before):
                break
            granted = other.granted
            await asyncio.sleep(min(self.settings.turn_linger_s, left))
            if other.granted == granted:
                break
        self._phase(other, "turn", self.clock() - started, notes)

    def _phase(self, slot: _Slot, phase: str, seconds: float, notes: list[str] | None = None) -> None:
        """One phase of a swap's timeline: in the metrics, and in the load's log line."""
        self.metrics.swap_phase.labels(slot.name, phase).observe(seconds)
        if notes is not None:
            notes.append(f"{slot.name} {phase} {seconds:.2f} s" if phase != "release" else f"{phase} {seconds:.2f} s")
        elif phase == "first_token":
            log.info("front door: %s's first token %.2f s after its load", slot.name, seconds)

    def _cores(self) -> int:
        return self.settings.cores or len(os.sched_getaffinity(0))

    def _need(self, slot: _Slot) -> dict[str, int]:
        """What `slot` takes when loaded: its planned bytes per device, and its threads in cores."""
        need = {device: size for device, size in slot.model.memory.items() if size > 0}
        if slot.model.threads:
            need[CORES] = self._threads(slot)
        return need

    def _threads(self, slot: _Slot) -> int:
        """The cores `slot`'s engine takes: its threads, at most all of them (an engine given more
        threads than the host has, as the panel counts one left at llama.cpp's default, takes the
        whole host and still fits it alone)."""
        return min(slot.model.threads or 0, self._cores())

    def _cores_free(self) -> dict[str, int]:
        """Cores not taken by the engines loaded, loading or still stopping (when any model counts threads)."""
        if not any(slot.model.threads for slot in self._slots.values()):
            return {}
        taken = sum(
            self._threads(slot)
            for slot in self._slots.values()
            if slot.phase in (Phase.LOADED, Phase.DRAINING, Phase.UNLOADING) or slot.name in self._loading
        )
        return {CORES: self._cores() - taken}

    def _no_room(self, slot: _Slot, need: Mapping[str, int], free: Mapping[str, int], freed: Counter[str]) -> str:
        def amount(device: str, size: float) -> str:
            return f"{size:.0f}" if device == CORES else _size(size)

        parts = [
            f"{device}: needs {amount(device, size)}, {amount(device, free.get(device, 0))} free"
            + (f" (+{amount(device, freed[device])} from unloading idle on-demand models)" if freed[device] else "")
            for device, size in need.items()
            if size > free.get(device, 0) + freed[device]
        ]
        what = "room" if CORES in need else "memory"
        return (
            f"not enough {what} to load `{slot.name}` ({'; '.join(parts)}); "
            "pinned models, models busy answering and other processes hold the rest."
        )

    async def _unload(
        self, slot: _Slot, reason: str, *, deadline: float | None = None, notes: list[str] | None = None
    ) -> bool:
        """Drain then unload `slot` (under the lock). False: its requests outlived the drain
        timeout (or `deadline`); it is serving again and nothing was cut."""
        slot.phase = Phase.DRAINING
        started = self.clock()
        if slot.in_flight:
            left = self.settings.drain_timeout_s if deadline is None else max(0.0, deadline - started)
            try:
                await asyncio.wait_for(slot.idle.wait(), left)
            except TimeoutError:
                slot.phase = Phase.LOADED
                self._grant(slot)
                return False
        self._phase(slot, "drain", self.clock() - started, notes)
        slot.phase = Phase.UNLOADING
        slot.loaded_at = None
        self.metrics.loaded.labels(slot.name).set(0)
        started = self.clock()
        try:
            await self.loader.unload(slot.name)
        except Exception:
            log.exception("front door: unloading %s failed", slot.name)
        finally:
            slot.phase = Phase.UNLOADED
        self._phase(slot, "stop", self.clock() - started, notes)
        self.metrics.unloads.labels(slot.name, reason).inc()
        log.info("front door: unloaded %s (%s)", slot.name, reason)
        if slot.waiters:
            self._ensure_loading(slot)
        return True

    async def _restore(self, evicted: list[_Slot]) -> None:
        """Load back what a failed load unloaded, where it still fits."""
        for slot in evicted:
            if slot.retired or slot.phase is not Phase.UNLOADED:
                continue
            try:
                if self._shortfall(self._need(slot), await self._free()):
                    continue
                await self._load(slot)
            except LoadFailed as error:
                self.metrics.loads.labels(slot.name, error.result).inc()
                log.warning("front door: restoring: %s", error.message)
                continue
            self._grant(slot)

    async def lost(self, lease: Lease) -> None:
        """The lease's engine refused the connection: it is gone (killed, crashed). The model is
        unloaded at once (nothing to drain), so a new acquire() loads it again."""
        slot = lease._slot
        if slot.phase is not Phase.LOADED:
            return
        async with self._lock:
            if slot.phase is not Phase.LOADED:
                return
            log.warning("front door: the engine of %s is gone; loading it again", slot.name)
            slot.phase = Phase.UNLOADING
            self.metrics.loaded.labels(slot.name).set(0)
            try:
                await self.loader.unload(slot.name)  # the supervisor's record of a dead process
            except Exception:
                log.exception("front door: cleaning up after %s failed", slot.name)
            finally:
                slot.phase = Phase.UNLOADED
            self.metrics.unloads.labels(slot.name, "exited").inc()

    def adopt(self, name: str) -> bool:
        """`name`'s engine already runs and answers (the agent restarted while the door's
        on-demand engines kept running, and its loader found it by revision): it is loaded from
        now on, its idle time starting now, with nothing started or restarted. False when the
        table does not serve it or it is not unloaded."""
        slot = self._slots.get(name)
        if slot is None or slot.retired or slot.phase is not Phase.UNLOADED:
            return False
        slot.phase = Phase.LOADED
        slot.last_used = self.clock()
        self.metrics.loaded.labels(name).set(1)
        log.info("front door: %s adopted, its engine still running", name)
        return True

    async def give_up(self, name: str, reason: str = "switch") -> bool:
        """Drain and unload `name` now (the host's switch takes its engine over): True once it is
        unloaded or was not loaded; False when its requests outlived the drain timeout (it serves
        on, nothing cut)."""
        slot = self._slots.get(name)
        if slot is None:
            return True
        while True:
            while slot.name in self._loading:  # a load under way ends first (loaded, then unloaded here)
                await self._loads_done.wait()
            async with self._lock:
                if slot.name in self._loading:
                    continue
                if slot.phase is not Phase.LOADED:
                    return True
                return await self._unload(slot, reason)

    # -- idle and removed models ------------------------------------------------------------------

    def _due(self, slot: _Slot, now: float) -> str | None:
        if slot.phase is not Phase.LOADED or slot.in_flight or slot.waiters:
            return None
        if slot.retired:
            return "removed"
        ttl = slot.model.idle_ttl_s
        if slot.model.mode is Mode.ON_DEMAND and ttl is not None and now - slot.last_used >= ttl:
            return "idle"
        return None

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            for slot in list(self._slots.values()):
                if self._due(slot, self.clock()) is None or self._lock.locked():
                    continue
                async with self._lock:
                    reason = self._due(slot, self.clock())
                    if reason is not None:
                        await self._unload(slot, reason)
            for name, slot in list(self._slots.items()):
                if slot.retired and slot.phase is Phase.UNLOADED and not slot.waiters and not slot.in_flight:
                    del self._slots[name]

    # -- what the agent and the UI read -----------------------------------------------------------

    def state(self) -> list[dict[str, Any]]:
        now = self.clock()
        return [
            {
                "name": slot.name,
                "aliases": list(slot.model.aliases),
                "mode": str(slot.model.mode),
                "phase": str(slot.phase),
                "in_flight": slot.in_flight,
                "waiting": len(slot.waiters),
                "idle_s": None if slot.in_flight or not slot.last_used else round(now - slot.last_used, 3),
                "last_load_s": slot.last_load_s,
                "memory": dict(slot.model.memory),
                "removed": slot.retired,
            }
            for slot in self._slots.values()
        ]

    def loaded(self) -> set[str]:
        return {name for name, slot in self._slots.items() if slot.phase is Phase.LOADED}


_DOING = {
    Phase.UNLOADED: "its load waits for room or for the loads under way",
    Phase.LOADING: "it is loading",
    Phase.LOADED: "it has just loaded",
    Phase.DRAINING: "it is draining before an unload",
    Phase.UNLOADING: "it is unloading",
}


def _loader_phases(loader: Loader, name: str) -> Mapping[str, float]:
    """The loader's own phases of `name`'s last start (ProcessLoader's `spawn` and `health`), when
    it has a `phases(name)`; the agent's loader tells none."""
    phases = getattr(loader, "phases", None)
    if not callable(phases):
        return {}
    try:
        return {str(phase): float(seconds) for phase, seconds in phases(name).items()}
    except Exception:  # a timeline is worth less than the load it describes
        log.exception("front door: the loader's phases of %s could not be read", name)
        return {}


def _requests(count: int) -> str:
    return "1 request" if count == 1 else f"{count} requests"


def _who(holder: str) -> str:
    return holder[:1].upper() + holder[1:] if holder else "This client"


def _size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
