"""A front door on loopback in front of real llama-server processes (Gemma 3 270M), as a lab runs it.

The door runs in its own thread with its own event loop, as it runs in its own process on a host;
tests talk to it over HTTP with the official `openai` client and httpx. Its loader is the
package's ProcessLoader: every load starts a real llama-server and waits for its health, every
unload stops it. Two models come from the one shipped GGUF: `small` (1,024 tokens of context) and
`wide` (2,048), each behind the same engine key, which clients never hold.

Free memory is a budget in bytes less what the running engines were planned to hold, less what an
"outside" process holds (tests raise it to play a process the panel did not start).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from hostagent.frontdoor import FrontDoor, FrontDoorSettings, KeyTable, Loader, Mode, RoutingTable, ServedModel
from hostagent.frontdoor.launcher import Command, ProcessLoader, budget_free_memory
from tests.support.llama import free_port, gemma_model_path, llama_server_binary

ENGINE_KEY = "engine-key-Zq81-never-shown"
MIB = 1 << 20
PLANNED = 400 * MIB  # what each test model is planned to hold (the budget decides what fits)


def llama_command(port: int, *, context: int, served_name: str, model: str | None = None) -> Command:
    argv = [llama_server_binary(), "-m", model or gemma_model_path(), "--host", "127.0.0.1", "--port", str(port)]
    # One thread: on a shared machine a second one spins against the other tenants' work.
    argv += ["-c", str(context), "-np", "2", "-ngl", "0", "-t", "1", "--metrics", "-a", served_name]
    argv += ["--embeddings", "--pooling", "mean", "--api-key", ENGINE_KEY]
    return Command(tuple(argv), f"http://127.0.0.1:{port}/health")


@dataclass
class Host:
    """The engines a test may load, their table entries, and the host's memory."""

    commands: dict[str, Command] = field(default_factory=dict)
    models: dict[str, ServedModel] = field(default_factory=dict)
    budget: int = 2 * PLANNED  # room for both by default
    outside: int = 0  # bytes held by a process the front door knows nothing of

    def add(self, name: str, *, context: int, model: str | None = None, **entry: Any) -> ServedModel:
        port = free_port()
        self.commands[name] = llama_command(port, context=context, served_name=name, model=model)
        served = ServedModel(
            name=name, upstream=f"http://127.0.0.1:{port}", api_key=ENGINE_KEY, memory={"ram": PLANNED}, **entry
        )
        self.models[name] = served
        return served

    def table(self, **changes: dict[str, Any]) -> RoutingTable:
        return RoutingTable(tuple(replace(m, **changes.get(name, {})) for name, m in self.models.items()))

    def engine_url(self, name: str) -> str:
        return self.models[name].upstream


class DoorThread:
    """A FrontDoor serving from its own thread and event loop."""

    def __init__(
        self, host: Host, loader: ProcessLoader, settings: FrontDoorSettings, keys: KeyTable | None, door_loader: Loader
    ) -> None:
        self.host, self.loader = host, loader
        self.table = host.table()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="front-door", daemon=True)
        self.thread.start()

        def free() -> dict[str, int]:
            free = budget_free_memory(self.table, {"ram": host.budget}, loader)
            return {"ram": free["ram"] - host.outside}

        async def start() -> FrontDoor:
            door = FrontDoor(self.table, door_loader, free, settings, keys=keys)
            await door.start()
            return door

        self.door = self.call(start())
        self.url = f"http://127.0.0.1:{self.door.port}"

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def update_table(self, table: RoutingTable) -> None:
        async def update() -> None:
            self.table = table
            self.door.update_table(table)

        self.call(update())

    def state(self) -> dict[str, dict[str, Any]]:
        return {row["name"]: row for row in httpx.get(f"{self.url}/frontdoor/state", timeout=10).json()["models"]}

    def wait_for(self, predicate: Callable[[dict[str, dict[str, Any]]], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(state := self.state()):
            assert time.monotonic() < deadline, f"front door state never got there: {state}"
            time.sleep(0.05)

    def metric(self, name: str, **labels: str) -> float:
        """One sample of /metrics (0 when absent)."""
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            sample, _, value = line.rpartition(" ")
            if sample.startswith(name + "{") or sample == name:
                got = ",".join(sorted(sample[len(name) + 1 : -1].split(","))) if "{" in sample else ""
                if got == want:
                    return float(value)
        return 0.0

    def close(self) -> None:
        try:
            self.call(self.door.stop())
            self.call(self.loader.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=30)
            self.loop.close()


def make_host() -> Host:
    host = Host()
    host.add("small", context=1024, aliases=("fast",))
    host.add("wide", context=2048, aliases=("coder",))
    return host


def start_door(
    host: Host,
    log_dir: Path,
    keys: KeyTable | None = None,
    wrap: Callable[[ProcessLoader], Loader] | None = None,
    **settings: Any,
) -> DoorThread:
    """A front door over `host`'s engines; `wrap` puts a loader of the test's around the real one."""
    loader = ProcessLoader(host.commands, log_dir=log_dir, ready_timeout=180.0)
    options = {"host": "127.0.0.1", "port": 0, "queue_wait_s": 300.0, "drain_timeout_s": 120.0, **settings}
    return DoorThread(host, loader, FrontDoorSettings(**options), keys, wrap(loader) if wrap else loader)


@pytest.fixture
def host() -> Host:
    return make_host()


@pytest.fixture
def open_door(host: Host, tmp_path: Path) -> Iterator[Callable[..., DoorThread]]:
    """open_door(keys=None, wrap=None, **settings) -> a running front door over `host`'s engines."""
    doors: list[DoorThread] = []

    def open_(
        keys: KeyTable | None = None, wrap: Callable[[ProcessLoader], Loader] | None = None, **settings: Any
    ) -> DoorThread:
        door = start_door(host, tmp_path, keys, wrap, **settings)
        doors.append(door)
        return door

    yield open_
    for door in doors:
        door.close()


__all__ = ["ENGINE_KEY", "PLANNED", "DoorThread", "Host", "Mode", "make_host", "start_door"]
