"""The running agent, as its operations see it: which host it is, how it reaches the panel,
and the engine supervisor. Set once by the agent before its Celery worker starts (the worker
runs tasks in the agent's own process, one at a time)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hostagent.pipcache import PipCache
from hostagent.runtime.supervisor import Supervisor
from serving.wire import RevisionLaunch

from .panel import PanelPort


class HandOver(Protocol):
    """The front door's side of a switch (hostagent.door.service.FrontDoorService)."""

    def hand_over(self, revision_id: str) -> None: ...

    def handed_over(self, revision_id: str) -> None: ...


@dataclass
class AgentContext:
    host: str
    panel: PanelPort
    supervisor: Supervisor
    # Launches of this host's revisions, by revision id, as the panel last sent them (in
    # memory only: they hold API keys). The heartbeat and the watchdog use the running one's.
    launches: dict[str, RevisionLaunch] = field(default_factory=dict)
    # The host's engine installs as the panel recorded them, from the last order (HostBrief):
    # where an engine version's executable is (hostagent.binaries.resolve_install).
    installs: Mapping[str, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The host's pip wheel cache, read at each heartbeat: the llama.cpp builds that install in seconds.
    pip_cache: PipCache = field(default_factory=PipCache)
    # Set when the host's serving may have changed (an operation ended): the front door asks
    # the panel for its table at once instead of at its next poll.
    serving_poke: threading.Event = field(default_factory=threading.Event)
    door: HandOver | None = None  # the front door, when it runs

    @contextlib.contextmanager
    def switching(self, revision_id: str) -> Iterator[None]:
        """While a switch to `revision_id` runs: the front door drains and stops its own engine of
        that revision (loaded on demand, on the same port) and starts no other until it is over."""
        door = self.door
        if door is not None:
            door.hand_over(revision_id)
        try:
            yield
        finally:
            if door is not None:
                door.handed_over(revision_id)

    def remember(self, launch: RevisionLaunch | Mapping[str, Any] | None) -> None:
        """Keep `launch` (the typed value, or its plain JSON as the front door's table holds it)."""
        if launch is None:
            return
        typed = launch if isinstance(launch, RevisionLaunch) else RevisionLaunch.from_dict(launch)
        with self.lock:
            self.launches[str(typed.id)] = typed

    def launch_of(self, revision_id: str | None) -> RevisionLaunch | None:
        """The launch of one of this host's revisions: remembered, else asked of the panel."""
        if not revision_id:
            return None
        with self.lock:
            known = self.launches.get(str(revision_id))
        if known is not None:
            return known
        fetched = self.panel.launch(str(revision_id))
        self.remember(fetched)
        return fetched


_current: AgentContext | None = None


def set_current(context: AgentContext) -> None:
    global _current
    _current = context


def current_or_none() -> AgentContext | None:
    return _current


def current() -> AgentContext:
    if _current is None:
        raise RuntimeError("No agent runs in this process: start it with `manage.py agent`.")
    return _current
