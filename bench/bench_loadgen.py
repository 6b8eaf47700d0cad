"""How much does the load generator itself cost?

Against bench/streaming_stub.py (a separate process on loopback that streams as fast as it
can) it prints requests/s, tokens/s and the client's CPU seconds per 1,000 streamed tokens.
The stub shares the machine's cores, so throughputs there are a floor for the client; the
CPU-per-1k-tokens figure is the client's own cost, what a real run's
`client_cpu_s_per_1k_tokens` is compared against.

With --engine it measures against the real llama-server and the Gemma 3 270M model
(tests/support/llama.py), one slot per stream, and prints the client's CPU seconds next to the
engine process's over the same timed run (from /proc): the client must stay under 10% of what
the engine it measures uses.

    .venv/bin/python bench/bench_loadgen.py [--seconds 4] [--output-tokens 128]
    .venv/bin/python bench/bench_loadgen.py --engine [--concurrency 64] [--requests 128]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hostagent.runtime.loadgen import Target, run_benchmark_sync  # noqa: E402
from hostagent.runtime.local_http import engine_get  # noqa: E402
from serving.benchmarking.profiles import BenchmarkProfile  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, timeout: float = 10.0, poll: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if engine_get(url, timeout=1.0).status_code == 200:  # no TLS context built per poll
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll)  # a server still loading answers 503 at once: no busy loop on it either
    raise RuntimeError(f"{url} did not answer 200 in {timeout:g} s")


def measure(target: Target, concurrency: int, seconds: float, output_tokens: int) -> None:
    # Calibrate the request count so the level lasts about `seconds`.
    probe = BenchmarkProfile(
        name="probe", concurrency=(concurrency,), num_requests=concurrency * 2, output_tokens=output_tokens
    )
    first = run_benchmark_sync(target, probe).levels[0]
    n = max(concurrency, int((first.requests_per_s or 1.0) * seconds))
    profile = BenchmarkProfile(
        name=f"c{concurrency}", concurrency=(concurrency,), num_requests=n, output_tokens=output_tokens
    )
    result = run_benchmark_sync(target, profile)
    level = result.levels[0]
    print(
        f"concurrency {concurrency:>3}: {level.completed} requests in {level.duration_s:.2f} s, "
        f"{level.requests_per_s:.1f} req/s, {level.output_tokens_per_s:,.0f} output tok/s, "
        f"client CPU {result.client_cpu_s:.2f} s = {result.client_cpu_s_per_1k_tokens * 1000:.1f} ms "
        f"per 1,000 tokens, busy {result.client_cpu_busy:.0%} "
        f"(ITL p50 {level.itl_ms['p50']:.3f} ms), status {result.status}"
    )


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def against_engine(concurrency: int, requests: int, input_tokens: int, output_tokens: int) -> None:
    """The real llama-server, one slot per stream; client CPU vs engine CPU over the timed run."""
    from tests.support.llama import gemma_model_path, llama_server_binary

    port = free_port()
    ctx = concurrency * (input_tokens + output_tokens + 64)
    argv = [llama_server_binary(), "-m", gemma_model_path(), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(ctx), "-np", str(concurrency), "-ngl", "0", "--metrics", "-a", "gemma"]
    engine = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marks: dict[str, tuple[float, float]] = {}

    def progress(done: int, total: int, label: str, message: str) -> None:
        # Callbacks run off the event loop: the level's start and the run's end, as the client times them.
        if message.startswith("starting"):
            marks["start"] = (cpu_seconds(os.getpid()), cpu_seconds(engine.pid))
        elif message.startswith("run "):
            marks["end"] = (cpu_seconds(os.getpid()), cpu_seconds(engine.pid))

    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(f"{base}/health", timeout=120.0)
        target = Target(chat_url=f"{base}/v1/chat/completions", model="gemma", health_url=f"{base}/health")
        profile = BenchmarkProfile(
            name=f"c{concurrency}",
            concurrency=(concurrency,),
            num_requests=requests,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
        )
        result = run_benchmark_sync(target, profile, progress=progress)
    finally:
        engine.terminate()
        engine.wait(timeout=10)
    if result.status != "completed" or not result.levels or not result.levels[0].completed:
        raise SystemExit(f"the run did not complete: {result.status}: {result.reason}")
    level = result.levels[0]
    client = marks["end"][0] - marks["start"][0]
    used = marks["end"][1] - marks["start"][1]
    tokens = result.output_tokens
    print(
        f"llama-server (Gemma 3 270M, -np {concurrency}, {os.cpu_count()} cores), concurrency {concurrency}: "
        f"{level.completed} requests, {tokens:,} output tokens in {level.duration_s:.1f} s "
        f"({level.output_tokens_per_s:,.0f} tok/s), status {result.status}\n"
        f"  engine CPU {used:.2f} s = {used / tokens * 1000:.2f} ms per token; "
        f"client CPU {client:.2f} s = {client / tokens * 1000:.3f} ms per token "
        f"(its own count: {result.client_cpu_s:.2f} s)\n"
        f"  client / engine CPU: {client / used:.1%} (target < 10%)"
    )
    for error in sorted({r.error for r in level.requests if r.error}):
        print(f"  failed: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, nargs="+", default=None)
    parser.add_argument("--engine", action="store_true", help="the real llama-server with Gemma 3 270M")
    parser.add_argument("--requests", type=int, default=128, help="with --engine: requests in the timed level")
    parser.add_argument("--input-tokens", type=int, default=128, help="with --engine")
    args = parser.parse_args()
    if args.engine:
        for concurrency in args.concurrency or [64]:
            against_engine(concurrency, args.requests, args.input_tokens, args.output_tokens)
        return
    args.concurrency = args.concurrency or [1, 64]
    port = free_port()
    stub = subprocess.Popen([sys.executable, str(ROOT / "bench" / "streaming_stub.py"), "--port", str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(f"{base}/health")
        target = Target(chat_url=f"{base}/v1/chat/completions", model="stub", health_url=f"{base}/health")
        for concurrency in args.concurrency:
            measure(target, concurrency, args.seconds, args.output_tokens)
    finally:
        stub.terminate()
        stub.wait(timeout=10)


if __name__ == "__main__":
    main()
