"""Two models, room for one (or two): the front door against llama.cpp's own router, on the same load.

The same llama-server binary runs both sides, and the same two GGUFs under two names (`a` and
`b`, symlinks in one folder; `--model-b` a second GGUF, else the first one twice): the front door
in its own process (`python -m hostagent.frontdoor` with `--budget` room for `--room` models, its
ProcessLoader starting one llama-server per model), against `llama-server --models-dir DIR
--models-max ROOM` (the router starts its own children). The load:
N streams, M requests in all (M / N each, one after another), stream s's i-th request for `a`
when s + i is even (requests alternate between the models), streamed chat, K output tokens, one
connection per request. Runs alternate door / router `--runs` times, so the machine's drift falls
on both. Printed per run and side: time to first token p50 / p99, wall time, loads (each side's
count: the door's frontdoor_loads_total{result="ok"}, the router's models seen going to
"loading" on its /models, polled every 20 ms), failed requests (not 200, or a stream without
`[DONE]`). `--json FILE` also writes every run's figures (each request's TTFT, the door's swap
timeline from `frontdoor_swap_phase_seconds` and its log's swap lines): what tests/fixtures/gpu/ keeps.
`--baseline DIR` also runs the door of another checkout (e.g. `git archive main | tar -x -C DIR`)
in each run, between this one's and the router, to hold a change against the door it replaces on
the same load.

    .venv/bin/python bench/bench_swap_vs_router.py [--streams 4] [--requests 12] [--tokens 16] [--runs 1]
        [--threads 1] [--slots 4] [--turn 5] [--stop-grace 10] [--llama-server PATH] [--model GGUF]
        [--model-b GGUF] [--room 1] [--gpu-layers 0] [--json FILE] [--baseline DIR]

On a GPU host: `--llama-server` a CUDA build, `--model` a GGUF, `--gpu-layers 99`, and the door's
budget in the device's bytes (`--budget gpu0=...`, planned bytes per model `--planned`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_frontdoor import front_door  # noqa: E402
from bench.bench_loadgen import wait_healthy  # noqa: E402
from serving.benchmarking.stats import percentile  # noqa: E402
from tests.support.llama import free_port, gemma_model_path, llama_server_binary  # noqa: E402

MIB = 1 << 20
MODELS = ("a", "b")


@dataclass
class Outcome:
    ttft: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    wall: float = 0.0
    loads: int = 0
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # the door's: "model phase" -> sum, count
    log: list[str] = field(default_factory=list)  # the door's swap lines


async def one(url: str, model: str, text: str, tokens: int, out: Outcome) -> None:
    """One streamed chat on its own connection: its time to first token, or why it failed."""
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": tokens, "stream": True}
    started = time.perf_counter()
    first: float | None = None
    received = b""
    try:
        connector = aiohttp.TCPConnector(force_close=True)
        timeout = aiohttp.ClientTimeout(total=900)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(f"{url}/v1/chat/completions", json=body) as resp,
        ):
            async for chunk in resp.content.iter_any():
                if first is None and b'"content"' in chunk:
                    first = time.perf_counter() - started
                received += chunk
            status = resp.status
    except aiohttp.ClientError as exc:
        out.failed.append(repr(exc)[:200])
        return
    if status != 200 or b"data: [DONE]" not in received:
        out.failed.append(f"{status} {received[-200:]!r}")
        return
    out.ttft.append(first if first is not None else time.perf_counter() - started)


async def load(url: str, streams: int, requests: int, tokens: int) -> Outcome:
    out = Outcome()
    each = max(1, requests // streams)

    async def stream(s: int) -> None:
        for i in range(each):
            await one(url, MODELS[(s + i) % 2], f"Stream {s}, turn {i}: say something.", tokens, out)

    started = time.perf_counter()
    await asyncio.gather(*(stream(s) for s in range(streams)))
    out.wall = time.perf_counter() - started
    return out


def engine_flags(args: argparse.Namespace) -> list[str]:
    flags = ["-c", str(args.context), "-np", str(args.slots), "-t", str(args.threads)]
    return flags + ["-ngl", str(args.gpu_layers), *args.engine_arg]


def door_run(args: argparse.Namespace, folder: Path, root: Path = ROOT) -> Outcome:
    ports = {name: free_port() for name in MODELS}
    models = [
        {
            "name": name, "upstream": f"http://127.0.0.1:{port}", "mode": "on-demand", "idle_ttl_s": None,
            "memory": {args.device: args.planned}, "threads": args.threads if args.gpu_layers == 0 else None,
        }
        for name, port in ports.items()
    ]  # fmt: skip
    argvs = {
        name: [args.llama_server, "-m", str(folder / f"{name}.gguf"), "--host", "127.0.0.1", "--port", str(port)]
        + engine_flags(args)
        + ["-a", name]
        for name, port in ports.items()
    }
    os.environ["CONTROLPANEL_FRONT_DOOR_TURN"] = str(args.turn)
    extra = ("--stop-grace", str(args.stop_grace))
    budget = args.planned * args.room
    with front_door(models, argvs, budget=budget, budget_device=args.device, extra=extra, root=root) as door:
        out = asyncio.run(load(door.url, args.streams, args.requests, args.tokens))
        text = httpx.get(f"{door.url}/metrics", timeout=10).text
        out.loads = round(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("frontdoor_loads_total{") and 'result="ok"' in line
            )
        )
        out.phases = swap_phases(text)
        if door.log is not None:
            out.log = [line for line in door.log.read_text(errors="replace").splitlines() if "front door:" in line]
    return out


def swap_phases(text: str) -> dict[str, dict[str, float]]:
    """The door's frontdoor_swap_phase_seconds per model and phase: seconds in all, and how many."""
    phases: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        for kind in ("sum", "count"):
            if line.startswith(f"frontdoor_swap_phase_seconds_{kind}{{"):
                labels = dict(part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(","))
                key = f"{labels['model'].strip(chr(34))} {labels['phase'].strip(chr(34))}"
                phases.setdefault(key, {})[kind] = float(line.rsplit(" ", 1)[1])
    return phases


def router_run(args: argparse.Namespace, folder: Path) -> Outcome:
    port = free_port()
    argv = [args.llama_server, "--models-dir", str(folder), "--models-max", str(args.room), "--host", "127.0.0.1"]
    argv += ["--port", str(port), *engine_flags(args)]
    log = (folder / "router.log").open("ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{url}/health", timeout=60)

        async def measured() -> Outcome:
            loads = 0
            seen = dict.fromkeys(MODELS, "unloaded")
            running = asyncio.Event()

            async def watch() -> None:
                nonlocal loads
                async with aiohttp.ClientSession() as session:
                    while not running.is_set():
                        try:
                            async with session.get(f"{url}/models") as resp:
                                for model in (await resp.json())["data"]:
                                    state = model["status"]["value"]
                                    if state in ("loading", "loaded") and seen.get(model["id"]) == "unloaded":
                                        loads += 1
                                    seen[model["id"]] = state
                        except (aiohttp.ClientError, ValueError, KeyError):
                            pass
                        await asyncio.sleep(0.02)

            watcher = asyncio.ensure_future(watch())
            out = await load(url, args.streams, args.requests, args.tokens)
            running.set()
            await watcher
            out.loads = loads
            return out

        return asyncio.run(measured())
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()


def row(name: str, out: Outcome) -> str:
    p50 = statistics.median(out.ttft) if out.ttft else float("nan")
    p99 = percentile(out.ttft, 99) if out.ttft else float("nan")
    return f"| {name} | {p50:.2f} s | {p99:.2f} s | {out.wall:.1f} s | {out.loads} | {len(out.failed)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--requests", type=int, default=12, help="requests in all, spread over the streams")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--gpu-layers", type=int, default=0)
    parser.add_argument("--turn", type=float, default=5.0, help="the door's CONTROLPANEL_FRONT_DOOR_TURN")
    parser.add_argument("--stop-grace", type=float, default=10.0, help="the door's --stop-grace (0: hard stop)")
    parser.add_argument("--llama-server", default="")
    parser.add_argument("--model", default="")
    parser.add_argument("--model-b", default="", help="the second model's GGUF (default: --model again)")
    parser.add_argument("--room", type=int, default=1, help="models that fit at once (door budget, --models-max)")
    parser.add_argument("--json", default="", help="append every run's figures to this JSON file")
    parser.add_argument("--device", default="ram", help="the door's budget device (gpu0 on a GPU host)")
    parser.add_argument("--planned", type=int, default=400 * MIB, help="planned bytes per model: room for one")
    parser.add_argument("--engine-arg", action="append", default=[], help="more llama-server flags, both sides")
    parser.add_argument("--baseline", default="", help="also run the door of the checkout in this folder, each run")
    args = parser.parse_args()
    if args.baseline and not (Path(args.baseline) / "hostagent" / "frontdoor").is_dir():
        parser.error(f"--baseline {args.baseline} holds no checkout (no hostagent/frontdoor in it)")
    args.llama_server = args.llama_server or llama_server_binary()
    model = Path(args.model or gemma_model_path()).resolve()
    gguf = {"a": model, "b": Path(args.model_b).resolve() if args.model_b else model}
    folder = Path(tempfile.mkdtemp(prefix="bench-swap-"))
    for name in MODELS:
        (folder / f"{name}.gguf").symlink_to(gguf[name])
    room = "room for one" if args.room == 1 else f"room for {args.room}"
    shape = f"{args.streams} streams x {args.requests} requests, {args.tokens} tokens, alternating a/b, {room}"
    door = f"door turn {args.turn:g} s, stop grace {args.stop_grace:g} s"
    print(f"{shape}; engines: {' '.join(engine_flags(args))}; {door}; {os.cpu_count()} CPUs")
    print("| run | TTFT p50 | TTFT p99 | wall | loads | failed |")
    print("| --- | --- | --- | --- | --- | --- |")
    errors: list[str] = []
    records = []
    sides: list[tuple[str, Callable[[argparse.Namespace, Path], Outcome]]] = [("door", door_run)]
    if args.baseline:
        baseline = Path(args.baseline).resolve()
        sides.append(("baseline", lambda args, folder: door_run(args, folder, baseline)))
    sides.append(("router", router_run))
    for run in range(1, args.runs + 1):
        for name, side in sides:
            out = side(args, folder)
            print(row(f"{run}: {name}", out), flush=True)
            errors += out.failed
            records.append({"run": run, "side": name, **asdict(out)})
    for error in sorted(set(errors))[:5]:
        print(f"failed: {error}")
    if args.json:
        path = Path(args.json)
        kept = json.loads(path.read_text()) if path.is_file() else []
        setup = {k: v for k, v in vars(args).items() if k != "json"}
        kept.append({"shape": shape, "args": setup, "cpus": os.cpu_count(), "runs": records})
        path.write_text(json.dumps(kept, indent=1))
    print(json.dumps({"folder": str(folder)}))


if __name__ == "__main__":
    main()
