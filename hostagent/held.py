"""Memory held on this host, per process: the panel's engines (by revision) and everyone else's.

The telemetry loop sends this as its `memory` report (PROTOCOL.md): for each engine the panel
started (the host's own supervisor's and the front door's on-demand ones), what its process
group holds per GPU (NVML's per-process figures, `gpuN`) or, on a CPU host, its resident memory
(`ram`); and, on a GPU host, each process the panel did not start that holds GPU memory (pid,
name, GPU, bytes). The front door's measured column and the switch preflight read the same
figures through these functions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

from hostagent.probes.nvml import GpuSample
from hostagent.runtime.processes import group_members, read_stat
from hostagent.runtime.supervisor import Supervisor
from serving.agent_reports import EngineMemory, MemoryReport, OutsideMemory

ONDEMAND_DIR = "ondemand"  # the front door's engines: <host state>/ondemand/r<revision id>
MAX_OUTSIDE = 256  # processes listed in one report (a host with more is not a serving host)

Holders = dict[int, dict[int, int]]  # pid -> {GPU index: bytes}


def group_pids(sup: Supervisor) -> list[int]:
    """The live processes of the engine `sup` started ([] when none runs)."""
    record = sup.state.read_engine()
    return group_members(record.pgid) if record is not None else []


def rss_bytes(pids: Iterable[int]) -> int:
    """Resident memory of these processes together (/proc/<pid>/statm); gone ones count 0."""
    total, page = 0, os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def gpu_holders(samples: Sequence[GpuSample]) -> Holders:
    """Who holds how much on which GPU, from NVML's per-process figures (unknown sizes left out)."""
    held: Holders = {}
    for sample in samples:
        for process in sample.processes or ():
            if process.used_memory_bytes is not None:
                per_gpu = held.setdefault(process.pid, {})
                per_gpu[sample.index] = per_gpu.get(sample.index, 0) + process.used_memory_bytes
    return held


def held_by(holders: Holders, pids: Collection[int]) -> dict[str, int]:
    """Bytes per GPU (`gpuN`) these processes hold together."""
    devices: dict[str, int] = {}
    for pid in pids:
        for index, size in holders.get(pid, {}).items():
            devices[f"gpu{index}"] = devices.get(f"gpu{index}", 0) + size
    return devices


def process_name(pid: int) -> str:
    stat = read_stat(pid)
    return stat.comm if stat is not None else "?"


def outside(
    holders: Holders, ours: Collection[int], *, name_of: Callable[[int], str] = process_name
) -> list[OutsideMemory]:
    """GPU memory held by processes the panel did not start, largest first."""
    found = sorted(
        ((pid, index, size) for pid, per_gpu in holders.items() if pid not in ours for index, size in per_gpu.items()),
        key=lambda row: (-row[2], row[1], row[0]),
    )
    return [
        OutsideMemory(pid=pid, name=name_of(pid), gpu=index, bytes=size) for pid, index, size in found[:MAX_OUTSIDE]
    ]


def engine_supervisors(host_supervisor: Supervisor) -> dict[str, Supervisor]:
    """Every engine the panel started on this host that says which revision it serves, by revision id."""
    sups = [host_supervisor]
    folder = host_supervisor.state.path / ONDEMAND_DIR
    if folder.is_dir():
        sups += [Supervisor(path) for path in sorted(folder.glob("r*")) if path.is_dir()]
    found: dict[str, Supervisor] = {}
    for sup in sups:
        record = sup.state.read_engine()
        if record is not None and record.revision_id:
            found.setdefault(str(record.revision_id), sup)
    return found


def memory_report(
    groups: Mapping[str, Collection[int]],
    samples: Sequence[GpuSample] | None,
    *,
    now: float | None = None,
    name_of: Callable[[int], str] = process_name,
) -> MemoryReport:
    """The `memory` report: `groups` maps a revision id to its engine's pids; `samples` are this
    round's GPU samples, None on a CPU host (resident memory is measured instead). `name_of`: a
    process's name (its /proc comm here; a recording names its own)."""
    engines = []
    ours = {pid for pids in groups.values() for pid in pids}
    holders = gpu_holders(samples) if samples is not None else {}
    for revision_id, pids in groups.items():
        devices = held_by(holders, pids) if samples is not None else {"ram": rss_bytes(pids)}
        devices = {device: size for device, size in devices.items() if size > 0}
        if devices:
            engines.append(EngineMemory(revision_id=revision_id, devices=devices))
    return MemoryReport(
        ts=time.time() if now is None else now,
        engines=tuple(engines),
        outside=tuple(outside(holders, ours, name_of=name_of)) if samples is not None else (),
    )


def host_memory_report(host_supervisor: Supervisor, samples: Sequence[GpuSample] | None) -> MemoryReport:
    """`memory_report` for every engine the panel runs on this host now."""
    groups = {rid: group_pids(sup) for rid, sup in engine_supervisors(host_supervisor).items()}
    return memory_report({rid: pids for rid, pids in groups.items() if pids}, samples)
