"""A load that fails, as the requests waiting for it see it at the standalone front door
(`python -m hostagent.frontdoor`, its own process, the command loader): the loader's reason, never
the engine's log. An engine's last lines hold its command line, `--api-key` and all (llama-server
prints it); the door used to append them to the reason every waiting client got."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx

from bench.bench_frontdoor import entry, front_door
from bench.bench_loadgen import wait_healthy
from hostagent.frontdoor.launcher import Command, ProcessLoader
from tests.support.llama import free_port

from .conftest import ENGINE_KEY as CONFTEST_ENGINE_KEY
from .conftest import llama_command

ENGINE_KEY = "sk-engine-Zq81-never-shown"
# What llama-server writes before it gives up on a model it cannot read, then its exit.
ENGINE_LOG = (
    f"main: llama-server -m /models/broken.gguf --port 8001 --api-key {ENGINE_KEY}\n"
    "llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' data is not within the file bounds\n"
)
LOG_WORDS = (ENGINE_KEY, "--api-key", "llama_model_load", "blk.0", "/models/broken.gguf")


def failing_engine(port: int) -> list[str]:
    return ["/bin/sh", "-c", f"printf '%s' '{ENGINE_LOG}'; exit 1", "llama-server", "--port", str(port)]


def test_a_waiting_client_sees_the_loads_reason_never_the_engines_log() -> None:
    port = free_port()
    with front_door([entry("broken", port)], {"broken": failing_engine(port)}, 1 << 30) as door:
        answer = httpx.post(
            f"{door.url}/v1/chat/completions",
            json={"model": "broken", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "model_load_failed"
    assert "broken exited with code 1 while loading" in error["message"]
    assert not [word for word in LOG_WORDS if word in answer.text]


def test_an_engine_never_healthy_is_reported_by_its_wait_without_its_log(tmp_path: Path) -> None:
    port = free_port()
    argv = ("/bin/sh", "-c", f"printf '%s' '{ENGINE_LOG}'; sleep 30")
    loader = ProcessLoader(
        {"slow": Command(argv, f"http://127.0.0.1:{port}/health")}, log_dir=tmp_path, ready_timeout=0.5
    )

    async def load() -> str:
        try:
            await loader.load("slow")
        except TimeoutError as exc:
            return str(exc)
        finally:
            await loader.close()
        raise AssertionError("the load did not fail")

    reason = asyncio.run(load())
    assert reason == "slow was not healthy after 0.5 s"
    assert ENGINE_KEY in (tmp_path / "slow.log").read_text()  # the log is there, for the operator


def test_a_missing_log_dir_is_made_and_a_failed_start_names_no_host_path(tmp_path: Path) -> None:
    """`python -m hostagent.frontdoor --log-dir` on a folder not made yet: the engines start and log
    there (a missing folder used to fail every load with its path in the 503). An engine whose
    executable is not there is refused with the reason, not where the host keeps its files."""
    small, broken = free_port(), free_port()
    table = {"models": [{**entry("small", small), "api_key": CONFTEST_ENGINE_KEY}, entry("broken", broken)]}
    nowhere = tmp_path / "opt-nowhere" / "bin" / "llama-server"
    commands = {
        "small": {"argv": list(llama_command(small, context=512, served_name="small").argv),
                  "health_url": f"http://127.0.0.1:{small}/health"},
        "broken": {"argv": [str(nowhere), "--port", str(broken)], "health_url": f"http://127.0.0.1:{broken}/health"},
    }  # fmt: skip
    (tmp_path / "table.json").write_text(json.dumps(table))
    (tmp_path / "commands.json").write_text(json.dumps(commands))
    logs, port = tmp_path / "not-made-yet" / "engines", free_port()
    argv = [sys.executable, "-m", "hostagent.frontdoor", "--table", str(tmp_path / "table.json")]
    argv += ["--commands", str(tmp_path / "commands.json"), "--budget", "ram=2GiB", "--bind", f"127.0.0.1:{port}"]
    argv += ["--log-dir", str(logs)]
    door_log = tmp_path / "door.log"
    with door_log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/health", timeout=30)
        chat, ask = f"http://127.0.0.1:{port}/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}
        served = httpx.post(chat, json={**ask, "model": "small", "max_tokens": 2}, timeout=60)
        refused = httpx.post(chat, json={**ask, "model": "broken", "max_tokens": 2}, timeout=30)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert served.status_code == 200, served.text
    assert (logs / "small.log").read_text()  # the engine's log, where the operator said
    assert refused.status_code == 503, refused.text
    message = refused.json()["error"]["message"]
    assert message == "`broken` could not be loaded: broken's engine cannot be started (No such file or directory)"
    assert str(tmp_path) not in refused.text
    assert str(nowhere) in door_log.read_text()  # the operator's log has the path
