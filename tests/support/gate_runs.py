"""A benchmark run's results as a host's agent reports them, for the gate tests without an agent."""

from __future__ import annotations

from typing import Any

from serving.benchmarking.profiles import BenchmarkProfile


def gate_run_report(profile: BenchmarkProfile, decode: float, ttft: float) -> dict[str, Any]:
    """Two requests at one stream with this decode rate and TTFT (RunResult.to_dict()'s shape)."""
    requests = [{"ok": True, "ttft_ms": ttft, "e2e_ms": ttft + 40, "output_tokens": 4} for _ in range(2)]
    level = {
        "label": "concurrency 1",
        "completed": 2,
        "decode_tokens_per_s": {"mean": decode, "p50": decode},
        "output_tokens_per_s": decode,
        "requests": requests,
    }
    return {"status": "completed", "profile": profile.to_dict(), "levels": [level]}
