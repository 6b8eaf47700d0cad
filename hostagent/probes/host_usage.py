"""CPU and memory use of this host, from ``/proc``. Pure stdlib, no Django.

- CPU busy share (0-100, all CPUs together) over the time between two readings of the
  aggregate ``cpu`` line of ``/proc/stat``: busy is every tick but ``idle`` and ``iowait``
  (``guest`` and ``guest_nice`` are already counted in ``user`` and ``nice``);
- load average (1, 5, 15 minutes) from ``/proc/loadavg``;
- RAM total and available (``MemAvailable``: what can be had without swapping, page cache
  included) and swap total and used, from ``/proc/meminfo``.

The parsers take text, so a recorded ``/proc`` from another machine gives the same figures.
Where a file is missing (not Linux) its figures are None; where all are, there is no sample.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice
_IDLE_COLUMNS = (3, 4)  # idle, iowait
_COUNTED_COLUMNS = 8  # guest and guest_nice are inside user and nice already


@dataclass(frozen=True)
class CpuTimes:
    """Clock ticks since boot, all CPUs together."""

    busy: int
    total: int


@dataclass(frozen=True)
class HostUsage:
    timestamp: float  # time.time()
    cpu_percent: float | None  # busy share since the previous reading; None for the first
    load_1: float | None
    load_5: float | None
    load_15: float | None
    memory_total_bytes: int | None
    memory_available_bytes: int | None
    swap_total_bytes: int | None
    swap_used_bytes: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_cpu_times(stat: str) -> CpuTimes | None:
    """The aggregate ``cpu`` line of ``/proc/stat``; None where there is none."""
    for line in stat.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            try:
                ticks = [int(v) for v in fields[1 : 1 + _COUNTED_COLUMNS]]
            except ValueError:
                return None
            if len(ticks) < 4:  # user nice system idle: what every kernel has
                return None
            idle = sum(ticks[i] for i in _IDLE_COLUMNS if i < len(ticks))
            return CpuTimes(busy=sum(ticks) - idle, total=sum(ticks))
    return None


def cpu_percent(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """The busy share between two readings, 0 to 100; None without both, or when no tick passed
    or the counters went back (a reboot between them)."""
    if before is None or after is None:
        return None
    total, busy = after.total - before.total, after.busy - before.busy
    if total <= 0 or busy < 0:
        return None
    return min(100.0, 100.0 * busy / total)


def parse_meminfo(meminfo: str) -> dict[str, int]:
    """Every ``Key: value [kB]`` line of ``/proc/meminfo``, in bytes (the file's kB are KiB)."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            factor = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key.strip()] = int(parts[0]) * factor
    return values


def memory_available(mem: dict[str, int]) -> int | None:
    """``MemAvailable``; before Linux 3.14 (no such line) free plus buffers plus page cache."""
    if "MemAvailable" in mem:
        return mem["MemAvailable"]
    if "MemFree" in mem:
        return mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
    return None


def parse_loadavg(loadavg: str) -> tuple[float, float, float] | None:
    """The three load averages of ``/proc/loadavg``."""
    try:
        one, five, fifteen = (float(v) for v in loadavg.split()[:3])
    except ValueError:
        return None
    return one, five, fifteen


def host_usage(
    *, before: CpuTimes | None, after: CpuTimes | None, meminfo: str, loadavg: str, timestamp: float
) -> HostUsage | None:
    """The figures from two CPU readings and one meminfo and loadavg text; None when none is known."""
    mem = parse_meminfo(meminfo)
    load = parse_loadavg(loadavg)
    swap_total, swap_free = mem.get("SwapTotal"), mem.get("SwapFree")
    usage = HostUsage(
        timestamp=timestamp,
        cpu_percent=cpu_percent(before, after),
        load_1=load[0] if load else None,
        load_5=load[1] if load else None,
        load_15=load[2] if load else None,
        memory_total_bytes=mem.get("MemTotal"),
        memory_available_bytes=memory_available(mem),
        swap_total_bytes=swap_total,
        swap_used_bytes=max(0, swap_total - swap_free) if swap_total is not None and swap_free is not None else None,
    )
    figures = asdict(usage)
    figures.pop("timestamp")
    return usage if any(v is not None for v in figures.values()) else None


class HostUsageSampler:
    """Successive readings of this host: each CPU figure covers the time since the previous
    reading (the first, since the sampler was made)."""

    def __init__(self, *, proc: Path = Path("/proc"), clock: Callable[[], float] = time.time) -> None:
        self.proc = proc
        self.clock = clock
        self._last = parse_cpu_times(read_or_empty(proc / "stat"))

    def sample(self) -> HostUsage | None:
        now = parse_cpu_times(read_or_empty(self.proc / "stat"))
        before, self._last = self._last, now
        return host_usage(
            before=before,
            after=now,
            meminfo=read_or_empty(self.proc / "meminfo"),
            loadavg=read_or_empty(self.proc / "loadavg"),
            timestamp=self.clock(),
        )


def read_or_empty(path: Path) -> str:
    """A system file's text (/proc, /etc/os-release), undecodable bytes replaced; "" when it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
