"""Copy what the H200 run brought back (run's files under /work/.device/N) into
tests/fixtures/gpu/h200/, trimmed to what the replay tests read (no per-request raw timings).

    python3 tools/gpu_run/fixtures.py --build /work/.device/1 --flow /work/.device/2 --sweep /work/.device/3
    python3 tools/gpu_run/fixtures.py --gate /work/.device/2     # a run of flow.py --gate alone
"""

from __future__ import annotations

import argparse
import json
import shutil
import tarfile
from pathlib import Path

DEST = Path(__file__).resolve().parent.parent.parent / "tests" / "fixtures" / "gpu" / "h200"


def trimmed_flow(path: Path) -> dict[str, object]:
    flow = json.loads(path.read_text())
    exports = [(flow.get("benchmark") or {}).get("export")]
    exports += [run for gate in flow.get("gates") or [] for run in (gate.get("runs") or {}).values()]
    for export in exports:
        # per-request records stay (the energy maths counts their tokens); inter-token gaps go
        for record in (export or {}).get("raw") or []:
            record.pop("itl_ms", None)
    return flow


def nvml_fixture(live: Path, recorded_with: dict[str, object]) -> dict[str, object]:
    """The run's RecordingNvml sessions in the layout of tests/fixtures/nvml (ReplayNvml.from_fixture)."""
    data = json.loads(live.read_text())
    known = json.loads((DEST.parent.parent / "nvml" / "h200_x1.json").read_text())
    return {
        "format": data["format"],
        "metadata": recorded_with,
        # pynvml's function table: the same nvidia-ml-py (13.615.71) as tests/fixtures/nvml/h200_x1.json
        "nvml": known["nvml"],
        "sessions": data["sessions"],
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build")
    parser.add_argument("--flow")
    parser.add_argument("--sweep")
    parser.add_argument("--partial", help="a run of flow.py --partial (r3: -ngl 8, -fa off)")
    parser.add_argument("--gate", help="a run of flow.py --gate (issue 28's two gated switches from r1)")
    args = parser.parse_args()
    DEST.mkdir(parents=True, exist_ok=True)
    if args.gate:
        (DEST / "flow_gate.json").write_text(json.dumps(trimmed_flow(Path(args.gate) / "flow.json"), indent=1))
    if not (args.build and args.flow and args.sweep):
        if not args.gate:
            parser.error("--build, --flow and --sweep (a whole first run), or --gate")
        return 0
    build, flow, sweep = Path(args.build), Path(args.flow), Path(args.sweep)
    for name in ("build.json", "install.log", "machine.txt", "gguf.txt"):
        shutil.copyfile(build / name, DEST / name)
    meta = {
        "recorded_at": json.loads((flow / "flow.json").read_text())["started"],
        "machine_kind": "nvidia-h200",
        "nvidia_ml_py": "13.615.71",
        "command": "tools/gpu_run/flow.py (see README.md): hostagent.probes.nvml.read_samples through RecordingNvml",
    }
    (DEST / "nvml_live.json").write_text(json.dumps(nvml_fixture(flow / "nvml_live.json", meta)))
    shutil.copyfile(flow / "engine_startup_r1_0.log", DEST / "engine_startup_r1.log")
    shutil.copyfile(flow / "engine_startup_r2_1.log", DEST / "engine_startup_r2.log")
    shutil.copyfile(flow / "metrics_r1_idle.txt", DEST / "metrics_r1_idle.txt")
    shutil.copyfile(flow / "metrics_r1_after_bench.txt", DEST / "metrics_r1_after_bench.txt")
    (DEST / "flow.json").write_text(json.dumps(trimmed_flow(flow / "flow.json"), indent=1))
    (DEST / "flow_sweep.json").write_text(json.dumps(trimmed_flow(sweep / "flow.json"), indent=1))
    if args.partial:
        partial = Path(args.partial)
        (DEST / "flow_partial.json").write_text(json.dumps(trimmed_flow(partial / "flow.json"), indent=1))
        with tarfile.open(partial / "logs.tar.gz") as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("/engine.log"))
            engine_log = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
        # the fourth engine start: r3
        (DEST / "engine_startup_r3.log").write_text("===== argv: " + engine_log.split("===== argv: ")[4])
        meta = {
            "recorded_at": json.loads((partial / "flow.json").read_text())["started"],
            "machine_kind": "nvidia-h200",
            "nvidia_ml_py": "13.615.71",
            "command": "tools/gpu_run/flow.py --partial: the read 1 s after the switch to r3",
        }
        live = nvml_fixture(partial / "nvml_live.json", meta)
        live["sessions"] = {k: v for k, v in live["sessions"].items() if k in ("inventory", "serving_r3_3")}  # type: ignore[attr-defined]
        (DEST / "nvml_live_partial.json").write_text(json.dumps(live))
    for path in sorted(DEST.iterdir()):
        print(f"{path.stat().st_size:>9} {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
