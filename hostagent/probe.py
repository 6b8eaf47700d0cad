"""Probe this machine (host facts + NVML) in the shape the panel's `host_probe_record` stores.

Runs on the GPU host. NVML is imported lazily by the probe; a machine without an NVIDIA
driver yields an empty inventory and becomes a CPU-only host, not an error.
"""

from __future__ import annotations

import os
import socket

from hostagent.probes.host import probe_host
from hostagent.probes.nvml import probe_host_gpus
from serving.agent_reports import HostProbe


def local_host_name() -> str:
    return socket.gethostname().split(".")[0].lower() or "localhost"


def probe_local(*, address: str | None = None) -> HostProbe:
    """Host facts (with the model folders this agent confines engines to, and the folders it
    lets an install read from, and the llama.cpp builds in its pip cache, and the `address` the
    panel reaches it at when given) and the GPU inventory."""
    from django.conf import settings

    from hostagent.local import host_install_dirs, host_model_dirs
    from hostagent.pipcache import cached_llama_builds
    from hostagent.runtime.confine import ensure_default_model_dir

    ensure_default_model_dir(os.environ, data_dir=str(settings.DATA_DIR))  # where a first GGUF goes
    facts = probe_host().to_dict()
    if address is not None:
        facts["address"] = address
    facts["model_dirs"] = host_model_dirs()
    facts["install_dirs"] = host_install_dirs()
    facts["cached_builds"] = {"llama.cpp": cached_llama_builds()}  # install in seconds, not a compile
    return HostProbe(facts=facts, inventory=probe_host_gpus().to_dict())
