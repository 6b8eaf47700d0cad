"""A switch preflight check, as the panel shows it and the host makes it (pure: no Django).

The panel's half is deployments.services.preflight, the host's hostagent.preflight."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

OK, FAIL, HOST = "ok", "fail", "host"  # HOST: only the host can tell; it checks before stopping anything


@dataclass(frozen=True)
class Check:
    name: str  # engine | port | weights | memory
    status: str  # ok | fail | host
    message: str
    host_rechecks: bool = True

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
