"""Free memory per device, as this host measures it: what NVML says each GPU has free (`gpuN`)
and the kernel's MemAvailable (`ram`). Memory held by any process, the panel's or not, is not
free: the front door decides room from these bytes, never from a count of models."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from hostagent.held import gpu_holders, group_pids, held_by, rss_bytes
from hostagent.probes.host_usage import memory_available, parse_meminfo
from hostagent.probes.nvml import sample_gpus
from hostagent.runtime.supervisor import Supervisor

__all__ = ["engine_memory", "free_for_loads", "host_free_memory", "host_free_memory_async"]


def host_free_memory(*, gpus: bool) -> dict[str, int]:
    free: dict[str, int] = {}
    try:
        ram = memory_available(parse_meminfo(Path("/proc/meminfo").read_text()))
    except OSError:
        ram = None
    if ram is not None:
        free["ram"] = ram
    if gpus:
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
            if (rss := rss_bytes(group_pids(sup))) > 0:
                measured[name] = {"ram": rss}
        return measured

    holders = gpu_holders(sample_gpus())
    for name, sup in sups.items():
        if devices := held_by(holders, group_pids(sup)):
            measured[name] = devices
    return measured


def free_for_loads(
    planned: Mapping[str, Mapping[str, int]], sups: dict[str, Supervisor], *, gpus: bool
) -> dict[str, int]:
    """What a new load may use: the host's free bytes less what the loaded engines (`planned`, by
    model name) may still grow into, each counted at the larger of its planned and its measured
    bytes. An engine that holds less than planned now (a CPU engine's KV cache fills as it works)
    keeps its room: a second model is not let in on memory the first one will need."""
    free = host_free_memory(gpus=gpus)
    measured = engine_memory(sups, gpus=gpus)
    for name, plan in planned.items():
        held = measured.get(name, {})
        for device, size in plan.items():
            if device in free:
                free[device] -= max(0, size - held.get(device, 0))
    return free
