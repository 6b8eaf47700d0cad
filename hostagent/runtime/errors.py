"""Typed errors of the host runtime. Messages and log tails are already secret-masked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class HostRuntimeError(Exception):
    """Base class: something the host runtime could not do, with a reason a user can read."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EngineStartError(HostRuntimeError):
    """The engine did not become ready. `log_tail` holds the engine's last log lines.

    `stopped` lists the engines stopped before this start (they are gone now; a switch
    service rolls back by starting the previous revision again).
    """

    def __init__(
        self,
        reason: str,
        log_tail: Sequence[str] = (),
        *,
        stopped: Sequence[Any] = (),
        returncode: int | None = None,
    ) -> None:
        super().__init__(reason)
        self.log_tail = list(log_tail)
        self.stopped = list(stopped)
        self.returncode = returncode

    def __str__(self) -> str:
        if not self.log_tail:
            return self.reason
        tail = "\n".join(self.log_tail[-20:])
        return f"{self.reason}\n--- engine log (last lines) ---\n{tail}"


class EngineExitedError(EngineStartError):
    """The engine process exited while we waited for it (bad model path, bad flag, OOM)."""


class EngineNotReadyError(EngineStartError):
    """The engine still ran but was not ready before the timeout."""


class EngineVerifyError(EngineStartError):
    """The engine said it was ready, but a short chat completion failed."""


class PortBusyError(HostRuntimeError):
    """The configured port is held by a process that is not clearly an inference server.

    The process is left running: the panel never kills an unknown process.
    """

    def __init__(self, port: int, pid: int | None, cmdline: Sequence[str], reason: str) -> None:
        super().__init__(reason)
        self.port = port
        self.pid = pid
        self.cmdline = list(cmdline)


class SupervisorBusyError(HostRuntimeError):
    """Another start/stop on this host holds the supervisor lock."""
