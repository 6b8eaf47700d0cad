"""How an operation ends on this host: its handler returns an `Outcome`, or raises `Refused`
(the host will not do it: the operation fails with the reason) or `Cancelled` (a cancel was
asked for); the runner (runner.run_operation) reports it to the panel, once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serving.agent_reports import OperationEnd

SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"


class Outcome(OperationEnd):
    """What the panel records at an operation's end (its state, result and error, and a
    benchmark's figures or an install's record): the finish report itself, as PanelPort.finish
    sends it."""

    @classmethod
    def succeeded(cls, result: Mapping[str, Any] | None = None, **payload: Any) -> Outcome:
        return cls(SUCCEEDED, result=result or {}, **payload)

    @classmethod
    def failed(cls, error: str, result: Mapping[str, Any] | None = None) -> Outcome:
        return cls(FAILED, result=result or {}, error=error)


class Ended(Exception):
    """An operation ended early, with `reason` as its error and `result` as its result."""

    state = FAILED

    def __init__(self, reason: str, *, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.result = result

    def outcome(self) -> Outcome:
        return Outcome(self.state, result=self.result or {}, error=self.reason)


class Refused(Ended):
    """The host will not carry the operation out (a bad order, a failed preflight): failed."""

    state = FAILED


class Cancelled(Ended):
    """A cancel was asked for and the operation stopped: cancelled."""

    state = CANCELLED
