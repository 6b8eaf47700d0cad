"""End to end: start the real llama-server from the adapter's LaunchSpec, serve the real
Gemma 3 270M GGUF, chat once, read /metrics and the KV capacity from its own log."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import httpx
import pytest

from serving.engines.base import EngineConfig
from serving.engines.llamacpp import LlamaCppAdapter
from tests.support.llama import free_port, gemma_model_path, llama_server_binary


@pytest.mark.engine
def test_real_llama_server_from_launch_spec():
    adapter = LlamaCppAdapter()
    config = EngineConfig(
        engine="llama.cpp",
        engine_version="",
        model=gemma_model_path(),
        served_name="gemma3-270m",
        host="127.0.0.1",
        port=free_port(),
        binary=llama_server_binary(),
        knobs={
            "ctx_size": 2048,
            "parallel": 2,
            "n_gpu_layers": 0,
            "metrics": True,
            "threads": 2,
            "log_verbosity": 4,  # the default (3) hides the llama_kv_cache lines
        },
    )
    spec = adapter.launch_spec(config)
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(spec.argv, env=os.environ | spec.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            with httpx.Client(timeout=httpx.Timeout(10.0, read=120.0)) as client:
                deadline = time.monotonic() + 120
                status = None
                while time.monotonic() < deadline:
                    assert proc.poll() is None, "llama-server exited during startup"
                    try:
                        status = client.get(spec.health_url).status_code
                    except httpx.TransportError:
                        status = None
                    if status == 200:
                        break
                    time.sleep(0.5)
                assert status == 200

                models = client.get(spec.models_url).json()
                assert spec.served_name in [m["id"] for m in models["data"]]

                reply = client.post(
                    spec.chat_url,
                    json={
                        "model": spec.served_name,
                        "messages": [{"role": "user", "content": "Say hello in one word."}],
                        "max_tokens": 8,
                    },
                )
                assert reply.status_code == 200
                assert reply.json()["usage"]["completion_tokens"] > 0

                assert spec.metrics_url is not None
                metrics = adapter.parse_metrics(client.get(spec.metrics_url).text)
                assert metrics.generation_tokens_total is not None and metrics.generation_tokens_total > 0
                assert metrics.prompt_tokens_total is not None and metrics.prompt_tokens_total > 0
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.seek(0)
        capacity = adapter.parse_kv_capacity(log.read())
    assert capacity.bytes is not None and capacity.bytes > 0
    assert capacity.tokens is not None and capacity.tokens >= 2048
    assert len(capacity.details["caches"]) == 2  # Gemma 3: global + sliding-window KV caches
