"""The engine watchdog: probe health, restart after consecutive failures, give up on a budget.

Defaults are the seed's Ansible watchdog: probe every 30 s with a 10 s timeout (healthy =
the process runs, /health is 200 and /v1/models lists something), restart after 10
consecutive failures, at most 5 restarts in 3600 s, then give up and raise an alert. An
engine whose recorded process is gone (killed, OOM-killed, crashed) is restarted at the
next check, without waiting for the failure threshold: only a live engine that answers
badly or slowly gets the benefit of the doubt. Both kinds of restart count against the
same budget. It
does nothing while paused (a switch or a load holds a pause file in the state folder, so
this works across processes) and leaves a start in progress alone until its ready
timeout has passed.

    dog = Watchdog(sup, spec_provider=lambda revision_id: spec, on_event=alert_if_bad)
    dog.start()            # a daemon thread ticking every `interval` seconds
    ...
    dog.stop()

`tick()` is one step, for a Celery beat task or a test. The restart history and the
give-up are kept in STATE_DIR/watchdog.json, so a worker restart does not reset the budget;
a new start by a user (a switch, a start, a rollback: any Supervisor.start not made by the
watchdog) does, once that engine is ready: crashes of an earlier engine never leave a freshly
started one unwatched.

A restart that fails leaves no engine record (the supervisor forgets a failed start), so the
retry it leaves in watchdog.json names the revision to start again, by label and by id: the
next try asks `spec_provider` for that revision's launch and starts it under the same id, so a
cause that went away meanwhile (a port another process held, a file missing for a moment) costs
one try, not the engine.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, cast

import httpx

from serving.engines.base import LaunchSpec

from .errors import HostRuntimeError
from .local_http import engine_client
from .processes import exit_status, is_alive
from .readiness import api_key_from_spec, auth_headers
from .state import EngineRecord, WatchdogHistory, fresh_watchdog, read_json, write_json
from .supervisor import Supervisor

EventKind = Literal[
    "ok",  # healthy
    "failure",  # unhealthy, below the threshold
    "restarted",  # restarted: its process was gone, or after `failure_threshold` failures
    "restart_failed",  # the restart did not become ready (counted against the budget)
    "gave_up",  # the budget is spent: alert someone (emitted once)
    "halted",  # still given up; nothing done until a new start by a user or reset()
    "paused",  # a switch/load or an operator paused the watchdog
    "starting",  # an engine is loading; left alone until its ready timeout
    "idle",  # the panel runs no engine
    "error",  # the watchdog itself failed (only from the thread runner)
]


@dataclass(frozen=True)
class WatchdogEvent:
    kind: EventKind
    message: str
    at: float  # clock() time
    consecutive_failures: int = 0
    restarts_in_window: int = 0
    pid: int | None = None
    revision_label: str | None = None
    log_tail: tuple[str, ...] = ()  # the engine's last log lines, masked (failed restarts)

    @property
    def needs_attention(self) -> bool:
        return self.kind in ("restarted", "restart_failed", "gave_up", "error")


class Watchdog:
    def __init__(
        self,
        supervisor: Supervisor,
        spec_provider: Callable[[str | None], LaunchSpec | None],
        *,
        interval: float = 30.0,
        timeout: float = 10.0,
        failure_threshold: int = 10,
        max_restarts: int = 5,
        window: float = 3600.0,
        ready_timeout: float = 600.0,
        check_models: bool = True,
        on_event: Callable[[WatchdogEvent], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`spec_provider(revision_id)` returns the LaunchSpec of that revision (with its secrets
        resolved), or None if it cannot be rebuilt; the state folder holds masked argv only. The id
        is the engine record's, or the pending retry's once a failed restart left no record; None
        for an engine started without one."""
        self.supervisor = supervisor
        self.spec_provider = spec_provider
        self.interval = interval
        self.timeout = timeout
        self.failure_threshold = failure_threshold
        self.max_restarts = max_restarts
        self.window = window
        self.ready_timeout = ready_timeout
        self.check_models = check_models
        self.on_event = on_event
        self.clock = clock
        self.consecutive_failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # persisted state ---------------------------------------------------------------
    def _load(self) -> WatchdogHistory:
        """watchdog.json as this class wrote it (what it lacks: a fresh budget's)."""
        return cast(WatchdogHistory, fresh_watchdog() | (read_json(self.supervisor.state.watchdog_file) or {}))

    def _save(self, data: WatchdogHistory) -> None:
        write_json(self.supervisor.state.watchdog_file, data)

    def reset(self) -> None:
        """Forget the restart history and a give-up (an operator acknowledged the alert)."""
        self.consecutive_failures = 0
        self.supervisor.state.fresh_watchdog_budget()

    @property
    def gave_up(self) -> bool:
        return self._load()["gave_up"] is not None

    # one step ----------------------------------------------------------------------
    def tick(self) -> WatchdogEvent:
        """Probe once and act; returns (and reports to on_event) what happened."""
        event = self._tick()
        if self.on_event is not None:
            self.on_event(event)
        return event

    def _tick(self) -> WatchdogEvent:
        now = self.clock()
        data = self._load()
        data["restarts"] = [t for t in data["restarts"] if now - t < self.window]
        in_window = len(data["restarts"])

        def event(kind: EventKind, message: str, record: EngineRecord | None = None) -> WatchdogEvent:
            return WatchdogEvent(
                kind,
                message,
                now,
                self.consecutive_failures,
                len(data["restarts"]),
                record.pid if record else None,
                record.revision_label if record else None,
            )

        pauses = self.supervisor.state.active_pauses()
        if pauses:
            self.consecutive_failures = 0
            return event("paused", "; ".join(str(p["reason"]) for p in pauses))

        record = self.supervisor.state.read_engine()
        if data["gave_up"] is not None:
            if record is None or _identity(record) == data["gave_up"].get("engine"):
                return event("halted", f"gave up earlier: {data['gave_up']['reason']}", record)
            # Someone started an engine since: a fresh budget for it.
            data = fresh_watchdog()
            self._save(data)
            in_window = 0

        gone = False  # the recorded engine process is dead: no threshold to wait for
        if record is None:
            if data["retry"] is None:
                self.consecutive_failures = 0
                return event("idle", "the panel runs no engine here")
            problem: str | None = f"the engine is not running: {data['retry']['reason']}"
            label: str | None = data["retry"].get("revision_label")
            revision_id = data["retry"].get("revision_id")  # absent from a file written before it was kept
        else:
            if data["retry"] is not None:
                data["retry"] = None
                self._save(data)
            label = record.revision_label
            revision_id = record.revision_id
            alive = is_alive(record.pid, record.start_ticks)
            if alive and record.phase == "starting" and self._age(record) < self.ready_timeout:
                return event("starting", f"revision {label} is still loading", record)
            problem = self._probe(record, alive)
            if problem is None:
                self.consecutive_failures = 0
                return event("ok", f"revision {label} is healthy", record)
            gone = not alive

        self.consecutive_failures += 1
        if not gone and self.consecutive_failures < self.failure_threshold:
            return event("failure", f"{problem} ({self.consecutive_failures}/{self.failure_threshold})", record)

        if in_window >= self.max_restarts:
            reason = (
                f"gave up on revision {label}: {in_window} restarts in the last {self.window:.0f} s "
                f"(limit {self.max_restarts}); last failure: {problem}"
            )
            data["gave_up"] = {
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "reason": reason,
                "engine": _identity(record) if record else None,
            }
            self._save(data)
            return event("gave_up", reason, record)

        spec = self.spec_provider(revision_id)
        self.consecutive_failures = 0
        data["restarts"].append(now)
        self._save(data)
        if spec is None:
            data["retry"] = {
                "reason": "no launch spec to restart with",
                "revision_label": label,
                "revision_id": revision_id,
            }
            self._save(data)
            return event("restart_failed", f"cannot restart revision {label}: no launch spec", record)
        try:
            if record is None:
                result = self.supervisor.start(
                    spec,
                    revision_label=label or "",
                    revision_id=revision_id,
                    ready_timeout=self.ready_timeout,
                    verify=False,
                    by_watchdog=True,
                )
            else:
                result = self.supervisor.restart(spec, ready_timeout=self.ready_timeout)
        except HostRuntimeError as exc:
            tail = tuple(getattr(exc, "log_tail", ()))
            said = _last_engine_line(tail)
            reason = f"{exc.reason}{f'; the engine said: {said}' if said else ''}"
            data["retry"] = {"reason": f"restart failed: {reason}", "revision_label": label, "revision_id": revision_id}
            self._save(data)
            failed = event("restart_failed", f"restart of revision {label} failed: {reason}", record)
            return replace(failed, log_tail=tail)
        why = f"at once: {problem}" if gone else f"after: {problem}"
        return WatchdogEvent(
            "restarted",
            f"restarted revision {label} {why} (new pid {result.pid}, ready in {result.ready.seconds:.1f} s)",
            now,
            0,
            len(data["restarts"]),
            result.pid,
            label,
        )

    def _age(self, record: EngineRecord) -> float:
        started = datetime.fromisoformat(record.started_at)
        return (datetime.now(UTC) - started).total_seconds()

    def _probe(self, record: EngineRecord, alive: bool) -> str | None:
        """None if healthy, else what is wrong."""
        if not alive:
            ended = exit_status(record.pid)
            return f"the engine process (pid {record.pid}) is gone{f' ({ended})' if ended else ''}"
        try:
            with engine_client(self.timeout) as http:
                health = http.get(record.health_url)
                if health.status_code != 200:
                    return f"{record.health_url} answered {health.status_code}"
                if not self.check_models:
                    return None
                spec = None
                with contextlib.suppress(Exception):
                    spec = self.spec_provider(record.revision_id)
                key = api_key_from_spec(spec) if spec is not None else None
                models = http.get(record.models_url, headers=auth_headers(key))
                if models.status_code != 200:
                    return f"{record.models_url} answered {models.status_code}"
                if not (models.json().get("data") or []):
                    return f"{record.models_url} lists no model"
        except httpx.TimeoutException:
            return f"no answer within {self.timeout:g} s"
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__} on {record.health_url}"
        except ValueError:
            return f"{record.models_url} did not answer JSON"
        return None

    # the loop ----------------------------------------------------------------------
    def start(self) -> None:
        """Run tick() every `interval` seconds in a daemon thread until stop()."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="engine-watchdog", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the loop; waits for a tick in progress (a restart may take a while)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # keep watching; report the fault
                if self.on_event is not None:
                    with contextlib.suppress(Exception):
                        self.on_event(WatchdogEvent("error", f"{type(exc).__name__}: {exc}", self.clock()))
            self._stop.wait(self.interval)


def _identity(record: EngineRecord) -> str:
    """One engine process: pid plus start ticks (timestamps can repeat within a second)."""
    return f"{record.pid}:{record.start_ticks}"


def _last_engine_line(tail: tuple[str, ...]) -> str:
    """The engine's last words: the last non-empty line that is not the panel's own."""
    for line in reversed(tail):
        if line.strip() and not line.startswith("====="):
            return line.strip()[:300]
    return ""
