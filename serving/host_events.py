"""What a host's agent tells the panel happened to it, unasked, as a typed value: its previous
run ended uncleanly (killed, crashed, the machine restarted), its front door went down or came
back. The panel keeps it as a host event (hardware.HostEvent) and a rule may send it on.

Pure and frozen, with `to_dict()` and `from_dict()` (WireError naming the field), as the values
in serving.wire; hostagent/PROTOCOL.md's table describes the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serving.wire import WireError

__all__ = ["HOST_REPORTED", "REASON_CHARS", "HostEventReport"]

# The kinds an agent reports itself (the watchdog's three have their own body, `{kind, message}`).
HOST_REPORTED = ("agent.restarted", "door.down", "door.up")
REASON_CHARS = 2000


@dataclass(frozen=True)
class HostEventReport:
    kind: str  # one of HOST_REPORTED
    reason: str = ""  # the agent's own words: which run ended, why the door does not answer

    def __post_init__(self) -> None:
        if self.kind not in HOST_REPORTED:
            raise WireError(f"kind must be one of {', '.join(HOST_REPORTED)}", field="kind")
        if not isinstance(self.reason, str):
            raise WireError("reason is not text", field="reason")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason[:REASON_CHARS]}

    @classmethod
    def from_dict(cls, data: Any) -> HostEventReport:
        if not isinstance(data, Mapping):
            raise WireError("the host event is not an object", field="")
        reason = data.get("reason", "")
        if reason is None:
            reason = ""
        if not isinstance(reason, str):
            raise WireError("reason is not text", field="reason")
        return cls(kind=str(data.get("kind") or ""), reason=reason[:REASON_CHARS])
