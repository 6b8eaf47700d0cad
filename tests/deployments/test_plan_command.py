"""`manage.py plan`: the planner as a command others script against."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.support.llama import gemma_model_path

pytestmark = pytest.mark.django_db


def plan(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("plan", *args, stdout=out, stderr=io.StringIO())
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def test_the_tensor_parallel_trap_on_six_3090s(catalog):
    code, out = plan(
        "--model",
        "Qwen3.5-27B",
        "--gpu-type",
        "RTX 3090",
        "--gpu-count",
        "6",
        "--engine",
        "vllm",
        "--set",
        "tensor_parallel_size=6",
        "--json",
    )
    assert code == 1
    report = json.loads(out)
    assert report["has_errors"] is True
    tp = [f for f in report["findings"] if f["severity"] == "error" and f["code"].startswith("tp.")]
    # 24 heads split six ways, but hidden size 5120 does not: TP=6 is impossible.
    assert any("5120" in f["message"] for f in tp)
    assert "llama.cpp" in tp[0]["fix"]


def test_json_report_has_the_documented_keys_for_a_gguf_file(catalog):
    code, out = plan(
        "--model",
        gemma_model_path(),
        "--gpu-memory-gib",
        "24",
        "--gpu-count",
        "1",
        "--engine",
        "llama.cpp",
        "--set",
        "ctx_size=8192",
        "--set",
        "parallel=2",
        "--json",
    )
    assert code == 0
    report = json.loads(out)
    for key in (
        "kv_bytes_per_token",
        "kv_bytes_per_token_per_gpu",
        "kv_pool_tokens",
        "kv_cache_bytes",
        "weights_bytes_per_gpu",
        "max_concurrent_full_length",
        "max_context_one_sequence",
        "gpus_used",
        "gpus_present",
        "findings",
    ):
        assert key in report
    assert report["kv_cache_bytes"] > 0
    assert report["gpus_present"] == 1


@pytest.mark.parametrize(
    "args",
    [
        ("--model", "no-such-model", "--gpu-type", "RTX 3090", "--gpu-count", "1", "--engine", "vllm"),
        ("--model", "Qwen3.5-27B", "--gpu-type", "GTX 480", "--gpu-count", "1", "--engine", "vllm"),
        ("--model", "Qwen3.5-27B", "--gpu-type", "RTX 3090", "--gpu-count", "0", "--engine", "vllm"),
        (
            "--model",
            "Qwen3.5-27B",
            "--gpu-type",
            "RTX 3090",
            "--gpu-count",
            "2",
            "--engine",
            "vllm",
            "--set",
            "no_such_knob=1",
        ),
        ("--model", "Qwen3.5-27B", "--gpu-type", "RTX 3090", "--gpu-count", "2", "--engine", "vllm", "--set", "junk"),
    ],
)
def test_bad_input_exits_2_with_a_message(catalog, args):
    with pytest.raises(CommandError) as exc:
        call_command("plan", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert exc.value.returncode == 2
    assert str(exc.value)


def test_a_cpu_only_layout_prints_the_engines_host_ram_by_part(catalog: object) -> None:
    """With no layer on a GPU (-ngl 0), the report names llama-server's whole host RAM: the GGUF, the
    KV cache, the compute and output buffers and the process's own, and the prompt cache's limit."""
    args: tuple[str, ...] = ("--model", gemma_model_path(), "--gpu-memory-gib", "24", "--gpu-count", "1")
    args += ("--engine", "llama.cpp", "--set", "ctx_size=8192", "--set", "parallel=2", "--set", "n_gpu_layers=0")
    code, out = plan(*args)
    assert code == 0
    assert "host RAM (CPU only):          0.41 GiB (weights 0.24 GiB, kv cache 0.05 GiB" in out
    assert "up to 8.00 GiB (--cache-ram)" in out
    report = json.loads(plan(*args, "--json")[1])
    assert report["ram_bytes"] == sum(v for k, v in report["ram_parts"].items() if k in PARTS)
    assert report["ram_bytes"] > report["ram_parts"]["weights"] + report["kv_cache_bytes"]
    on_gpu = json.loads(plan(*args[:-2], "--json")[1])  # every layer on the GPU: no host-RAM figure
    assert on_gpu["ram_bytes"] is None


PARTS = ("weights", "kv_cache", "compute_buffer", "output_buffer", "runtime")
