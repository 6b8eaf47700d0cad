"""Record an NVML fixture on a real GPU host, through the project's own probe.

Runs ``hostagent.probes.nvml`` against the real ``pynvml`` wrapped in
:class:`hostagent.probes.replay.RecordingNvml`, so the fixture holds both the raw pynvml
answers (which the replay serves back in tests) and what the probe made of them:

- ``inventory_idle`` / ``inventory_load``: ``probe_host_gpus()`` at idle and under load
  (the current PCIe generation drops at idle);
- ``telemetry_idle`` / ``telemetry_load``: ``read_samples()`` every ``--interval`` seconds,
  the second series while a bf16 matmul loop (PyTorch, when present) runs on every GPU;
- ``self_pair``: P2P status (indices 0-4) and topology of GPU 0 with itself, for the record.

Usage, from the repository root on the GPU host::

    PYTHONPATH=. python3 tools/record_nvml.py --kind nvidia-h200 --out h200_x1.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hostagent.probes.host import probe_host
from hostagent.probes.nvml import nvml_session, probe_host_gpus, read_samples
from hostagent.probes.replay import FORMAT, RecordingNvml

# Multicast over NVLink must stay off on shared multi-GPU hosts (device KINDS.md).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

LOAD_SCRIPT = """
import sys, time, torch
n = torch.cuda.device_count()
mats = []
for d in range(n):
    a = torch.randn(4096, 4096, device=f"cuda:{d}", dtype=torch.bfloat16)
    mats.append((a, torch.randn_like(a)))
print(f"load: bf16 4096x4096 matmul loop on {n} GPU(s)", flush=True)
deadline = time.time() + float(sys.argv[1])
while time.time() < deadline:
    for a, b in mats:
        for _ in range(20):
            a @ b
    for d in range(n):
        torch.cuda.synchronize(d)
"""


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        import pynvml  # lazy: this script also runs where it is absent
    except ImportError as exc:
        print(f"pynvml not importable: {exc}", file=sys.stderr)
        return 2
    rec = RecordingNvml(pynvml)
    sessions: dict[str, dict[str, Any]] = {}

    inventory = probe_host_gpus(rec)
    sessions["inventory_idle"] = {"calls": rec.take(), "result": inventory.to_dict()}
    if not inventory.available:
        print(f"no GPUs to record: {inventory.reason}", file=sys.stderr)
        return 2
    _print_inventory(inventory.to_dict())
    sessions["self_pair"] = {"calls": _self_pair(rec), "result": None}
    sessions["telemetry_idle"] = _series(rec, args.idle_samples, args.interval)

    load = _start_load(seconds=args.samples * args.interval + 90)
    load_note = "none: PyTorch not importable; the telemetry_load series is idle too"
    if load is not None:
        peak = _wait_for_load(pynvml, timeout=60)
        load_note = f"bf16 4096x4096 matmul loop via PyTorch on every GPU (peak util {peak}% before sampling)"
    try:
        sessions["telemetry_load"] = _series(rec, args.samples, args.interval)
        loaded = probe_host_gpus(rec)
        sessions["inventory_load"] = {"calls": rec.take(), "result": loaded.to_dict()}
    finally:
        if load is not None:
            load.terminate()
            load.wait(timeout=30)

    fixture = {
        "format": FORMAT,
        "metadata": _metadata(args, inventory.to_dict(), load_note),
        "host": _host_section(),
        "nvml": {
            "functions": sorted(n for n in dir(pynvml) if n.startswith("nvml") and callable(getattr(pynvml, n))),
            "constants": {"NVML_NVLINK_MAX_LINKS": int(pynvml.NVML_NVLINK_MAX_LINKS)},
        },
        "sessions": sessions,
    }
    Path(args.out).write_text(json.dumps(fixture, indent=1) + "\n")
    _print_series(sessions["telemetry_load"]["result"])
    print(f"wrote {args.out}")
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", required=True, help="the machine kind, e.g. nvidia-h200")
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--idle-samples", type=int, default=8)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--command", default=None, help="the command line to record in the metadata")
    return parser.parse_args(argv)


def _series(rec: RecordingNvml, count: int, interval: float) -> dict[str, Any]:
    ticks = []
    with nvml_session(rec) as lib:
        for i in range(count):
            ticks.append([s.to_dict() for s in read_samples(lib)])
            if i + 1 < count:
                time.sleep(interval)
    return {"calls": rec.take(), "result": ticks}


def _self_pair(rec: RecordingNvml) -> list[dict[str, Any]]:
    """What the driver says for GPU 0 paired with itself (the probe never asks this)."""
    with nvml_session(rec) as lib:
        handle = lib.nvmlDeviceGetHandleByIndex(0)
        for index in range(5):  # READ, WRITE, NVLINK, ATOMICS, PCI
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlDeviceGetP2PStatus(handle, handle, index)
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlDeviceGetTopologyCommonAncestor(handle, handle)
    return rec.take()


def _start_load(seconds: float) -> subprocess.Popen[bytes] | None:
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    env = {**os.environ, **SAFE_ENV}
    return subprocess.Popen([sys.executable, "-c", LOAD_SCRIPT, str(seconds)], env=env)


def _wait_for_load(pynvml: Any, timeout: float) -> int:
    """Poll (unrecorded) until GPU 0 is busy, so the load series starts loaded."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        deadline = time.time() + timeout
        peak = 0
        while time.time() < deadline:
            peak = max(peak, pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            if peak >= 90:
                time.sleep(1.0)  # let power and clocks ramp
                break
            time.sleep(0.25)
        return int(peak)
    finally:
        pynvml.nvmlShutdown()


def _metadata(args: argparse.Namespace, inventory: dict[str, Any], load_note: str) -> dict[str, Any]:
    try:
        import torch

        torch_version: str | None = torch.__version__
    except ImportError:
        torch_version = None
    return {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine_kind": args.kind,
        "gpu_count": len(inventory["gpus"]),
        "driver": inventory["driver_version"],
        "cuda_driver": inventory["cuda_driver_version"],
        "nvml": inventory["nvml_version"],
        "nvidia_ml_py": importlib.metadata.version("nvidia-ml-py"),
        "python": platform.python_version(),
        "torch": torch_version,
        "kernel": platform.release(),
        "command": args.command or " ".join([Path(sys.executable).name, *sys.argv]),
        "environment": {k: os.environ.get(k) for k in (*SAFE_ENV, "CUDA_VISIBLE_DEVICES")},
        "load": load_note,
        "sample_interval_s": args.interval,
    }


def _host_section() -> dict[str, Any]:
    raw = {}
    for name, path in (
        ("cpuinfo", "/proc/cpuinfo"),
        ("meminfo", "/proc/meminfo"),
        ("os_release", "/etc/os-release"),
    ):
        try:
            raw[name] = Path(path).read_text()
        except OSError:
            raw[name] = ""
    return {"probe": probe_host().to_dict(), "raw": raw}


def _print_inventory(inv: dict[str, Any]) -> None:
    print(f"driver {inv['driver_version']}  CUDA {inv['cuda_driver_version']}  NVML {inv['nvml_version']}")
    for gpu in inv["gpus"]:
        print(
            f"  gpu {gpu['index']}: {gpu['name']} {gpu['memory_total_bytes'] / 2**30:.1f} GiB "
            f"cc {gpu['compute_capability']} pcie {gpu['pcie']} limit {gpu['power_limit_w']} W "
            f"nvlink {gpu['nvlink_active_links']} unsupported {gpu['unsupported']} errors {gpu['errors']}"
        )
    for pair in inv["pairs"]:
        print(f"  pair {pair['a']}-{pair['b']}: {pair['p2p']} topology {pair['topology']}")


def _print_series(ticks: list[list[dict[str, Any]]]) -> None:
    for tick in ticks:
        print(
            "  "
            + " | ".join(
                f"gpu{s['index']} {s['utilization_gpu_percent']}% {s['power_w']} W {s['temperature_c']} C "
                f"E={s['energy_mj']} mJ procs={len(s['processes'] or ())}"
                for s in tick
            )
        )


if __name__ == "__main__":
    raise SystemExit(main())
