"""Planner speed: evaluations per second and the "what fits" table time for a host.

Run: python bench/bench_planner.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployments.importers.hf_config import load_hf_config  # noqa: E402
from serving.planner import CatalogModel, PlanRequest, catalog_host, plan, what_fits  # noqa: E402

CONFIGS = ROOT / "tests" / "fixtures" / "configs"
GB = 10**9


def main() -> None:
    qwen38 = load_hf_config(CONFIGS / "qwen3.8-27b-w4a16.json").arch
    request = PlanRequest(
        arch=qwen38,
        engine="vllm",
        engine_version="0.22.0",
        gpus=catalog_host("rtx5060ti", 2),
        knobs={
            "tensor_parallel_size": 2,
            "max_model_len": 262144,
            "max_num_seqs": 4,
            "kv_cache_dtype": "fp8",
            "gpu_memory_utilization": "0.95",
            "enforce_eager": True,
            "speculative_config": '{"method":"mtp","num_speculative_tokens":2}',
        },
        env={"NCCL_P2P_DISABLE": "1"},
        weights_bytes=int(19.5 * GB),
        checkpoint_quant="compressed-tensors",
        recommended_reasoning_parser="qwen3",
    )
    plan(request)
    n = 5000
    start = time.perf_counter()
    for _ in range(n):
        plan(request)
    elapsed = time.perf_counter() - start
    print(f"plan(): {n / elapsed:,.0f} evaluations/s ({elapsed / n * 1e6:.0f} us each)")

    names = {
        "qwen3.5-27b": 56 * GB,
        "qwen3.8-27b-w4a16": int(19.5 * GB),
        "qwen3.6-35b-a3b-awq": 20 * GB,
        "qwen3.5-122b-a10b-fp8": 122 * GB,
        "qwen3-next-80b-a3b": 160 * GB,
        "qwen3-32b-awq": 19 * GB,
    }
    models = [
        CatalogModel(name=name, arch=load_hf_config(CONFIGS / f"{name}.json").arch, weights_bytes=size)
        for name, size in names.items()
    ]
    for host_name, count in (("rtx3090", 6), ("rtx5060ti", 2), ("h200", 8)):
        host = catalog_host(host_name, count)
        start = time.perf_counter()
        cells = what_fits(host, models)
        elapsed = time.perf_counter() - start
        fits = sum(c.verdict == "fits" for c in cells)
        tight = sum(c.verdict == "tight" for c in cells)
        print(
            f"what_fits {count} x {host_name}: {len(cells)} cells in {elapsed * 1000:.1f} ms "
            f"({elapsed / len(cells) * 1e6:.0f} us/cell; {fits} fit, {tight} tight)"
        )


if __name__ == "__main__":
    main()
