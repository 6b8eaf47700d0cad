"""The embedded default as `scripts/run` starts it (`python -m embedded`), with real
processes: its own Redis on a Unix socket, the panel worker, the agent, gunicorn, and a real
llama-server. Each test gets a fresh copy of a prepared data folder and a free port, and no
DATABASE_URL or CELERY_BROKER_URL (so SQLite and the embedded Redis, whatever the suite uses).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.embedded import EmbeddedPanel, copy_prepared, embedded_env, prepare
from tests.support.llama import free_port, gemma_model_path

pytestmark = pytest.mark.celery
STOP_LIMIT_S = 10.0

PROBE = """
import json, time
from hardware.models import Host
from deployments.services.switch import probe_request
from deployments.tasks import reap_lost_operations
reap_lost_operations.delay()  # the panel worker's queue
op = probe_request(host=Host.objects.get(), actor=None)  # the agent's queue
deadline = time.monotonic() + 30
while op.state not in ("succeeded", "failed", "lost", "cancelled") and time.monotonic() < deadline:
    time.sleep(0.1)
    op.refresh_from_db()
print(json.dumps({"state": op.state, "error": op.error}))
"""

SWITCH = """
import json, time
from hostagent.local import supervisor_for
from deployments.models import ModelVariant
from deployments.runtime_bridge import spec_for_values
from deployments.services.revisions import revision_create
from deployments.services.switch import switch_request
from hardware.models import Host
host = Host.objects.get()
model = ModelVariant.objects.create(name="gemma-embedded", format="gguf", gguf_file={model!r}, purpose="completions")
spec = spec_for_values(engine="llama.cpp", engine_version="", model=model, served_name="gemma", port={port},
    knobs={{"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0}}, env={{}})
revision = revision_create(host=host, spec=spec, message="embedded", actor=None)
op = switch_request(revision=revision, actor=None)
deadline = time.monotonic() + 90
while op.state not in ("succeeded", "failed", "lost", "cancelled") and time.monotonic() < deadline:
    time.sleep(0.2)
    op.refresh_from_db()
print(json.dumps({{"state": op.state, "error": op.error, "pid": supervisor_for(host.name).status().pid}}))
"""


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _wait(predicate, timeout: float, what: str, panel: EmbeddedPanel) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{panel.output()}")
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _restarted(panel: EmbeddedPanel, name: str, old_pid: int) -> bool:
    pid = panel.child_pid(name)
    return pid is not None and pid != old_pid


def _stop_and_check_nothing_left(panel: EmbeddedPanel, sig: int) -> float:
    before = panel.tree()
    assert len(before) >= 5, before  # supervisor, redis, worker (+pool, beat), agent, gunicorn (+workers)
    seconds = panel.stop(sig)
    left = [(p.pid, p.state(), p.cmdline) for p in before if p.state() is not None]
    assert not left, f"still there (state Z is a zombie): {left}"
    assert seconds < STOP_LIMIT_S, (seconds, panel.output())
    assert panel.proc is not None and panel.proc.returncode == 0, panel.output()
    return seconds


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("embedded") / "data"
    prepare(data, embedded_env(data))
    return data


@pytest.fixture
def panel(template: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[EmbeddedPanel]:
    data = tmp_path / "data"
    copy_prepared(template, data)
    extra = getattr(request, "param", {})
    embedded = EmbeddedPanel(data, free_port(), extra_env=extra.get("env"), args=extra.get("args", []))
    embedded.start()
    try:
        yield embedded
    finally:
        if embedded.proc is not None and embedded.proc.poll() is None:
            embedded.kill_all()


def test_serves_carries_tasks_over_its_own_redis_and_ctrl_c_stops_it(panel: EmbeddedPanel) -> None:
    panel.wait_healthy()
    redis_dir = panel.data_dir / "redis"
    assert _mode(redis_dir) == 0o700 and _mode(redis_dir / "redis.sock") == 0o600
    assert _mode(redis_dir / "appendonly.aof") == 0o600
    assert f"Connected to redis+socket://{redis_dir / 'redis.sock'}" in panel.log("worker")

    result = _last_json(panel.django(PROBE))
    assert result["state"] == "succeeded", result
    _wait(lambda: "reap_lost_operations" in panel.log("worker"), 10, "the panel worker's task", panel)
    # The lab router, its own async process beside the web server, answers on its bind.
    router = f"http://{panel.env['CONTROLPANEL_ROUTER_BIND']}"
    _wait(lambda: _answers(f"{router}/health"), 30, "the lab router", panel)
    assert httpx.get(f"{router}/v1/models", timeout=5).json()["object"] == "list"

    _stop_and_check_nothing_left(panel, signal.SIGINT)
    assert not (redis_dir / "redis.sock").exists()


def test_a_killed_process_is_restarted_loudly_and_tasks_survive_a_redis_crash(panel: EmbeddedPanel) -> None:
    panel.wait_healthy()
    worker = panel.child_pid("worker")
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    _wait(lambda: _restarted(panel, "worker", worker), 15, "the worker's restart", panel)
    message = f"worker (pid {worker}) was killed by SIGKILL"
    assert message in (panel.data_dir / "logs" / "embedded.log").read_text()
    assert message in panel.output() and "restart 1 of 5" in panel.output()

    redis = panel.child_pid("redis")
    assert redis is not None
    os.kill(redis, signal.SIGKILL)
    _wait(lambda: _restarted(panel, "redis", redis), 15, "Redis's restart", panel)
    # The worker and the agent reconnect to the new Redis on the same socket by themselves.
    result = _last_json(panel.django(PROBE))
    assert result["state"] == "succeeded", (result, panel.output())

    _stop_and_check_nothing_left(panel, signal.SIGTERM)


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def test_the_agent_gets_its_token_on_standard_input_never_in_its_environment(panel: EmbeddedPanel) -> None:
    """/proc/<pid>/environ keeps the environment a process was started with, and the engines
    the agent starts run as the same user: a token handed over there could be read by them."""
    panel.wait_healthy()
    agent = panel.child_pid("agent")
    assert agent is not None
    assert b"cph_" not in _environ(agent) and b"CONTROLPANEL_HOST_TOKEN=" not in _environ(agent)

    # A restarted agent is handed the token again the same way, and works.
    os.kill(agent, signal.SIGKILL)
    _wait(lambda: _restarted(panel, "agent", agent), 15, "the agent's restart", panel)
    _wait(lambda: panel.log("agent").count(" ready.") >= 2, 30, "the new agent", panel)
    again = panel.child_pid("agent")
    assert again is not None and b"cph_" not in _environ(again)
    result = _last_json(panel.django(PROBE))
    assert result["state"] == "succeeded", (result, panel.output())
    _stop_and_check_nothing_left(panel, signal.SIGTERM)


@pytest.mark.engine
@pytest.mark.parametrize(
    "panel", [{"env": {"CONTROLPANEL_MODEL_DIRS": str(Path(gemma_model_path()).parent)}}], indirect=True
)
def test_term_stops_everything_even_an_engine_orphaned_by_a_killed_agent(panel: EmbeddedPanel) -> None:
    panel.wait_healthy()
    port = free_port()
    result = _last_json(panel.django(SWITCH.format(model=gemma_model_path(), port=port)))
    assert result["state"] == "succeeded", (result, panel.output())
    engine = result["pid"]
    agent = panel.child_pid("agent")
    assert agent is not None and engine in [p.pid for p in panel.tree()]
    assert b"cph_" not in _environ(engine)  # the agent's token never reaches its engine

    # The agent dies; its engine keeps serving, re-parented to the supervisor (a subreaper).
    os.kill(agent, signal.SIGKILL)
    _wait(lambda: _restarted(panel, "agent", agent), 15, "the agent's restart", panel)
    assert _ppid(engine) == panel.proc.pid
    _wait(lambda: panel.log("agent").count(" ready.") >= 2, 30, "the new agent", panel)

    seconds = _stop_and_check_nothing_left(panel, signal.SIGTERM)
    assert "stopped the engine" in panel.output(), panel.output()
    print(f"stopped with an engine in {seconds:.1f} s")


@pytest.mark.parametrize("panel", [{"args": ["--max-restarts", "1", "--window", "60"]}], indirect=True)
def test_a_process_that_keeps_dying_stops_the_panel_loudly(panel: EmbeddedPanel) -> None:
    panel.wait_healthy()
    before = panel.tree()
    web = panel.child_pid("web")
    assert web is not None
    os.kill(web, signal.SIGKILL)
    _wait(lambda: _restarted(panel, "web", web), 15, "the web server's restart", panel)
    web = panel.child_pid("web")
    assert web is not None
    os.kill(web, signal.SIGKILL)
    assert panel.proc is not None
    panel.proc.wait(STOP_LIMIT_S + 2)
    assert panel.proc.returncode == 1
    assert "restarted 1 times within 1 min, giving up: stopping the panel" in panel.output()
    left = [(p.pid, p.state(), p.cmdline) for p in before + panel.tree() if p.state() is not None]
    assert not left, left


@pytest.mark.parametrize("panel", [{"args": ["--first-install"]}], indirect=True)
def test_the_first_install_is_asked_for_once_the_supervisors_broker_runs(panel: EmbeddedPanel) -> None:
    """scripts/run passes --first-install: the supervisor asks `manage.py engine first-install` once
    its Redis, worker and agent run, and prints its answer (here the suite's venv carries llama.cpp:
    nothing to install); asked for before the broker ran, an install's message could not be sent."""
    panel.wait_healthy()
    said = ("panel: Engines: an engine is already on a host", "panel: First run: llama.cpp")
    _wait(lambda: any(s in panel.output() for s in said), 60, "the first install's answer", panel)
    assert "broker is unreachable" not in panel.output()
    _stop_and_check_nothing_left(panel, signal.SIGINT)


def _ppid(pid: int) -> int:
    from hostagent.runtime.processes import read_stat

    stat_ = read_stat(pid)
    assert stat_ is not None
    return stat_.ppid


def test_a_run_after_a_killed_supervisor_stops_what_that_one_left_running(panel: EmbeddedPanel) -> None:
    panel.wait_healthy()
    assert panel.proc is not None
    left = [p for p in panel.tree() if p.pid != panel.proc.pid]
    os.kill(panel.proc.pid, signal.SIGKILL)
    panel.proc.wait(5)
    assert any(p.state() not in (None, "Z") for p in left)  # in their own sessions, they run on

    again = EmbeddedPanel(panel.data_dir, panel.port).start()  # the same port: the old web server must go
    try:
        again.wait_healthy()
        assert "left running by an earlier run that was killed" in again.out_path.read_text()
        # Gone (or exited and waiting for this machine's init to reap them: they were orphaned).
        running = [(p.pid, p.cmdline) for p in left if p.state() not in (None, "Z")]
        assert not running, running
        _stop_and_check_nothing_left(again, signal.SIGTERM)
    finally:
        if again.proc is not None and again.proc.poll() is None:
            again.kill_all()


def _refused_start(tmp_path: Path, args: list[str], **env: str) -> tuple[int, str, float]:
    """`python -m embedded` with `args`: its exit code, its output, and the seconds it took."""
    import subprocess
    import sys

    from tests.support.embedded import ROOT

    full = embedded_env(tmp_path / "data", **env)
    for name in ("PANEL_BIND", "DJANGO_ALLOWED_HOSTS", "CONTROLPANEL_LAN_ADDRESS"):
        if name not in env:
            full.pop(name, None)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "embedded", *args], cwd=ROOT, env=full, capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr, time.monotonic() - t0


def test_a_bind_the_panel_cannot_serve_is_refused_at_start_naming_the_setting(tmp_path: Path) -> None:
    """Never a panel that stops itself half a minute later: an address that is not this machine's,
    allowed hosts that would refuse the local agent's hello (400), or a port another program holds
    stop the start at once, exit 2, with one sentence naming the setting."""
    import socket

    # 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
    code, said, took = _refused_start(tmp_path, ["--bind", "192.0.2.7:8000"])
    assert code == 2 and "PANEL_BIND=192.0.2.7:8000: 192.0.2.7 is not an address of this machine" in said, said
    assert took < 20

    code, said, _ = _refused_start(tmp_path, [], CONTROLPANEL_LAN_ADDRESS="192.0.2.7")
    assert code == 2 and "PANEL_BIND=192.0.2.7:8000 (from CONTROLPANEL_LAN_ADDRESS)" in said, said

    port = free_port()
    code, said, _ = _refused_start(tmp_path, [], PANEL_BIND=f"127.0.0.2:{port}", DJANGO_ALLOWED_HOSTS="localhost")
    assert code == 2 and "DJANGO_ALLOWED_HOSTS=localhost leaves out 127.0.0.2" in said, said
    assert not (tmp_path / "data" / "embedded.json").exists()  # nothing was started

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        taken = holder.getsockname()[1]
        code, said, _ = _refused_start(tmp_path, ["--bind", f"127.0.0.1:{taken}"])
    assert code == 2 and f"PANEL_BIND=127.0.0.1:{taken}: port {taken} is taken by another program" in said, said


def test_a_wildcard_bind_that_answers_only_this_machines_names_is_said_at_start() -> None:
    """0.0.0.0 without the LAN setting serves, but a browser on the LAN would get 400: the start says so."""
    from embedded.lan import serving_warnings

    local = ["localhost", "127.0.0.1", "[::1]", "testserver"]
    (said,) = serving_warnings("0.0.0.0:8000", local)
    assert "browsers on the LAN get 400; set CONTROLPANEL_LAN_ADDRESS" in said
    assert serving_warnings("0.0.0.0:8000", [*local, "10.213.7.1"]) == []
    assert serving_warnings("0.0.0.0:8000", ["*"]) == []
    assert serving_warnings("127.0.0.1:8000", local) == []
