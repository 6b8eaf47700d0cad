"""NVML probe: GPU inventory and telemetry through nvidia-ml-py (``pynvml``).

Host-runtime layer: no Django, no ORM. ``pynvml`` is imported lazily inside
:func:`nvml_session`, so importing this module is safe on CPU-only hosts and only code
running on a GPU host ever loads the library.

Every entry point takes an optional ``nvml`` object with pynvml's interface: the real
module by default, or :class:`hostagent.probes.replay.ReplayNvml` (recorded calls, for
tests and the fake-GPU demo mode). Units follow the panel, not NVML: bytes, W, MHz, C, mJ.

Optional queries are wrapped per device: a query the GPU or driver does not support
yields ``None`` and its name lands in ``unsupported``; any other NVML failure yields
``None`` and lands in ``errors`` as ``(query, NVML error name)``. Neither aborts the probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

Nvml = Any  # the pynvml module, or an object with the same functions and error classes

# NVML ABI values, stable across drivers. Defined here on purpose: pynvml's
# NVML_P2P_CAPS_INDEX_READ is the tuple ``(0,)`` (a trailing comma), so indices are plain ints.
P2P_INDICES: dict[str, int] = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
P2P_STATUS_NAMES: dict[int, str] = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}
TOPOLOGY_NAMES: dict[int, str] = {
    0: "internal",
    10: "single",
    20: "multiple",
    30: "hostbridge",
    40: "node",
    50: "system",
}
ARCHITECTURE_NAMES: dict[int, str] = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
BRAND_NAMES: dict[int, str] = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "GRID",
    5: "GeForce",
    6: "TITAN",
    7: "NVIDIA vApps",
    8: "NVIDIA vPC",
    9: "NVIDIA vCS",
    10: "NVIDIA vWS",
    11: "NVIDIA Cloud Gaming",
    12: "Quadro RTX",
    13: "NVIDIA RTX",
    14: "NVIDIA",
    15: "GeForce RTX",
    16: "TITAN RTX",
    18: "NVIDIA vGameDev",
}
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_CLOCK_MEM = 2
_NVLINK_ACTIVE = 1
_NVLINK_MAX_LINKS_FALLBACK = 18
# Errors meaning "this GPU/driver does not have it", as opposed to a failure.
_UNSUPPORTED = frozenset({"NotSupported", "FunctionNotFound"})
# nvmlInit errors that mean a host without a usable NVIDIA driver: a CPU-only host.
_NO_DRIVER = frozenset({"LibraryNotFound", "DriverNotLoaded"})
# Errors that end the NVLink link scan: past the last link, or no NVLink at all.
_NVLINK_END = frozenset({"NotSupported", "InvalidArgument", "FunctionNotFound"})

QueryErrors = tuple[tuple[str, str], ...]


class NvmlUnavailable(RuntimeError):
    """No usable NVIDIA driver here (pynvml missing, library not found, driver not loaded)."""


@dataclass(frozen=True)
class PcieLink:
    current_generation: int | None
    max_generation: int | None
    current_width: int | None
    max_width: int | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total_bytes: int
    compute_capability: tuple[int, int] | None
    pcie: PcieLink
    power_limit_w: float | None  # enforced limit
    pci_bus_id: str | None
    serial: str | None
    brand: str | None
    architecture: str | None
    nvlink_active_links: int
    unsupported: frozenset[str]
    errors: QueryErrors


@dataclass(frozen=True)
class P2PStatus:
    read: str | None
    write: str | None
    nvlink: str | None
    atomics: str | None


@dataclass(frozen=True)
class GpuPair:
    a: int
    b: int
    p2p: P2PStatus
    topology: str | None  # common PCIe ancestor: internal/single/multiple/hostbridge/node/system
    unsupported: frozenset[str]
    errors: QueryErrors


@dataclass(frozen=True)
class GpuInventory:
    available: bool
    reason: str  # why no GPUs can be probed; empty when available
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # "13.0"
    nvml_version: str | None = None
    gpus: tuple[GpuInfo, ...] = ()
    pairs: tuple[GpuPair, ...] = ()
    unsupported: frozenset[str] = frozenset()
    errors: QueryErrors = ()  # system queries and GPUs that could not be read ("gpu 3", "GpuIsLost")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (sets become sorted lists, tuples lists)."""
        data: dict[str, Any] = _jsonable(asdict(self))
        return data


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None  # None where the driver cannot tell (WDDM, some containers)


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str | None
    timestamp: float  # time.time()
    utilization_gpu_percent: int | None
    utilization_memory_percent: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_w: float | None
    temperature_c: int | None
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    energy_mj: int | None  # since the driver loaded; Volta and newer only
    fan_percent: int | None  # None on passively cooled GPUs
    processes: tuple[GpuProcess, ...] | None
    unsupported: frozenset[str]
    errors: QueryErrors

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _jsonable(asdict(self))
        return data


def cuda_version_string(version: int) -> str:
    """NVML's CUDA driver version integer as text: 13000 -> "13.0", 12040 -> "12.4"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


@contextmanager
def nvml_session(nvml: Nvml | None = None) -> Iterator[Nvml]:
    """``nvmlInit()`` ... ``nvmlShutdown()``; yields the library to query.

    Raises :class:`NvmlUnavailable` where there is no usable NVIDIA driver. Other
    ``nvmlInit`` failures (a driver/library version mismatch, say) propagate: they are
    faults to show, not a CPU-only host.
    """
    lib = nvml if nvml is not None else _import_pynvml()
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        if error_name(exc) in _NO_DRIVER:
            raise NvmlUnavailable(f"NVIDIA driver not usable: {error_name(exc)} ({exc})") from exc
        raise
    try:
        yield lib
    finally:
        lib.nvmlShutdown()


def probe_host_gpus(nvml: Nvml | None = None) -> GpuInventory:
    """The GPU inventory of this host; ``available=False`` with a reason on a CPU-only host."""
    try:
        with nvml_session(nvml) as lib:
            return read_inventory(lib)
    except NvmlUnavailable as exc:
        return GpuInventory(available=False, reason=str(exc))


def sample_gpus(nvml: Nvml | None = None) -> list[GpuSample]:
    """One telemetry sample per GPU; empty on a CPU-only host.

    For a series, open :func:`nvml_session` once and call :func:`read_samples` in a loop.
    """
    try:
        with nvml_session(nvml) as lib:
            return read_samples(lib)
    except NvmlUnavailable:
        return []


def read_inventory(lib: Nvml) -> GpuInventory:
    """Inventory through an open session."""
    system = _Queries(lib)
    driver = system.call("driver_version", "nvmlSystemGetDriverVersion")
    cuda = system.call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
    nvml_version = system.call("nvml_version", "nvmlSystemGetNVMLVersion")
    gpus: list[GpuInfo] = []
    handles: list[tuple[int, Any]] = []
    for index in range(lib.nvmlDeviceGetCount()):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            gpus.append(_read_gpu(lib, index, handle))
        except lib.NVMLError as exc:
            system.errors[f"gpu {index}"] = error_name(exc)
            continue
        handles.append((index, handle))
    pairs = [_read_pair(lib, a, ha, b, hb) for pos, (a, ha) in enumerate(handles) for b, hb in handles[pos + 1 :]]
    return GpuInventory(
        available=True,
        reason="",
        driver_version=_text(driver),
        cuda_driver_version=cuda_version_string(cuda) if cuda is not None else None,
        nvml_version=_text(nvml_version),
        gpus=tuple(gpus),
        pairs=tuple(pairs),
        unsupported=frozenset(system.unsupported),
        errors=system.error_items(),
    )


def read_samples(lib: Nvml, *, clock: Callable[[], float] = time.time) -> list[GpuSample]:
    """One sample per GPU through an open session; GPUs that cannot be opened are skipped."""
    samples = []
    for index in range(lib.nvmlDeviceGetCount()):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except lib.NVMLError:
            continue
        samples.append(_read_sample(lib, index, handle, clock()))
    return samples


def error_name(exc: BaseException) -> str:
    """``NVMLError_NotSupported`` -> ``"NotSupported"``."""
    return type(exc).__name__.removeprefix("NVMLError_")


class _Queries:
    """Runs optional NVML queries for one device, remembering which were unsupported or failed."""

    def __init__(self, lib: Nvml) -> None:
        self.lib = lib
        self.unsupported: set[str] = set()
        self.errors: dict[str, str] = {}

    def call(self, query: str, function: str, *args: Any) -> Any:
        fn = getattr(self.lib, function, None)
        if fn is None:  # an older nvidia-ml-py without this binding
            self.unsupported.add(query)
            return None
        try:
            return fn(*args)
        except self.lib.NVMLError as exc:
            self.note(query, exc)
            return None

    def note(self, query: str, exc: BaseException) -> None:
        name = error_name(exc)
        if name in _UNSUPPORTED:
            self.unsupported.add(query)
        else:
            self.errors[query] = name

    def error_items(self) -> QueryErrors:
        return tuple(sorted(self.errors.items()))


def _read_gpu(lib: Nvml, index: int, handle: Any) -> GpuInfo:
    # Identity and memory are required: a GPU that cannot say these is reported as lost.
    uuid = lib.nvmlDeviceGetUUID(handle)
    name = lib.nvmlDeviceGetName(handle)
    memory = lib.nvmlDeviceGetMemoryInfo(handle)
    q = _Queries(lib)
    cc = q.call("compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    limit_mw = q.call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
    pci = q.call("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    brand = q.call("brand", "nvmlDeviceGetBrand", handle)
    arch = q.call("architecture", "nvmlDeviceGetArchitecture", handle)
    pcie = PcieLink(
        current_generation=q.call("pcie_current_generation", "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        max_generation=q.call("pcie_max_generation", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        current_width=q.call("pcie_current_width", "nvmlDeviceGetCurrPcieLinkWidth", handle),
        max_width=q.call("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", handle),
    )
    return GpuInfo(
        index=index,
        uuid=_text(uuid) or "",
        name=_text(name) or "",
        memory_total_bytes=int(memory.total),
        compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
        pcie=pcie,
        power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
        pci_bus_id=_text(pci.busId) if pci is not None else None,
        serial=_text(q.call("serial", "nvmlDeviceGetSerial", handle)) or None,
        brand=BRAND_NAMES.get(brand, f"brand {brand}") if brand is not None else None,
        architecture=ARCHITECTURE_NAMES.get(arch, f"arch {arch}") if arch is not None else None,
        nvlink_active_links=_nvlink_active_links(lib, q, handle),
        unsupported=frozenset(q.unsupported),
        errors=q.error_items(),
    )


def _nvlink_active_links(lib: Nvml, q: _Queries, handle: Any) -> int:
    """Count active links, scanning until the driver says there are no more."""
    active = 0
    for link in range(int(getattr(lib, "NVML_NVLINK_MAX_LINKS", _NVLINK_MAX_LINKS_FALLBACK))):
        try:
            state = lib.nvmlDeviceGetNvLinkState(handle, link)
        except lib.NVMLError as exc:
            if error_name(exc) not in _NVLINK_END:
                q.note("nvlink", exc)
            elif link == 0:
                q.unsupported.add("nvlink")
            break
        if state == _NVLINK_ACTIVE:
            active += 1
    return active


def _read_pair(lib: Nvml, a: int, ha: Any, b: int, hb: Any) -> GpuPair:
    q = _Queries(lib)
    status = {cap: q.call(f"p2p_{cap}", "nvmlDeviceGetP2PStatus", ha, hb, idx) for cap, idx in P2P_INDICES.items()}
    names = {cap: _named(P2P_STATUS_NAMES, value, "status") for cap, value in status.items()}
    topology = q.call("topology", "nvmlDeviceGetTopologyCommonAncestor", ha, hb)
    return GpuPair(
        a=a,
        b=b,
        p2p=P2PStatus(**names),
        topology=_named(TOPOLOGY_NAMES, topology, "level"),
        unsupported=frozenset(q.unsupported),
        errors=q.error_items(),
    )


def _read_sample(lib: Nvml, index: int, handle: Any, timestamp: float) -> GpuSample:
    q = _Queries(lib)
    uuid = q.call("uuid", "nvmlDeviceGetUUID", handle)
    util = q.call("utilization", "nvmlDeviceGetUtilizationRates", handle)
    memory = q.call("memory", "nvmlDeviceGetMemoryInfo", handle)
    power_mw = q.call("power_w", "nvmlDeviceGetPowerUsage", handle)
    if hasattr(lib, "nvmlDeviceGetTemperatureV"):
        temperature = q.call("temperature_c", "nvmlDeviceGetTemperatureV", handle, _TEMPERATURE_GPU)
    else:  # nvidia-ml-py older than the V call; the plain one is deprecated, not gone
        temperature = q.call("temperature_c", "nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU)
    procs = q.call("processes", "nvmlDeviceGetComputeRunningProcesses", handle)
    return GpuSample(
        index=index,
        uuid=_text(uuid),
        timestamp=timestamp,
        utilization_gpu_percent=util.gpu if util is not None else None,
        utilization_memory_percent=util.memory if util is not None else None,
        memory_used_bytes=int(memory.used) if memory is not None else None,
        memory_total_bytes=int(memory.total) if memory is not None else None,
        power_w=power_mw / 1000 if power_mw is not None else None,
        temperature_c=temperature,
        sm_clock_mhz=q.call("sm_clock_mhz", "nvmlDeviceGetClockInfo", handle, _CLOCK_SM),
        memory_clock_mhz=q.call("memory_clock_mhz", "nvmlDeviceGetClockInfo", handle, _CLOCK_MEM),
        energy_mj=q.call("energy_mj", "nvmlDeviceGetTotalEnergyConsumption", handle),
        fan_percent=q.call("fan_percent", "nvmlDeviceGetFanSpeed", handle),
        processes=(
            tuple(GpuProcess(pid=p.pid, used_memory_bytes=p.usedGpuMemory) for p in procs)
            if procs is not None
            else None
        ),
        unsupported=frozenset(q.unsupported),
        errors=q.error_items(),
    )


def _named(names: dict[int, str], value: int | None, prefix: str) -> str | None:
    if value is None:
        return None
    return names.get(value, f"{prefix}_{value}")


def _text(value: str | bytes | None) -> str | None:
    """Strings as str: nvidia-ml-py before 11.515 returned bytes."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _import_pynvml() -> Nvml:
    try:
        import pynvml  # lazy on purpose: only GPU hosts load it
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py (pynvml) is not installed: {exc}") from exc
    return pynvml


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
