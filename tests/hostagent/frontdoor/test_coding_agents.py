"""The real Claude Code and Codex (npm, pinned in scripts/install-tools) run one non-interactive
prompt each through a front door by an alias, with the files the revision's Exports page gives
them (serving.exports: Claude Code's settings.json, Codex's config.toml), against real
llama-servers; then a switch moves the alias to another revision and the same files, unchanged,
reach the new engine (issue 40).

Claude Code speaks Anthropic's Messages API, Codex OpenAI's Responses API. Each agent's own system
prompt and tool list are long (about 3,900 prompt tokens for Claude Code 2.1.332, 4,400 for Codex
0.171.0 after llama-server's chat template): each revision serves 8,192 tokens in one slot. The
270M model cannot follow an agent's instructions, so each engine is held to one sentence by a
grammar (`--grammar`, llama-server's default for every request): r1 always answers "Hello from
r1.", r2 "Hello from r2.". The sentence in the agent's own output proves the request reached that
engine by the alias and the reply came back through the agent's parser; the door's usage rows show
the agent's long prompt booked to the engine's model under the user's key.

Every socket the agents open is traced (strace): they reach the door on loopback and nothing else,
no telemetry, update check or DNS lookup (the exports turn them off). HOME is a temporary folder.

Time: a run is one cold prefill of the agent's prompt (each revision's engine sees it once) on one
CPU thread, and the 270M model's one sentence; four runs in all. Measured on the suite's shared
two-core machine: at a load average of 2.6, 16 to 25 s a run, 34 s for Codex's test and 48 s for
Claude Code's (84 s the module); at a load average of 10, 55 to 57 s a run (prefill at about 80
tokens/s), about 115 s a test. The engine's prefill is nearly all of it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from hostagent.frontdoor import InferenceKey, KeyTable, RoutingTable, hash_key
from hostagent.frontdoor.launcher import Command
from serving.diffing import RevisionView
from serving.exports import claude_code_settings, client_target, codex_config, through_door
from tests.support.client_tools import claude_bin, codex_bin, strace
from tests.support.llama import gemma_model_path, llama_server_binary

from .conftest import ENGINE_KEY, DoorThread, Host, start_door

pytestmark = pytest.mark.engine

KEY = "sk-lab-alice-0123456789"
CONTEXT = 8192  # holds either agent's system prompt and tools, one slot
REVISIONS = ("gemma-r1", "gemma-r2")


def engine(port: int, name: str) -> Command:
    """A llama-server that answers every request with one sentence naming its revision."""
    argv = [llama_server_binary(), "-m", gemma_model_path(), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["-c", str(CONTEXT), "-np", "1", "-ngl", "0", "-t", "1", "-a", name, "--api-key", ENGINE_KEY]
    argv += ["--grammar", f'root ::= "Hello from {name.rsplit("-", 1)[1]}."']
    return Command(tuple(argv), f"http://127.0.0.1:{port}/health")


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorThread]:
    host = Host()
    for name in REVISIONS:
        served = host.add(name, context=CONTEXT, aliases=("coder",) if name == "gemma-r1" else ())
        host.commands[name] = engine(int(served.upstream.rsplit(":", 1)[1]), name)
    keys = KeyTable((InferenceKey("alice", hash_key(KEY), None),))
    door = start_door(host, tmp_path_factory.mktemp("engines"), keys=keys)
    yield door
    door.close()


def switch(door: DoorThread, to: str) -> None:
    """What a switch does at the door: the alias `coder` now names `to`. Moved off a loaded engine,
    `coder` keeps going there while the door starts `to`, and flips once `to` is loaded."""
    held = any(row["phase"] == "loaded" and row["aliases"] == ["coder"] for row in door.state().values())
    moved = tuple(replace(m, aliases=("coder",) if m.name == to else ()) for m in door.table.models)
    door.update_table(RoutingTable(moved))
    if held:
        door.wait_for(lambda state: state[to]["phase"] == "loaded", timeout=180)


def usage(door: DoorThread, model: str) -> dict[str, int]:
    rows = httpx.get(f"{door.url}/frontdoor/usage", timeout=10).json()["usage"]
    found = [row for row in rows if row["model"] == model and row["key"] == "alice"]
    return found[0] if found else {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "errors": 0}


def exports(door: DoorThread) -> tuple[str, str]:
    """Claude Code's settings.json and Codex's config.toml for the revision behind `coder`, as the
    Exports page makes them through the door (the same for r1 and r2: the same knobs)."""
    view = RevisionView(
        number=1, engine="llama.cpp", served_name="gemma", port=8001,
        knobs={"ctx_size": CONTEXT, "parallel": 1, "n_gpu_layers": 0},
        model={"name": "gemma", "arch": {"native_context": 32768}},
    )  # fmt: skip
    direct = client_target(view, base_url="http://127.0.0.1:8001/v1", api_key_required=False)
    target = through_door(direct, base_url=f"{door.url}/v1", model="coder", api_key_required=True, route="door")
    return claude_code_settings(target).content, codex_config(target).content


def agent_argv(agent: str, workdir: Path) -> list[str]:
    if agent == "claude-code":
        return [str(claude_bin()), "-p", "Say hello.", "--output-format", "json"]
    last = workdir / "last-message.txt"  # --strict-config: every key of our file is one Codex knows
    return [str(codex_bin()), "exec", "--strict-config", "--skip-git-repo-check", "-o", str(last), "Say hello."]


def run_agent(agent: str, home: Path, workdir: Path) -> tuple[str, set[str], float]:
    """One prompt through `agent`, under strace: (what it answered, every address it sent to, seconds)."""
    trace = workdir / f"{agent}.strace"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "LANG": "C.UTF-8",
        "CONTROLPANEL_KEY": KEY,  # the user's inference key, from the environment only
    }
    argv = [strace(), "-f", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace)]
    started = time.monotonic()
    done = subprocess.run(  # noqa: S603 - the real agent, under strace
        argv + agent_argv(agent, workdir), cwd=workdir, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if agent == "claude-code":
        result = json.loads(done.stdout)
        assert result["is_error"] is False, result
        answer = str(result["result"])
    else:
        answer = (workdir / "last-message.txt").read_text()
    text = trace.read_text(errors="replace")
    addresses = set(re.findall(r'inet_addr\("([^"]+)"\)', text))
    addresses |= set(re.findall(r'inet_pton\(AF_INET6, "([^"]+)"', text))
    return answer, addresses, took


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_the_real_agent_answers_through_the_door_by_alias_before_and_after_a_switch(
    door: DoorThread, agent: str, tmp_path: Path
) -> None:
    home, workdir = tmp_path / "home", tmp_path / "project"
    workdir.mkdir()
    settings, config = exports(door)
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(settings)
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(config)
    assert KEY not in settings + config  # the key stays in the environment

    switch(door, "gemma-r1")
    seen: set[str] = set()
    for revision in REVISIONS:
        before = usage(door, revision)
        answer, addresses, took = run_agent(agent, home, workdir)
        assert answer.strip() == f"Hello from {revision[-2:]}.", answer
        after = usage(door, revision)
        assert after["requests"] > before["requests"] and after["errors"] == before["errors"]
        assert after["prompt_tokens"] - before["prompt_tokens"] > 3000  # the agent's own prompt, whole
        assert after["completion_tokens"] > before["completion_tokens"]
        print(f"{agent} through the door to {revision}: {took:.1f} s")
        seen |= addresses
        switch(door, "gemma-r2")  # the alias moves; the agent's files stay as they are
    assert seen and all(a.startswith("127.") or a == "::1" for a in seen), seen  # loopback only
    assert (home / ".claude" / "settings.json").read_text() == settings  # nothing rewrote them
    assert (home / ".codex" / "config.toml").read_text() == config
