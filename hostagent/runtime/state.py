"""The supervisor's state folder: what runs, its log, watchdog pauses, a cross-process lock.

Layout of STATE_DIR (one per host; every file is plain JSON or text, no secrets):
    engine.json        the engine the panel started: pid, pgid, start ticks, revision, argv
                       (masked), URLs, timestamps. Absent = the panel runs no engine.
    engine.log         the engine's stdout+stderr, appended across starts (rotated to
                       engine.log.1 above ROTATE_BYTES when an engine starts)
    starts.jsonl       one line per engine start, failed ones too (when, pid, revision, where
                       its output begins in engine.log): the agent ships each start's log
                       from it, however short-lived; the last STARTS_KEPT are kept
    watchdog.json      the watchdog's restart history (survives a worker restart)
    pauses/*.json      one file per watchdog pause (a switch in progress, a manual pause)
    supervisor.lock    flock()ed while a start/stop runs, across processes
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from core.atomicfile import remove_stale_tmp, write_atomic

from .errors import SupervisorBusyError
from .processes import is_alive, read_stat

ROTATE_BYTES = 64 * 1024 * 1024
STARTS_KEPT = 50


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class EngineStart(TypedDict):
    """One line of starts.jsonl: an engine start, and where its output begins in engine.log."""

    pid: int
    engine: str
    revision_id: str | None
    revision_label: str
    started_at: str
    log_offset: int


class PauseHolder(TypedDict):
    pid: int
    start_ticks: int | None  # guards against pid reuse


class Pause(TypedDict):
    """pauses/<name>.json: one watchdog pause; with a holder, it ends when that process dies."""

    reason: str
    since: str
    holder: PauseHolder | None


class GaveUp(TypedDict):
    at: str
    reason: str
    engine: str | None  # the engine process it gave up on: "<pid>:<start ticks>"


class Retry(TypedDict):
    """A restart to try again: the revision it was for (a failed start leaves no engine record)."""

    reason: str
    revision_label: str | None
    revision_id: NotRequired[str | None]  # absent from files written before it was kept: read with .get


class WatchdogHistory(TypedDict):
    """watchdog.json: restarts in the window (clock seconds), a give-up, a restart to try again."""

    restarts: list[float]
    gave_up: GaveUp | None
    retry: Retry | None


def fresh_watchdog() -> WatchdogHistory:
    """No restarts, no give-up, nothing to retry: the whole restart budget."""
    return {"restarts": [], "gave_up": None, "retry": None}


@dataclass
class EngineRecord:
    """engine.json: one engine process started by the panel."""

    pid: int
    pgid: int
    start_ticks: int  # /proc/<pid>/stat field 22; guards against pid reuse
    engine: str
    revision_label: str
    revision_id: str | None
    served_name: str
    host: str
    port: int
    argv: list[str]  # masked
    env_keys: list[str]  # names only, values may be secret
    health_url: str
    models_url: str
    chat_url: str
    metrics_url: str | None
    log_path: str
    log_offset: int  # where this start's output begins in log_path
    started_at: str
    phase: str = "starting"  # "starting" while loading, "ready" once it answered
    ready_at: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineRecord:
        """The record of engine.json as read (fields it does not know, from another version, are left out)."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def start(self) -> EngineStart:
        """This start as starts.jsonl records it."""
        return {
            "pid": self.pid,
            "engine": self.engine,
            "revision_id": self.revision_id,
            "revision_label": self.revision_label,
            "started_at": self.started_at,
            "log_offset": self.log_offset,
        }

    def carried(self, into: type) -> dict[str, Any]:
        """This record's values for every field the dataclass `into` shares with it by name:
        what a start's result or a status says of the engine comes from one record."""
        wanted = {f.name for f in fields(into)}
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name in wanted}


class StateDir:
    """Paths and atomic reads/writes under one host's state folder."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.engine_file = self.path / "engine.json"
        self.log_file = self.path / "engine.log"
        self.watchdog_file = self.path / "watchdog.json"
        self.pauses = self.path / "pauses"
        self.lock_file = self.path / "supervisor.lock"
        self.starts_file = self.path / "starts.jsonl"
        self.path.mkdir(parents=True, exist_ok=True)
        self.pauses.mkdir(exist_ok=True)
        for folder in (self.path, self.pauses):  # what a killed writer left is never read
            remove_stale_tmp(folder)

    # engine.json -----------------------------------------------------------------
    def read_engine(self) -> EngineRecord | None:
        data = read_json(self.engine_file)
        return EngineRecord.from_json(data) if data else None

    def write_engine(self, record: EngineRecord) -> None:
        write_json(self.engine_file, asdict(record))

    def clear_engine(self) -> None:
        self.engine_file.unlink(missing_ok=True)

    # starts.jsonl ----------------------------------------------------------------
    def record_start(self, record: EngineRecord) -> None:
        """Note a start the moment it is launched, before it can fail (callers hold the lock)."""
        entry = record.start()
        with open(self.starts_file, "a+b") as handle:
            torn = handle.tell() > 0 and handle.seek(-1, os.SEEK_END) >= 0 and handle.read(1) != b"\n"
            handle.write((("\n" if torn else "") + json.dumps(entry, sort_keys=True) + "\n").encode())
        starts = self.read_starts()
        if len(starts) > 2 * STARTS_KEPT:
            write_atomic(self.starts_file, "".join(json.dumps(e, sort_keys=True) + "\n" for e in starts[-STARTS_KEPT:]))

    def read_starts(self) -> list[EngineStart]:
        """The recorded starts, oldest first (a line being written is skipped)."""
        try:
            text = self.starts_file.read_text()
        except FileNotFoundError:
            return []
        starts = []
        for line in text.splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if isinstance(entry, dict) and isinstance(entry.get("log_offset"), int):
                    starts.append(cast(EngineStart, entry))  # written by record_start
        return starts

    def rotate_log(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if self.log_file.stat().st_size > ROTATE_BYTES:
                self.log_file.replace(self.log_file.with_suffix(".log.1"))

    def fresh_watchdog_budget(self) -> None:
        """Forget the watchdog's restart history, a give-up and a pending retry: the engine just
        started (by a person, not by the watchdog) gets the whole restart budget."""
        write_json(self.watchdog_file, fresh_watchdog())

    def clear_watchdog_retry(self) -> None:
        """A user stopped the engine on purpose: the watchdog must not bring it back."""
        data = read_json(self.watchdog_file)
        if data and data.get("retry") is not None:
            data["retry"] = None
            write_json(self.watchdog_file, data)

    # watchdog pauses -------------------------------------------------------------
    def add_pause(self, reason: str, *, name: str | None = None, holder_pid: int | None = None) -> Path:
        """Pause the watchdog. With `holder_pid`, the pause ends when that process dies."""
        path = self.pauses / f"{name or uuid.uuid4().hex}.json"
        holder = None
        if holder_pid is not None:
            stat = read_stat(holder_pid)
            holder = PauseHolder(pid=holder_pid, start_ticks=stat.start_ticks if stat else None)
        write_json(path, Pause(reason=reason, since=utc_now_iso(), holder=holder))
        return path

    def remove_pause(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def active_pauses(self) -> list[Pause]:
        """Pauses in force. A pause whose holder process died (a crashed switch) is removed."""
        active = []
        for path in sorted(self.pauses.glob("*.json")):
            data = read_json(path)
            if data is None:
                continue
            pause = cast(Pause, {"reason": "", "since": "", "holder": None} | data)  # written by add_pause
            holder = pause["holder"]
            if holder and not is_alive(int(holder["pid"]), holder.get("start_ticks")):
                path.unlink(missing_ok=True)
                continue
            active.append(pause)
        return active

    # lock ------------------------------------------------------------------------
    def busy(self) -> bool:
        """A start or stop holds the supervisor lock now (in this process or another)."""
        with open(self.lock_file, "a+") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return False

    @contextlib.contextmanager
    def locked(self, timeout: float = 30.0) -> Iterator[None]:
        """Hold the host's supervisor lock (flock, so it is released if the holder dies)."""
        with open(self.lock_file, "a+") as fh:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SupervisorBusyError(
                            f"another start/stop holds {self.lock_file} (waited {timeout:.0f} s)"
                        ) from None
                    time.sleep(0.1)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Mapping[str, object]) -> None:
    """Write atomically (temp file, fsync, rename), so a reader never sees half a file, even
    after a power loss or a full disk (core.atomicfile)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True))
