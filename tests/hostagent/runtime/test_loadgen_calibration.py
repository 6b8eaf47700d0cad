"""The load generator's usage calibration (engines without a /tokenize it can use) against a real
llama-server serving a model whose vocabulary spends several tokens a word: a random-weight llama
GGUF written with gguf-py (tools/gpu_run/make_gguf.py's tiny shape: 256 <0xNN> byte tokens and
pieces no English word matches), as the GPU runs' models are. Its answers are noise; its
tokenizer and its context limit are llama-server's own."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hostagent.runtime.loadgen import Target, run_benchmark_sync
from serving.benchmarking.profiles import BenchmarkProfile
from tests.support.llama import free_port, llama_server_binary, wait_llama_ready
from tools.gpu_run.make_gguf import write

SLOT = 768  # what bench_frontdoor.py's overhead part gives a slot at its default 128-token prompts


@contextmanager
def byte_vocab_engine(folder: Path, slot: int) -> Iterator[Target]:
    model = folder / "tiny.gguf"
    if not model.exists():
        write(model, "tiny", 17)
    port, log = free_port(), folder / f"engine-{slot}.log"
    argv = [llama_server_binary(), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-a", "tiny"]
    argv += ["-c", str(slot), "-np", "1", "-ngl", "0", "-t", "1"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_llama_ready(port, proc, log)
        base = f"http://127.0.0.1:{port}"
        yield Target(chat_url=f"{base}/v1/chat/completions", model="tiny", health_url=f"{base}/health")
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("byte-vocab")


@pytest.fixture(scope="module")
def byte_vocab(folder: Path) -> Iterator[Target]:
    with byte_vocab_engine(folder, SLOT) as target:
        yield target


@pytest.mark.engine
def test_a_byte_level_vocabulary_on_a_small_slot_is_calibrated_and_measured(byte_vocab: Target) -> None:
    """The calibration's long probe is sized from the short one's count, so it fits the slot (a
    fixed 295-word probe was about five times the slot here: llama-server answered 400 and the run
    failed "preparing the workload"), and the prompts it then writes are the size asked."""
    profile = BenchmarkProfile(name="t", concurrency=(1,), num_requests=3, input_tokens=128, output_tokens=4)
    result = run_benchmark_sync(byte_vocab, profile, served_context=SLOT, use_tokenize=False)
    assert result.status == "completed", result.reason
    records = [r for level in result.levels for r in level.requests]
    assert records and all(r.ok for r in records), [r.error for r in records]
    sizes = [r.input_tokens for r in records]
    assert all(s is not None and abs(s - 128) <= 20 for s in sizes), sizes  # within 15 %: a linear fit of words


@pytest.mark.engine
def test_a_slot_too_small_to_calibrate_says_so(folder: Path) -> None:
    """At 128 tokens a slot even the shortest long probe (50 words, about 300 tokens here) does not
    fit: the run fails before any request, saying why and what to change, instead of the engine's 400."""
    profile = BenchmarkProfile(name="t", concurrency=(1,), num_requests=2, input_tokens=16, output_tokens=4)
    with byte_vocab_engine(folder, 128) as target:
        result = run_benchmark_sync(target, profile, served_context=128, use_tokenize=False)
    assert result.status == "failed" and not result.levels
    assert "a served context of 128 tokens is too small to measure prompt sizes" in result.reason, result.reason
