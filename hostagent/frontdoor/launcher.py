"""A `Loader` that runs one command per model: for the bench, the tests and trying the front door
without the agent (`python -m hostagent.frontdoor`). The agent's own loader goes through its
supervisor (launch, preflight, health gate); this one starts the argv it is given, waits for the
health URL, and stops the process group (SIGTERM, then SIGKILL after a grace period).

The health URL is asked every `poll_s` (5 ms) on one kept-alive connection: llama-server's router
hears its child's "ready" at once through a pipe, and each poll here costs the door about 0.2 ms
of CPU and the engine next to nothing, so a load is seen within a few milliseconds of the engine's
own "model loaded". `phases(name)` gives the last load's `spawn` (starting the process) and
`health` (from then until the health URL answered 200), which the scheduler adds to the swap's
timeline.

A load that fails says why in the loader's own words (the exit code, the health wait), which the
front door shows the requests waiting for it; never the engine's log, whose lines may hold its
`--api-key` or a hub token, and never a path on the host (a log that cannot be written, an
executable that is not there: the reason, not the file). Where the log is goes to the door's own
log, for the operator. The log folder is made when it is not there yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp

from .table import RoutingTable

__all__ = ["Command", "ProcessLoader", "budget_free_memory"]

log = logging.getLogger("controlpanel.frontdoor")


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    health_url: str
    env: Mapping[str, str] = field(default_factory=dict)  # added to this process's environment

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Command:
        return cls(tuple(str(a) for a in data["argv"]), str(data["health_url"]), dict(data.get("env") or {}))


class ProcessLoader:
    def __init__(
        self,
        commands: Mapping[str, Command],
        *,
        log_dir: Path | None = None,
        ready_timeout: float = 120.0,
        stop_grace: float = 10.0,
        poll_s: float = 0.005,
    ) -> None:
        self.commands = dict(commands)
        self.log_dir = log_dir
        if log_dir is not None:  # a folder that is not there yet is made, not a load failed on
            log_dir.mkdir(parents=True, exist_ok=True)
        self.ready_timeout = ready_timeout
        self.stop_grace = stop_grace
        self.poll_s = poll_s
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._phases: dict[str, dict[str, float]] = {}  # name -> its last load's spawn and health seconds

    def running(self) -> set[str]:
        return {name for name, proc in self._procs.items() if proc.poll() is None}

    def pid(self, name: str) -> int | None:
        proc = self._procs.get(name)
        return proc.pid if proc is not None and proc.poll() is None else None

    def phases(self, name: str) -> dict[str, float]:
        """The last load of `name`, phase by phase: `spawn` (the process started), `health` (its
        health URL answered 200 after that); empty when it has not loaded here."""
        return dict(self._phases.get(name, {}))

    def log_path(self, name: str) -> Path | None:
        return None if self.log_dir is None else self.log_dir / f"{name}.log"

    async def load(self, name: str) -> None:
        self._phases.pop(name, None)  # an engine already running was started by no load of this one
        if name in self.running():
            return
        command = self.commands.get(name)
        if command is None:
            raise LookupError(f"no command to start {name}")
        path = self.log_path(name)
        started = time.monotonic()
        try:
            out: IO[bytes] | int = path.open("ab") if path is not None else subprocess.DEVNULL
        except OSError as exc:  # the operator's log gets the path, the waiting clients the reason
            log.warning("front door: %s's log %s cannot be written: %s", name, path, exc)
            raise RuntimeError(f"{name}'s log file cannot be written ({exc.strerror or type(exc).__name__})") from exc
        try:
            proc = subprocess.Popen(
                list(command.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **command.env},
            )
        except OSError as exc:
            log.warning("front door: %s's command %s cannot be started: %s", name, command.argv[0], exc)
            raise RuntimeError(f"{name}'s engine cannot be started ({exc.strerror or type(exc).__name__})") from exc
        finally:
            if not isinstance(out, int):
                out.close()
        self._procs[name] = proc
        spawned = time.monotonic()
        try:
            await self._wait_healthy(name, proc, command.health_url)
        except BaseException:
            await self.unload(name)
            raise
        self._phases[name] = {"spawn": spawned - started, "health": time.monotonic() - spawned}

    async def _wait_healthy(self, name: str, proc: subprocess.Popen[bytes], url: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                code = proc.poll()
                if code is not None:
                    self._see_log(name)
                    raise RuntimeError(f"{name} exited with code {code} while loading")
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                if time.monotonic() > deadline:
                    self._see_log(name)
                    raise TimeoutError(f"{name} was not healthy after {self.ready_timeout:g} s")
                await asyncio.sleep(self.poll_s)

    def _see_log(self, name: str) -> None:
        path = self.log_path(name)
        log.warning("front door: %s failed to load; its log: %s", name, path or "none (no --log-dir)")

    async def unload(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(self.poll_s)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait)

    async def close(self) -> None:
        for name in list(self._procs):
            await self.unload(name)


def budget_free_memory(table: RoutingTable, budget: Mapping[str, int], loader: ProcessLoader) -> dict[str, int]:
    """Free bytes when a host has `budget` per device and the running commands hold their planned
    bytes: a stand-in for the agent's measured free memory, for the bench and trying it out."""
    held = {device: 0 for device in budget}
    for model in table.models:
        if model.name in loader.running():
            for device, size in model.memory.items():
                held[device] = held.get(device, 0) + size
    return {device: size - held.get(device, 0) for device, size in budget.items()}
