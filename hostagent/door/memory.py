"""Free memory per device, as this host measures it: what NVML says each GPU has free (`gpuN`)
and the kernel's MemAvailable (`ram`). Memory held by any process, the panel's or not, is not
free: the front door decides room from these bytes, never from a count of models."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hostagent.preflight import engine_rss
from hostagent.probes.host_usage import memory_available, parse_meminfo
from hostagent.runtime.processes import group_members
from hostagent.runtime.supervisor import Supervisor

__all__ = ["engine_memory", "host_free_memory", "host_free_memory_async"]


def host_free_memory(*, gpus: bool) -> dict[str, int]:
    free: dict[str, int] = {}
    try:
        ram = memory_available(parse_meminfo(Path("/proc/meminfo").read_text()))
    except OSError:
        ram = None
    if ram is not None:
        free["ram"] = ram
    if gpus:
        from hostagent.probes.nvml import sample_gpus

        for sample in sample_gpus():
            if sample.memory_total_bytes is not None and sample.memory_used_bytes is not None:
                free[f"gpu{sample.index}"] = max(0, sample.memory_total_bytes - sample.memory_used_bytes)
    return free


async def host_free_memory_async(*, gpus: bool) -> dict[str, int]:
    """host_free_memory off the event loop (opening NVML takes a while)."""
    return await asyncio.to_thread(host_free_memory, gpus=gpus)


def engine_memory(sups: dict[str, Supervisor], *, gpus: bool) -> dict[str, dict[str, int]]:
    """What each engine's processes hold now, by model name: bytes per GPU (NVML's per-process
    figures) on a GPU host, resident memory (`ram`) on a CPU host. Shown beside the planned bytes."""
    measured: dict[str, dict[str, int]] = {}
    if not gpus:
        for name, sup in sups.items():
            if (rss := engine_rss(sup)) > 0:
                measured[name] = {"ram": rss}
        return measured
    from hostagent.probes.nvml import sample_gpus

    held: dict[int, dict[str, int]] = {}  # pid -> bytes per GPU
    for sample in sample_gpus():
        for process in sample.processes or ():
            if process.used_memory_bytes is not None:
                held.setdefault(process.pid, {})[f"gpu{sample.index}"] = process.used_memory_bytes
    for name, sup in sups.items():
        record = sup.state.read_engine()
        devices: dict[str, int] = {}
        for pid in group_members(record.pgid) if record is not None else ():
            for device, size in held.get(pid, {}).items():
                devices[device] = devices.get(device, 0) + size
        if devices:
            measured[name] = devices
    return measured
