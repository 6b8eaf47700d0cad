"""GPU facts the planner needs, and a small catalog of GPU types for "what could I buy/run".

Memory sizes are the totals NVML reports (`nvmlDeviceGetMemoryInfo(h).total`), which is what
vLLM multiplies by `gpu_memory_utilization` (vllm/v1/worker/gpu_worker.py determine_available_memory).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as the planner sees it: a host's real GPU or a catalog type."""

    name: str
    memory_bytes: int
    compute_capability: tuple[int, int] | None = None  # (major, minor), e.g. (12, 0)
    p2p: bool | None = None  # PCIe peer-to-peer works between this GPU and its peers; None = unknown
    nvlink: bool = False
    index: int | None = None

    @property
    def sm(self) -> int | None:
        """Compute capability as vLLM/CUDA write it: (12, 0) -> 120."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability
        return major * 10 + minor

    @property
    def is_blackwell_consumer(self) -> bool:
        # sm_120 / sm_121: RTX 50xx and RTX PRO Blackwell; the seeds' FLASH_ATTN breakage.
        return self.compute_capability is not None and self.compute_capability[0] == 12


# name -> (NVML total bytes, compute capability, GeForce-style P2P (False) or datacenter (None), NVLink)
_CATALOG: dict[str, tuple[int, tuple[int, int], bool | None, bool]] = {
    # RTX 3090: 24576 MiB, sm_86; GeForce: no working PCIe P2P (seed 000, club-3090 reports).
    "NVIDIA GeForce RTX 3090": (24576 * MiB, (8, 6), False, False),
    "NVIDIA GeForce RTX 4090": (24564 * MiB, (8, 9), False, False),
    # RTX 5060 Ti 16 GB: sm_120 (seed 002), nvidia-smi shows 16311 MiB.
    "NVIDIA GeForce RTX 5060 Ti": (16311 * MiB, (12, 0), False, False),
    # RTX 5090: 32607 MiB, sm_120 (club-3090#1087 logs "31.4 GiB" usable on startup).
    "NVIDIA GeForce RTX 5090": (32607 * MiB, (12, 0), False, False),
    "NVIDIA RTX A6000": (49140 * MiB, (8, 6), None, False),
    "NVIDIA L40S": (46068 * MiB, (8, 9), None, False),
    "NVIDIA A100-SXM4-80GB": (81920 * MiB, (8, 0), True, True),
    "NVIDIA H100 80GB HBM3": (81559 * MiB, (9, 0), True, True),
    # H200: 143771 MiB (the device tool's H200, recordings/h200-nvml-probe.json).
    "NVIDIA H200": (143771 * MiB, (9, 0), True, True),
}

CATALOG_ALIASES = {
    "rtx3090": "NVIDIA GeForce RTX 3090",
    "rtx4090": "NVIDIA GeForce RTX 4090",
    "rtx5060ti": "NVIDIA GeForce RTX 5060 Ti",
    "rtx5090": "NVIDIA GeForce RTX 5090",
    "a6000": "NVIDIA RTX A6000",
    "l40s": "NVIDIA L40S",
    "a100-80g": "NVIDIA A100-SXM4-80GB",
    "h100": "NVIDIA H100 80GB HBM3",
    "h200": "NVIDIA H200",
}


def catalog_gpu(name: str) -> GpuSpec:
    """A catalog GPU type by full name or short alias ("rtx3090"); KeyError if unknown."""
    full = CATALOG_ALIASES.get(name.lower().replace(" ", ""), name)
    memory, cc, p2p, nvlink = _CATALOG[full]
    return GpuSpec(name=full, memory_bytes=memory, compute_capability=cc, p2p=p2p, nvlink=nvlink)


def catalog_host(name: str, count: int) -> tuple[GpuSpec, ...]:
    """`count` GPUs of one catalog type, indexed 0..count-1 (PlanInputError past MAX_GPUS)."""
    from core.limits import MAX_GPUS
    from serving.planner.errors import PlanInputError

    if not 0 <= count <= MAX_GPUS:
        raise PlanInputError(f"a host has 0 to {MAX_GPUS} GPUs, not {count:,}", field="gpu_count")
    gpu = catalog_gpu(name)
    return tuple(replace(gpu, index=i) for i in range(count))
