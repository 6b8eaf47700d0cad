"""A switch preflight check, as the panel shows it and the host makes it (pure: no Django).

The panel's half is deployments.services.preflight, the host's hostagent.preflight."""

from __future__ import annotations

from collections.abc import Sequence
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


GiB = 1024**3
NAMED_HOLDERS = 3  # processes a memory check names; the rest are counted


def _gib(size: int) -> str:
    return f"{size / GiB:.1f}"


def gpu_room_check(*, gpu: int, need: int, left: int, holders: Sequence[tuple[int, str, int]]) -> Check:
    """Whether the plan's `need` bytes on GPU `gpu` fit the bytes `left` there, naming the processes
    the panel did not start that hold memory on it ((pid, name, bytes), largest first):
    "2.1 GiB on GPU 0 is held by pid 4242 (python): the plan needs 22.8 of the 21.6 GiB left."."""
    named = [f"{_gib(size)} GiB on GPU {gpu} is held by pid {pid} ({name})" for pid, name, size in holders]
    rest = named[NAMED_HOLDERS:]
    said = "; ".join(named[:NAMED_HOLDERS])
    if rest:
        more = sum(size for _pid, _name, size in holders[NAMED_HOLDERS:])
        said += f"; {_gib(more)} GiB by {len(rest)} more process{'es' if len(rest) > 1 else ''}"
    lead = said or f"GPU {gpu}"
    if need > left:
        return Check("memory", FAIL, f"{lead}: the plan needs {_gib(need)} of the {_gib(max(0, left))} GiB left.")
    return Check("memory", OK, f"{lead}: the plan's {_gib(need)} GiB fit in the {_gib(left)} GiB left.")
