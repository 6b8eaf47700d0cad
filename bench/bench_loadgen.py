"""How much does the load generator itself cost? Runs it against bench/streaming_stub.py
(a separate process on loopback that streams as fast as it can) and prints requests/s,
tokens/s and the client's CPU seconds per 1,000 streamed tokens.

    .venv/bin/python bench/bench_loadgen.py [--seconds 4] [--output-tokens 128]

The stub shares the machine's cores, so throughputs here are a floor for the client; the
CPU-per-1k-tokens figure is the client's own cost, what a real run's
`client_cpu_s_per_1k_tokens` is compared against.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deployments.benchmarking.profiles import BenchmarkProfile  # noqa: E402
from hardware.runtime.loadgen import Target, run_benchmark_sync  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(url: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"stub did not come up at {url}")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
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
