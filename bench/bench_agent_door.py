"""What the agent's front door costs, with the real llama-server and Gemma 3 270M: the door as the
agent runs it (FrontDoorService: its thread and event loop, the agent's loader, supervisors,
preflight and health gate), not the data plane alone (bench/bench_frontdoor.py, whose load
generator, overhead report and swap clients this reuses).

1. Door start: FrontDoorService.start() (stop leftovers, read the kept table, listen) with no
   table, then with a kept table of one on-demand revision.
2. Cold start: the engine's own load (the same argv the agent's launch makes, process start to a
   healthy /health) plus a warm request's first token, against the first token through the door
   for an unloaded on-demand revision (the agent's preflight, supervisor start and health gate,
   then the request), medians of `--rounds`. The door's own `last_load_s` is the loader's part.
3. Overhead (`--only overhead`): the host's pinned engine (the agent's own supervisor started it)
   called directly and through the agent's door, at 1 and 64 streams: TTFT p50/p99, decode tok/s
   per stream, and the CPU of the process the door runs in (a child running FrontDoorService, as
   `manage.py agent` does, its panel away) against the engine's, over the timed runs.
4. Swap under load (`--only swap`): 8 streaming clients alternating two on-demand revisions whose
   planned memory lets the host's real free RAM hold one: failed requests, queue wait p50/p99.

    .venv/bin/python bench/bench_agent_door.py [--rounds 3] [--short] [--only start cold overhead swap]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings_agent")


def serve(state: Path, port: int) -> None:
    """The child: the agent's door over the serving answer kept in `state`, its panel away, until SIGTERM."""
    import threading

    from hostagent.context import AgentContext
    from hostagent.door.service import FrontDoorService
    from hostagent.frontdoor import FrontDoorSettings
    from hostagent.panel import HttpPanel
    from hostagent.runtime.supervisor import Supervisor
    from tests.support.llama import free_port

    panel = HttpPanel(f"http://127.0.0.1:{free_port()}", "cph_bench", outbox_dir=state / "outbox", timeout=2)
    ctx = AgentContext(host="bench", panel=panel, supervisor=Supervisor(state / "host"))
    settings = FrontDoorSettings(
        host="127.0.0.1", port=port, queue_max=256, queue_wait_s=600, memory_settle_s=5,
        key_inflight_max=0, key_queue_share=1.0,  # one client drives every stream here
    )  # fmt: skip
    service = FrontDoorService(ctx, settings, gpus=False, state=state, interval=5.0, ready_timeout=300)
    service.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    service.close()


@contextmanager
def agent_door(state: Path, answer: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The agent's door in a process of its own (its CPU is the door's), serving `answer`."""
    from bench.bench_loadgen import wait_healthy
    from hostagent.door.tables import ServingStore
    from tests.support.llama import free_port

    ServingStore(state).save_answer(answer)
    port = free_port()
    argv = [sys.executable, __file__, "--serve", str(state), "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=(state / "door.log").open("wb"))
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", timeout=120)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def overhead(args: argparse.Namespace) -> None:
    import httpx

    from bench.bench_frontdoor import report_overhead, timed_level
    from hostagent.launch import launch_spec
    from hostagent.runtime.loadgen import Target
    from hostagent.runtime.supervisor import Supervisor
    from serving.benchmarking.profiles import BenchmarkProfile
    from tests.support.llama import free_port, gemma_launch, serving_entry

    state = Path(tempfile.mkdtemp(prefix="bench-door-overhead-"))
    slots = max(args.concurrency)
    context = slots * max(768, args.input_tokens + args.output_tokens + 64)
    launch = gemma_launch(1, ctx=context, port=free_port())
    launch["config"]["knobs"] |= {"parallel": slots, "threads": args.threads}
    host = Supervisor(state / "host")
    started = host.start(launch_spec(launch), revision_label="r1", revision_id="101", verify=False)
    models = [serving_entry("gemma", launch, "pinned", memory=300 << 20)]
    answer = {"version": "1", "door": {}, "models": models, "keys": {"keys": []}}
    try:
        with agent_door(state, answer) as (door, url):
            deadline = time.monotonic() + 120
            while httpx.get(f"{url}/frontdoor/state", timeout=10).json()["models"][0]["phase"] != "loaded":
                assert time.monotonic() < deadline, "the pinned revision never loaded in the door"
                time.sleep(0.05)
            direct = Target(
                chat_url=f"{launch_spec(launch).models_url.removesuffix('/models')}/chat/completions", model="gemma-r1"
            )
            through = Target(chat_url=f"{url}/v1/chat/completions", model="gemma")
            print(
                f"3. overhead: the host's pinned llama-server (-np {slots}, -t {args.threads}), "
                "direct vs through the agent's door"
            )
            for concurrency in args.concurrency:
                requests = args.requests_per_stream if concurrency == 1 else args.waves * concurrency
                profile = BenchmarkProfile(
                    name=f"c{concurrency}", concurrency=(concurrency,), num_requests=requests,
                    input_tokens=args.input_tokens, output_tokens=args.output_tokens, warmup_requests=1,
                    timeout_s=1800.0,
                )  # fmt: skip
                sides: dict[str, list[dict[str, Any]]] = {"direct": [], "door": []}
                for run in range(args.rounds):  # alternating, prompts of their own for each run
                    for i, (side, target) in enumerate((("direct", direct), ("door", through))):
                        seeded = replace(profile, seed=1000 * concurrency + 2 * run + i)
                        sides[side].append(timed_level(target, seeded, door.pid, started.pid, context // slots))
                report_overhead(concurrency, requests, sides)
    finally:
        host.stop(grace=10)


def swap(args: argparse.Namespace) -> None:
    from bench.bench_frontdoor import alternate
    from hostagent.door.memory import host_free_memory
    from serving.benchmarking.stats import percentile
    from tests.support.llama import free_port, gemma_launch, serving_entry

    state = Path(tempfile.mkdtemp(prefix="bench-door-swap-"))
    room = host_free_memory(gpus=False)["ram"] - (1 << 30)  # a GiB left to everything else
    planned = int(room * 0.6)  # one fits, two do not
    models = []
    for number, name in ((2, "a"), (3, "b")):
        launch = gemma_launch(number, ctx=1024 * number, port=free_port())
        launch["config"]["knobs"] |= {"parallel": 8, "threads": args.threads}
        models.append(serving_entry(name, launch, "on-demand", memory=planned))
    answer = {"version": "1", "door": {}, "models": models, "keys": {"keys": []}}
    with agent_door(state, answer) as (_door, url):

        async def clients() -> list[list[tuple[bool, float, str]]]:
            return await asyncio.gather(*(alternate(url, c, args.swap_rounds, 16) for c in range(args.swap_clients)))

        began = time.perf_counter()
        results = [r for client in asyncio.run(clients()) for r in client]
        took = time.perf_counter() - began
        import httpx

        metrics = httpx.get(f"{url}/metrics", timeout=10).text.splitlines()
        unloads = sum(float(line.rsplit(" ", 1)[1]) for line in metrics if line.startswith("frontdoor_unloads_total{"))
    waits = [w for ok, w, _ in results if ok]
    failed = [e for ok, _, e in results if not ok]
    print(
        f"4. swap under load through the agent: {args.swap_clients} streaming clients x {args.swap_rounds} requests "
        f"alternating two on-demand revisions planned at {planned / (1 << 30):.1f} GiB each, room for one in the "
        f"host's free RAM: {len(results)} requests in {took:.1f} s, {len(failed)} failed, {unloads:.0f} unloads; "
        f"queue wait p50 {percentile(waits, 50):.0f} ms, p99 {percentile(waits, 99):.0f} ms"
    )
    for error in sorted(set(failed))[:5]:
        print(f"   failed: {error}")


def main() -> None:
    from bench.bench_frontdoor import add_load_arguments

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_arguments(parser)
    parser.add_argument("--only", choices=["start", "cold", "overhead", "swap"], nargs="+")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # the door's child process
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.short:
        args.rounds, args.output_tokens, args.requests_per_stream, args.waves, args.swap_rounds = 2, 32, 8, 1, 4
    from tests.support.llama import gemma_model_path

    os.environ["CONTROLPANEL_MODEL_DIRS"] = str(Path(gemma_model_path()).parent)
    import django

    django.setup()
    if args.serve:
        serve(args.serve, args.port)
        return
    print(f"{os.cpu_count()} cores; Gemma 3 270M Q4_K_M on llama-server (CPU), {args.threads} thread(s) per engine")
    parts = args.only or ["start", "cold", "overhead", "swap"]
    if {"start", "cold"} & set(parts):
        start_and_cold(args)
    if "overhead" in parts:
        overhead(args)
    if "swap" in parts:
        swap(args)


def start_and_cold(args: argparse.Namespace) -> None:
    import httpx

    from bench.bench_frontdoor import first_token_ms
    from bench.bench_loadgen import wait_healthy
    from hostagent.context import AgentContext
    from hostagent.door.service import FrontDoorService
    from hostagent.frontdoor import FrontDoorSettings
    from hostagent.launch import launch_spec
    from hostagent.panel import HttpPanel
    from hostagent.runtime.supervisor import Supervisor
    from tests.support.llama import free_port, gemma_launch

    state = Path(tempfile.mkdtemp(prefix="bench-door-"))
    panel = HttpPanel(f"http://127.0.0.1:{free_port()}", "cph_bench", outbox_dir=state / "outbox", timeout=2)
    ctx = AgentContext(host="bench", panel=panel, supervisor=Supervisor(state / "host"))
    settings = FrontDoorSettings(host="127.0.0.1", port=0, memory_settle_s=2, key_inflight_max=0, key_queue_share=1.0)

    def door() -> tuple[FrontDoorService, float]:
        service = FrontDoorService(ctx, settings, gpus=False, state=state, interval=5.0, ready_timeout=300)
        started = time.perf_counter()
        service.start()
        return service, (time.perf_counter() - started) * 1000

    launch = gemma_launch(2, ctx=1024, port=free_port())
    entry = {
        "name": "cold",
        "upstream_model": "gemma-r2",
        "mode": "on-demand",
        "idle_ttl_s": 0.5,
        "memory": {"ram": 300 << 20},
        "revision": 2,
        "launch": launch,
    }
    answer = {"version": "1", "door": {}, "models": [entry], "keys": {"keys": []}}

    empty_service, empty_ms = door()
    empty_service.apply(answer)  # kept on disk for the next start
    empty_service.close()
    service, kept_ms = door()
    print(f"1. door start: {empty_ms:.0f} ms with no table, {kept_ms:.0f} ms with a kept table of one revision")

    spec = launch_spec(launch)
    base = spec.models_url.removesuffix("/v1/models")
    url = f"http://{service.bind}"
    own: list[tuple[float, float]] = []
    through: list[float] = []
    loads: list[float] = []

    def phase() -> dict[str, Any]:
        row: dict[str, Any] = httpx.get(f"{url}/frontdoor/state", timeout=10).json()["models"][0]
        return row

    try:
        for _ in range(args.rounds):  # alternating, so the machine's drift falls on both sides
            deadline = time.monotonic() + 120
            while phase()["phase"] != "unloaded":  # the door's engine listens on the same port
                assert time.monotonic() < deadline, "the revision never unloaded"
                time.sleep(0.05)
            started = time.perf_counter()
            engine = subprocess.Popen(
                list(spec.argv), env={**os.environ, **spec.env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                wait_healthy(spec.health_url, timeout=300, poll=0.02)
                own.append(((time.perf_counter() - started) * 1000, first_token_ms(base, "gemma-r2")))
            finally:
                engine.terminate()
                engine.wait(timeout=60)
            through.append(first_token_ms(url, "cold"))
            loads.append(phase()["last_load_s"] * 1000)
    finally:
        service.close()
    load, warm, cold = (statistics.median(x) for x in ([a for a, _ in own], [b for _, b in own], through))
    agent = statistics.median(loads)
    print(
        f"2. cold start (median of {args.rounds}): engine's own load {load:.0f} ms + warm first token {warm:.0f} ms "
        f"= {load + warm:.0f} ms; through the agent's door, revision unloaded: {cold:.0f} ms "
        f"({cold - load - warm:+.0f} ms); the agent's load (preflight, supervisor start, health gate) {agent:.0f} ms"
    )


if __name__ == "__main__":
    main()
