"""The panel's own flow on a GPU host, end to end, recorded for fixtures.

Starts the embedded panel (`python -m embedded`: private Redis, Celery worker,
this host's agent, gunicorn; SQLite) as `scripts/run` does after its setup, then drives it
through the services a user's clicks call (as bench/bench_soak.py does):

1. import the GGUF (model_variant_import_gguf), record r1 (all layers on the GPU, flash
   attention on) and r2 (another context size and batch), switch to r1, to r2, back to r1;
2. a benchmark sweep on r1 (the agent's load generator, energy from NVML's counter);
3. while each revision serves and while the benchmark runs: NVML read through the probe
   (`read_samples`) wrapped in RecordingNvml (the raw calls, for replay in CI), per-process
   GPU memory against the planner's prediction, /metrics text, the engine's start-up log and
   its `llama_kv_cache` lines against the planner's KV size;
4. Ctrl-C (SIGINT) to the supervisor; what is left running.

Everything lands in --out (at most 8 files: flow.json, nvml_live.json, logs.tar.gz, ...).

    python3 tools/gpu_run/flow.py --data /root/cpgpu/data --models /root/cpgpu/models \
        --model rand-llama-1b-f16.gguf --out $OUT          # on the GPU host
    python3 tools/gpu_run/flow.py ... --cpu                 # the CPU rehearsal (n_gpu_layers 0)
    python3 tools/gpu_run/flow.py ... --tune                # instead: a tuning run (tools/gpu_run/tune.py)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def manage(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


class Nvml:
    """NVML through the project's probe, every call recorded (None where there is no NVML)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sessions: dict[str, dict[str, Any]] = {}
        try:
            import pynvml

            from hostagent.probes.replay import RecordingNvml

            pynvml.nvmlInit()
            self.rec: Any = RecordingNvml(pynvml)
        except Exception as exc:  # no driver: the CPU rehearsal
            log(f"NVML not available: {exc}")
            self.rec = None

    def samples(self) -> list[dict[str, Any]]:
        if self.rec is None:
            return []
        from hostagent.probes.nvml import read_samples

        with self.lock:
            return [s.to_dict() for s in read_samples(self.rec)]

    def inventory(self) -> dict[str, Any] | None:
        if self.rec is None:
            return None
        from hostagent.probes.nvml import read_inventory

        with self.lock:
            return read_inventory(self.rec).to_dict()

    def take(self, name: str, result: Any) -> None:
        if self.rec is None:
            return
        with self.lock:
            self.sessions[name] = {"calls": self.rec.take(), "result": result}


def series(nvml: Nvml, name: str, stop: threading.Event, interval: float, limit: int = 400) -> threading.Thread:
    """Sample every `interval` s until `stop`, then keep the recorded calls as session `name`."""

    def run() -> None:
        got: list[dict[str, Any]] = []
        while not stop.is_set() and len(got) < limit:
            got.append({"t": time.time(), "gpus": nvml.samples()})
            stop.wait(interval)
        nvml.take(name, got)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def main() -> int:  # noqa: C901 - one script, one flow
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--model", required=True, help="a .gguf file in --models")
    parser.add_argument("--out", required=True)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--concurrency", default="1,2,4,8,16")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--input-tokens", type=int, default=512)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--partial", action="store_true", help="then switch to r3: 8 layers on the GPU, -fa off")
    parser.add_argument("--gate", action="store_true", help="then two gated switches from r1 (issue 28)")
    parser.add_argument("--tune", action="store_true", help="instead: a tuning run from a plain base (issue 43)")
    parser.add_argument("--tune-trials", type=int, default=6, help="with --tune: candidates measured at most")
    parser.add_argument("--tune-minutes", type=int, default=3, help="with --tune: no candidate starts after this")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        CONTROLPANEL_DATA_DIR=args.data,
        CONTROLPANEL_MODEL_DIRS=args.models,
        DJANGO_SETTINGS_MODULE="controlpanel.settings",
    )
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.pop("DATABASE_URL", None)
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    figures: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": args.cpu}
    nvml = Nvml()
    figures["inventory"] = nvml.inventory()
    nvml.take("inventory", figures["inventory"])
    figures["idle"] = nvml.samples()
    nvml.take("idle", figures["idle"])

    t = time.monotonic()
    os.umask(0o077)
    manage("migrate", "--noinput", "-v0")
    manage("collectstatic", "--noinput", "-v0")
    manage("catalog", "load")
    figures["register_local"] = manage("host", "register-local").strip().splitlines()[-3:]
    admin = manage("ensure_admin")
    figures["setup_s"] = round(time.monotonic() - t, 1)
    log(f"setup done in {figures['setup_s']} s: {figures['register_local']}")

    t = time.monotonic()
    panel_log = Path(args.data) / "logs" / "panel.out.log"  # comes back inside logs.tar.gz
    panel_log.parent.mkdir(parents=True, exist_ok=True)
    panel = subprocess.Popen(
        [sys.executable, "-m", "embedded", "--bind", f"127.0.0.1:{args.port}"],
        cwd=ROOT,
        stdout=open(panel_log, "wb"),  # noqa: SIM115 - handed to the child
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    import httpx

    logs = Path(args.data) / "logs"

    def ready_count() -> int:
        return sum(
            (logs / f"{n}.log").read_text(errors="replace").count(" ready.")
            for n in ("worker", "agent")
            if (logs / f"{n}.log").exists()
        )

    deadline = time.monotonic() + 120
    while True:
        if panel.poll() is not None:
            raise SystemExit(f"the panel exited:\n{panel_log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the panel did not come up:\n{panel_log.read_text()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{args.port}/healthz", timeout=2).status_code == 200 and ready_count() >= 2:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    figures["panel_up_s"] = round(time.monotonic() - t, 1)
    log(f"panel up in {figures['panel_up_s']} s")
    del admin

    try:
        run_flow(args, figures, nvml, out)
    finally:
        t = time.monotonic()
        os.kill(panel.pid, signal.SIGINT)  # Ctrl-C
        try:
            panel.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(panel.pid, signal.SIGKILL)
        figures["stop"] = {"returncode": panel.returncode, "seconds": round(time.monotonic() - t, 1)}
        left = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=False).stdout
        figures["stop"]["left_running"] = [line for line in left.splitlines() if "llama-server" in line]
        figures["after_stop"] = nvml.samples()
        nvml.take("after_stop", figures["after_stop"])
        figures["total_s"] = round(time.monotonic() - T0, 1)
        (out / "flow.json").write_text(json.dumps(figures, indent=1, default=str))
        if nvml.rec is not None:
            from hostagent.probes.replay import FORMAT

            (out / "nvml_live.json").write_text(json.dumps({"format": FORMAT, "sessions": nvml.sessions}))
        with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
            for path in sorted(Path(args.data).rglob("*")):
                rel = path.relative_to(args.data)
                if path.is_file() and rel.parts[:2] != ("host", "venvs") and path.suffix in (".log", ".json", ".txt"):
                    tar.add(path, arcname=str(rel))
        log(f"done: {json.dumps({k: figures.get(k) for k in ('setup_s', 'panel_up_s', 'stop', 'total_s')})}")
    return 0


def run_flow(args: argparse.Namespace, figures: dict[str, Any], nvml: Nvml, out: Path) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from deployments.models import BenchmarkRun, Operation
    from deployments.planning import revision_plan
    from deployments.runtime_bridge import spec_for_values
    from deployments.services.benchmarks import benchmark_export, benchmark_request, profile_from_input
    from deployments.services.imports import model_variant_import_gguf
    from deployments.services.revisions import revision_create
    from deployments.services.switch import switch_request
    from hardware.models import GpuSample, Host
    from serving.engines.registry import get_adapter

    actor = get_user_model().objects.filter(is_superuser=True).first()
    host = Host.objects.get()
    figures["host"] = {"name": host.name, "gpus": list(host.gpus.values("index", "name", "memory_bytes"))}
    adapter = get_adapter("llama.cpp")

    def wait(op: Operation, timeout: float = 300) -> Operation:
        end = time.monotonic() + timeout
        while op.state in ("queued", "running") and time.monotonic() < end:
            time.sleep(0.1)
            op = Operation.objects.get(pk=op.pk)
        return op

    t = time.monotonic()
    model = model_variant_import_gguf(path=str(Path(args.models) / args.model), name="rand-llama-1b-f16", actor=actor)
    figures["import_s"] = round(time.monotonic() - t, 2)
    gpu = {} if args.cpu else {"n_gpu_layers": "all", "flash_attn": "on"}
    # log_verbosity 4: this build hides the `llama_kv_cache: size = ...` lines at its default 3
    common = {"metrics": True, "log_verbosity": 4, **gpu}

    def rand(knobs: dict[str, Any], message: str) -> Any:
        """A llama.cpp b11434 revision of the imported model on port 8089 with `knobs`."""
        spec = spec_for_values(
            engine="llama.cpp", engine_version="b11434", model=model, served_name="rand", port=8089, knobs=knobs, env={}
        )
        return revision_create(host=host, spec=spec, message=message, actor=actor)

    revs = [
        rand({"ctx_size": 32768, "parallel": 16, **common}, "all layers on the GPU, 16 slots of 2048"),
        rand(
            {
                "ctx_size": 131072,
                "parallel": 8,
                "batch_size": 4096,
                "ubatch_size": 1024,
                **common,
                **({} if args.cpu else {"split_mode": "none"}),
            },
            "longer context, bigger batch",
        ),
    ]
    engine_log = Path(args.data) / "host" / host.name / "engine.log"  # HOST_STATE_DIR/<host>/engine.log
    if args.partial:
        # 8 of 16 layers on the GPU, flash attention off: the planner's partial offload on a real GPU
        revs.append(
            rand(
                {"ctx_size": 8192, "parallel": 4, "metrics": True, "log_verbosity": 4}
                | ({} if args.cpu else {"n_gpu_layers": 8, "flash_attn": "off"}),
                "half the layers on the GPU, flash attention off",
            )
        )
    figures["switches"] = []

    def switch_to(i: int, rev: Any) -> bool:
        offset = engine_log.stat().st_size if engine_log.exists() else 0
        t = time.monotonic()
        op = wait(switch_request(revision=rev, actor=actor))
        took = time.monotonic() - t
        host.refresh_from_db()
        startup = engine_log.read_text(errors="replace")[offset:] if engine_log.exists() else ""
        (out / f"engine_startup_r{rev.number}_{i}.log").write_text(startup) if i < 2 else None
        report = revision_plan(rev).checked()
        kv = adapter.parse_kv_capacity(startup)
        time.sleep(1.0)  # let the engine settle before reading its memory
        samples = nvml.samples()
        nvml.take(f"serving_r{rev.number}_{i}", samples)
        metrics = ""
        try:
            import httpx

            metrics = httpx.get(f"http://127.0.0.1:{rev.port}/metrics", timeout=5).text
        except Exception as exc:
            metrics = f"# unreachable: {exc}"
        if i == 0:
            (out / "metrics_r1_idle.txt").write_text(metrics)
        entry = {
            "revision": rev.number,
            "knobs": rev.knobs,
            "state": op.state,
            "error": op.error[:2000],
            "seconds": round(took, 2),
            "op_started_to_finished_s": (
                (op.finished_at - op.started_at).total_seconds() if op.finished_at and op.started_at else None
            ),
            "result": op.result,
            "engine_state": host.engine_state,
            "planner": report.to_dict(),
            "kv_from_log": {"tokens": kv.tokens, "bytes": kv.bytes, "details": kv.details},
            "gpu_samples": samples,
            "startup_lines": [
                line
                for line in startup.splitlines()
                if re.search(r"llama_kv_cache|CUDA|offload|load_tensors|model buffer|compute buffer|ggml_cuda", line)
            ][:80],
            "op_log_tail": op.log.splitlines()[-30:],
        }
        figures["switches"].append(entry)
        log(f"switch {i + 1} to r{rev.number}: {op.state} in {took:.1f} s; kv {kv.tokens} tokens {kv.bytes} B")
        return op.state == "succeeded"

    if args.tune:
        from tools.gpu_run.tune import tuning_flow

        tuning_flow(
            figures,
            nvml,
            make_revision=rand,
            switch_to=switch_to,
            actor=actor,
            wait=wait,
            cpu=args.cpu,
            series=series,
            trials=args.tune_trials,
            minutes=args.tune_minutes,
        )
        return
    for i, rev in enumerate((revs[0], revs[1], revs[0])):
        if not switch_to(i, rev):
            return

    host.refresh_from_db()
    profile = profile_from_input(
        name="sweep",
        concurrency=[int(c) for c in args.concurrency.split(",")],
        requests=args.requests,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
    )
    stop = threading.Event()
    sampler = series(nvml, "benchmark", stop, interval=0.5)
    t = time.monotonic()
    started = time.time()
    op = wait(benchmark_request(host=host, profile=profile, actor=actor), timeout=400)
    figures["benchmark_s"] = round(time.monotonic() - t, 1)
    stop.set()
    sampler.join(30)
    try:
        import httpx

        (out / "metrics_r1_after_bench.txt").write_text(
            httpx.get(f"http://127.0.0.1:{revs[0].port}/metrics", timeout=5).text
        )
    except Exception as exc:
        log(f"metrics after the benchmark: {exc}")
    run = BenchmarkRun.objects.filter(operation=op).first()
    figures["benchmark"] = {
        "state": op.state,
        "error": op.error[:2000],
        "export": benchmark_export(run) if run else None,
        "op_log_tail": op.log.splitlines()[-40:],
    }
    log(f"benchmark: {op.state} in {figures['benchmark_s']} s")
    from datetime import UTC, datetime

    since = datetime.fromtimestamp(started - 5, tz=UTC)
    figures["telemetry_rows"] = list(
        GpuSample.objects.filter(ts__gte=since)
        .order_by("ts")
        .values("ts", "util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "energy_mj")
    )
    figures["telemetry_rows_total"] = GpuSample.objects.count()
    if args.partial:
        switch_to(3, revs[2])
        switch_to(4, revs[0])
    if args.gate:
        gated_switches(figures, revs, nvml, actor=actor, wait=wait, cpu=args.cpu)


def gated_switches(figures: dict[str, Any], revs: list[Any], nvml: Nvml, *, actor: Any, wait: Any, cpu: bool) -> None:
    """Issue 28 on a real GPU: from r1, a gated switch to a revision made slower on purpose (it
    prefills 16 tokens at a time: the first token comes far later) must roll back, and one to a
    revision equal to r1 must stay. Each gate's verdict, its two runs (with llama.cpp's own
    per-request timings beside the panel's clock) and the GPU memory while each serves."""
    from deployments.choices import GATE_ACTIVE_STATES
    from deployments.models import BenchmarkRun, SwitchGate
    from deployments.planning import revision_plan
    from deployments.services.benchmarks import benchmark_export
    from deployments.services.gates import gate_from_input
    from deployments.services.revisions import revision_derive
    from deployments.services.switch import switch_request
    from serving.benchmarking.profiles import BenchmarkProfile

    base = revs[0]
    profile = BenchmarkProfile(
        name="gate-h200", concurrency=(1, 8), num_requests=24, input_tokens=512, output_tokens=256, warmup_requests=2
    )
    if cpu:  # the rehearsal: the same steps, a load a CPU finishes in seconds
        profile = BenchmarkProfile(name="gate-cpu", num_requests=4, input_tokens=96, output_tokens=8, warmup_requests=0)
    gate = gate_from_input(profile=profile, limits="decode=5,ttft_p95=15,j_per_token=10")
    slow, equal = (
        revision_derive(host=base.host, parent=base, changes=changes, message=message, actor=actor)
        for changes, message in (
            ({"set": {"batch_size": 16, "ubatch_size": 16}}, "prefill 16 tokens at a time (slower on purpose)"),
            ({"set": {}}, "the same as r1"),
        )
    )
    figures["gates"] = []
    for target in (slow, equal):
        t = time.monotonic()
        first = switch_request(revision=target, gate=gate, actor=actor)
        row = SwitchGate.objects.filter(baseline_op=first).first() or SwitchGate.objects.get(switch_op=first)
        peak: list[dict[str, Any]] = []
        while row.state in GATE_ACTIVE_STATES and time.monotonic() - t < 900:
            time.sleep(1.0)
            row.refresh_from_db()
            if row.state == "measuring" and not peak:
                peak = nvml.samples()  # the new revision serves: its memory under the gate's load
        for op in (row.baseline_op, row.switch_op, row.benchmark_op, row.rollback_op):
            if op is not None:
                wait(op, timeout=120)
        runs = {
            "baseline": row.baseline_run,
            "candidate": row.candidate_run or BenchmarkRun.objects.filter(operation=row.benchmark_op).first(),
        }
        entry = {
            "revision": target.number,
            "message": target.message,
            "state": row.state,
            "reason": row.reason,
            "verdict": row.verdict,
            "seconds": round(time.monotonic() - t, 1),
            "planner": revision_plan(target).checked().to_dict(),
            "gpu_samples_while_measured": peak,
            "runs": {k: benchmark_export(v) if v else None for k, v in runs.items()},
        }
        nvml.take(f"gate_r{target.number}", peak)
        figures["gates"].append(entry)
        log(f"gate to r{target.number}: {row.state} in {entry['seconds']} s ({row.reason[:200]})")


if __name__ == "__main__":
    raise SystemExit(main())
