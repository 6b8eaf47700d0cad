"""Free memory per device, as this host measures it: what NVML says each GPU has free (`gpuN`)
and the kernel's MemAvailable (`ram`). Memory held by any process, the panel's or not, is not
free: the front door decides room from these bytes, never from a count of models."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hostagent.probes.host_usage import memory_available, parse_meminfo

__all__ = ["host_free_memory", "host_free_memory_async"]


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
