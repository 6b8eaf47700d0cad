"""Probe this machine (host facts + NVML) in the shape `host_probe_record` stores.

Runs on the GPU host. NVML is imported lazily by the probe; a machine without an NVIDIA
driver yields an empty inventory and becomes a CPU-only host, not an error.
"""

from __future__ import annotations

import socket
from typing import Any

from hardware.probes.host import probe_host
from hardware.probes.nvml import probe_host_gpus


def local_host_name() -> str:
    return socket.gethostname().split(".")[0].lower() or "localhost"


def probe_local() -> tuple[dict[str, Any], dict[str, Any]]:
    facts = probe_host().to_dict()
    inventory = probe_host_gpus().to_dict()
    return facts, inventory
