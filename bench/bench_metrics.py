"""What does a scrape of a front door's /metrics cost, now that it carries its engines' series?

A front door in its own process (bench_frontdoor.front_door) before real llama-servers (Gemma 3
270M, `--metrics`), loaded by a request each. For 0, 1 and 2 engines loaded it times `--scrapes`
GETs of the door's /metrics (its own series plus the engines', each engine asked side by side)
beside GETs of one engine's /metrics straight, and prints p50/p95 milliseconds and the bytes; then
the same with one engine stopped (SIGSTOP: alive, listening, answering nothing), where the door
answers at its deadline (2 s) with that engine left out.

    .venv/bin/python bench/bench_metrics.py [--scrapes 50]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_frontdoor import engine_argv, entry, front_door  # noqa: E402
from tests.support.llama import free_port  # noqa: E402


def timed(url: str, count: int) -> tuple[float, float, int]:
    """p50 and p95 milliseconds of `count` GETs of `url`, and the last answer's bytes."""
    took, size = [], 0
    with httpx.Client(timeout=30) as client:
        client.get(url)
        for _ in range(count):
            started = time.perf_counter()
            answer = client.get(url)
            took.append((time.perf_counter() - started) * 1000)
            size = len(answer.content)
    took.sort()
    return statistics.median(took), took[max(0, int(len(took) * 0.95) - 1)], size


def row(what: str, url: str, count: int) -> None:
    p50, p95, size = timed(url, count)
    print(f"{what:<44} p50 {p50:7.2f} ms   p95 {p95:7.2f} ms   {size:>7} bytes", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scrapes", type=int, default=50)
    args = parser.parse_args()
    ports = {"a": free_port(), "b": free_port()}
    models = [entry(name, port) for name, port in ports.items()]
    argvs = {
        name: [*engine_argv(port, context=1024, slots=2, threads=1, name=name), "--metrics"]
        for name, port in ports.items()
    }
    with front_door(models, argvs, 64 << 30, extra=("--host-name", "bench")) as door:
        row("door /metrics, no engine loaded", f"{door.url}/metrics", args.scrapes)
        for loaded, name in enumerate(ports, start=1):
            ask = {"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
            httpx.post(f"{door.url}/v1/chat/completions", json=ask, timeout=300).raise_for_status()
            door.wait_phase(name, "loaded")
            row(f"door /metrics, {loaded} llama-server(s) loaded", f"{door.url}/metrics", args.scrapes)
        row("one llama-server's /metrics, straight", f"http://127.0.0.1:{ports['a']}/metrics", args.scrapes)
        pid = door.engine_pid("a")
        os.kill(pid, signal.SIGSTOP)
        try:
            row("door /metrics, one of the two stopped", f"{door.url}/metrics", 3)
        finally:
            os.kill(pid, signal.SIGCONT)


if __name__ == "__main__":
    main()
