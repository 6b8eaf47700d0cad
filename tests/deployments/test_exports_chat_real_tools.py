"""A client export runs its real tool against a real engine (issue 41): opencode, with the
opencode.json a revision's Exports page gives, and aider, with its two files and aider.sh, each
send one short prompt to a real llama-server serving the test model with an API key, and print the
answer. (Hermes refuses any model under 64K context, and the test model is trained for 32K: its
export says so, tests/deployments/test_exports_real_tools.py.)

The 270M model cannot follow an agent's instructions, so the engine is held to one sentence by a
grammar (`--grammar`, llama-server's default for every request): "Hello from the lab." in
opencode's output proves the request reached the engine at the exported URL, under the exported
model name and the key read from the exported variable, and the reply came back through
opencode's own parser. The model has no tool format (the export says `tool_call: false`), so
opencode sends no tool list: about 2,100 prompt tokens (aider's 2,500). Measured on the shared
two-core machine: opencode's test 28 to 35 s (two runs, one refused), aider's 23 s.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from serving.diffing import RevisionView
from serving.exports import (
    API_KEY_ENV,
    aider_env,
    aider_model_metadata,
    aider_model_settings,
    client_target,
    opencode_config,
)
from tests.support.client_tools import isolated_env, opencode_bin, tool_bin
from tests.support.llama import free_port, gemma_model_path, llama_server_binary, wait_llama_ready

SENTENCE = "Hello from the lab."
KEY = "lab-key-41"


@pytest.fixture
def engine(tmp_path: Path):
    """A real llama-server on the test model, with an API key and a grammar that holds every answer
    to SENTENCE; yields (port, its log)."""
    port, log = free_port(), tmp_path / "llama.log"
    argv = [
        llama_server_binary(), "--model", gemma_model_path(), "--host", "127.0.0.1", "--port", str(port),
        "--alias", "gemma", "--ctx-size", "8192", "--parallel", "1", "--threads", "1",
        "--grammar", f'root ::= "{SENTENCE}"',
    ]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "LLAMA_API_KEY": KEY})  # noqa: S603
    try:
        wait_llama_ready(port, process, log)
        yield port, log
    finally:
        process.terminate()
        process.wait(timeout=10)


def _target(port: int):
    view = RevisionView(
        number=1,
        engine="llama.cpp",
        served_name="gemma",
        port=port,
        knobs={"ctx_size": 8192, "parallel": 1},
        model={
            "name": "gemma",
            "gguf_file": "gemma.gguf",
            "arch": {"native_context": 32768},
            "chat_template_tools": False,
        },
    )
    return client_target(view, base_url=f"http://127.0.0.1:{port}/v1", api_key_required=True)


def _env(tmp_path: Path) -> dict[str, str]:
    return isolated_env(tmp_path, OPENCODE_DISABLE_AUTOUPDATE="1", **{API_KEY_ENV: KEY})


@pytest.mark.engine
def test_opencode_runs_one_prompt_with_our_export_against_a_real_engine(engine, tmp_path):
    port, log = engine
    export = opencode_config(_target(port))
    project = tmp_path / "project"
    project.mkdir()
    (project / export.filename).write_text(export.content)
    assert json.loads(export.content)["provider"]["selfhosted"]["options"]["apiKey"] == f"{{env:{API_KEY_ENV}}}"
    env = _env(tmp_path)

    done = subprocess.run(  # noqa: S603 - the real tool, our file
        [str(opencode_bin()), "run", "Say hello."],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert SENTENCE in done.stdout, done.stdout[-2000:] + done.stderr[-2000:] + log.read_text()[-2000:]
    # The key was the exported variable's: without it the engine refuses opencode.
    refused = subprocess.run(  # noqa: S603
        [str(opencode_bin()), "run", "Say hello."],
        cwd=project, env={**env, API_KEY_ENV: "wrong"}, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert SENTENCE not in refused.stdout


@pytest.mark.engine
def test_aider_runs_one_prompt_with_our_exports_against_a_real_engine(engine, tmp_path):
    """aider.sh as exported (the base URL and the key's variable), its last line given aider's
    one-shot switches: one message, no git, no update check, no prompts."""
    port, log = engine
    target = _target(port)
    project = tmp_path / "project"
    project.mkdir()
    for build in (aider_model_settings, aider_model_metadata, aider_env):
        made = build(target)
        (project / made.filename).write_text(made.content)
    script = (project / "aider.sh").read_text().rstrip("\n")
    assert script.splitlines()[-1].startswith("aider --model ")
    one_shot = " --message 'Say hello.' --no-git --yes-always --no-check-update --no-show-model-warnings --no-pretty"
    (project / "aider.sh").write_text(script + one_shot + "\n")
    env = _env(tmp_path)
    env["PATH"] = f"{tool_bin('aider-chat', 'aider').parent}:{env['PATH']}"
    env["AIDER_ANALYTICS_DISABLE"] = "1"

    done = subprocess.run(  # noqa: S603
        ["bash", "aider.sh"], cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False
    )

    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert SENTENCE in done.stdout, done.stdout[-2000:] + done.stderr[-2000:] + log.read_text()[-2000:]
    assert "Model: openai/gemma" in done.stdout  # the exported name, read through its settings
