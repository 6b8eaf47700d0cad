"""Host facts: CPU model and cores, RAM, OS, kernel, hostname. Pure stdlib, no Django.

Reads ``/proc/cpuinfo``, ``/proc/meminfo`` and ``/etc/os-release`` where they exist (Linux)
and falls back to :mod:`platform` elsewhere. The parsers take text, so recorded files from
another machine can be checked too.
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .host_usage import parse_meminfo, read_or_empty

OS_RELEASE_PATHS = (Path("/etc/os-release"), Path("/usr/lib/os-release"))


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    os_name: str  # "Ubuntu 24.04.1 LTS"; platform's name where there is no os-release
    kernel: str  # "6.8.0-49-generic"
    architecture: str  # "x86_64"
    cpu_model: str | None
    cpu_logical_cores: int
    cpu_physical_cores: int | None  # None where /proc/cpuinfo does not say (many VMs, Arm)
    cpu_usable_cores: int  # this process's affinity (containers, taskset)
    memory_total_bytes: int | None
    python_version: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe_host(*, proc: Path = Path("/proc"), os_release: Sequence[Path] = OS_RELEASE_PATHS) -> HostFacts:
    """Facts about the machine this runs on."""
    cpuinfo = read_or_empty(proc / "cpuinfo")
    meminfo = read_or_empty(proc / "meminfo")
    release = next((text for text in map(read_or_empty, os_release) if text), "")
    logical = os.cpu_count() or 1
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        usable = logical
    return HostFacts(
        hostname=socket.gethostname() or platform.node(),
        os_name=parse_os_release(release) or f"{platform.system()} {platform.release()}".strip(),
        kernel=platform.release(),
        architecture=platform.machine(),
        cpu_model=parse_cpu_model(cpuinfo) or platform.processor() or None,
        cpu_logical_cores=logical,
        cpu_physical_cores=parse_physical_cores(cpuinfo),
        cpu_usable_cores=usable,
        memory_total_bytes=parse_mem_total(meminfo),
        python_version=platform.python_version(),
    )


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first ``model name`` (x86) or ``Model``/``Hardware`` (Arm) in ``/proc/cpuinfo``."""
    fields = _cpuinfo_blocks(cpuinfo)
    for key in ("model name", "Model", "Hardware", "cpu model"):
        for block in fields:
            if block.get(key):
                return " ".join(block[key].split())
    return None


def parse_physical_cores(cpuinfo: str) -> int | None:
    """Distinct (socket, core) pairs; None when cpuinfo lists no core ids."""
    cores = {
        (block.get("physical id", "0"), block["core id"]) for block in _cpuinfo_blocks(cpuinfo) if "core id" in block
    }
    return len(cores) or None


def parse_mem_total(meminfo: str) -> int | None:
    """``MemTotal`` in bytes (the file says kB, meaning KiB)."""
    return parse_meminfo(meminfo).get("MemTotal")


def parse_os_release(text: str) -> str | None:
    """``PRETTY_NAME`` (or ``NAME VERSION``) from an os-release file."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key] = value.strip().strip("\"'")
    if values.get("PRETTY_NAME"):
        return values["PRETTY_NAME"]
    name = " ".join(v for v in (values.get("NAME"), values.get("VERSION")) if v)
    return name or None


def _cpuinfo_blocks(cpuinfo: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = [{}]
    for line in cpuinfo.splitlines():
        if not line.strip():
            if blocks[-1]:
                blocks.append({})
            continue
        key, _, value = line.partition(":")
        blocks[-1][key.strip()] = value.strip()
    return [b for b in blocks if b]
