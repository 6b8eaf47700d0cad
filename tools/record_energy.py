"""Measure GPU energy on a real GPU host with the project's own meter and probe, under load.

Runs `hostagent.runtime.energy.NvmlEnergyMeter` fed by `hostagent.probes.nvml.read_samples`
twice over the same bf16 matmul load: once with the NVML energy counter (what the benchmark
runner uses on Volta and newer) and once from power samples alone (its fallback on older
GPUs), and writes both readings as JSON for tests to check against each other.

    PYTHONPATH=. python3 tools/record_energy.py --kind nvidia-h200 --seconds 6 --out h200_energy.json
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hostagent.probes.nvml import nvml_session, probe_host_gpus, read_samples
from hostagent.runtime.energy import NvmlEnergyMeter
from tools.record_nvml import LOAD_SCRIPT, SAFE_ENV


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", required=True)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    inventory = probe_host_gpus()
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD_SCRIPT, str(args.seconds * 2 + 6)],
        env={**SAFE_ENV, **dict(__import__("os").environ)},
    )
    time.sleep(4.0)  # let the clocks and power settle under load
    readings = {}
    with nvml_session() as lib:
        for name, sampler in (
            ("counter", lambda: [(s.energy_mj, s.power_w or 0.0) for s in read_samples(lib)]),
            ("power", lambda: [(None, s.power_w or 0.0) for s in read_samples(lib)]),
        ):
            meter = NvmlEnergyMeter(sampler, interval_s=0.2)
            meter.start()
            time.sleep(args.seconds)
            readings[name] = asdict(meter.stop())
            # The raw samples (time, per GPU (energy mJ or None, power W)) for tests to replay.
            readings[name]["timeline"] = [[t, [list(g) for g in gpus]] for t, gpus in meter._timeline]
    load.wait(timeout=120)
    data = {
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine_kind": args.kind,
        "driver": inventory.driver_version,
        "gpus": [g.name for g in inventory.gpus],
        "nvidia_ml_py": importlib.metadata.version("nvidia-ml-py"),
        "command": " ".join(sys.argv),
        "load": "bf16 4096x4096 matmul loop (tools/record_nvml.py LOAD_SCRIPT), started 4 s before metering",
        "seconds_per_reading": args.seconds,
        "readings": readings,
    }
    Path(args.out).write_text(json.dumps(data, indent=1))
    print(json.dumps(readings, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
