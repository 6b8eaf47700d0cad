"""A full disk gives a clear error and a failed operation with the reason, corrupts nothing, and the
panel stays up. Real full disks: a small tmpfs mounted for the test (root with CAP_SYS_ADMIN, as
on this machine; elsewhere those tests skip and say why) holding the embedded default's SQLite
database, the agent's state folder and outbox, and a download from the local hub. The web page's
answer is checked with an OperationalError("database or disk is full") injected at the service's
write only (PostgreSQL's own disk cannot be filled from a test)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import OperationalError

from core.atomicfile import DiskFullError
from core.errors import is_disk_full
from hostagent.outbox import Outbox
from hostagent.runtime.model_downloads import RESERVE_ENV, DiskFull, WantedFile, download_files
from hostagent.runtime.state import StateDir
from tests.support.embedded import embedded_env, manage
from tests.support.fake_hub import FakeHub
from tests.support.llama import gemma_model_path

MiB = 2**20


@contextlib.contextmanager
def tmpfs(where: Path, size_mib: int) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(  # noqa: S603 - fixed argv
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0700", "tmpfs", str(where)],  # noqa: S607
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"a real full disk needs a tmpfs, and mounting one needs root: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)  # noqa: S603, S607


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An embedded default's data folder with its SQLite database migrated, made once per module."""
    data = tmp_path_factory.mktemp("migrated")
    manage(embedded_env(data), "migrate", "--noinput", "-v0")
    return data


def migrated_copy(migrated: Path, data: Path) -> dict[str, str]:
    """The migrated database copied onto `data` (a small tmpfs); the environment of a panel there."""
    shutil.copy2(migrated / "db.sqlite3", data / "db.sqlite3")
    return embedded_env(data)


def fill(folder: Path) -> Path:
    """Take every free byte of the disk holding `folder`; removing the returned file frees them."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (65536, 1):  # unbuffered writes: the last partial block too
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def test_agent_state_and_outbox_writes_on_a_full_disk_keep_what_was_there(tmp_path):
    with tmpfs(tmp_path / "disk", 1) as disk:
        state = StateDir(disk / "host")
        outbox = Outbox(disk / "host" / "outbox")
        state.add_pause("switch", name="switch")
        outbox.put("/agent/v1/telemetry", {"n": 1}, kind="telemetry")
        big = {"argv": ["x" * 200_000]}
        filler = fill(disk)

        with pytest.raises(DiskFullError, match=r"The disk holding .*/host is full: watchdog.json was not written"):
            from hostagent.runtime.state import write_json

            write_json(state.watchdog_file, big)
        with pytest.raises(DiskFullError, match="was not written"):
            outbox.put("/agent/v1/finish", {"result": "x" * 200_000}, kind="result")
        assert [p["reason"] for p in state.active_pauses()] == ["switch"]
        assert not state.watchdog_file.exists()
        assert len(outbox) == 1
        assert sorted(p.name for p in (disk / "host").iterdir()) == ["outbox", "pauses"]  # no temporary file left

        filler.unlink()  # room again: the same writes go through
        outbox.put("/agent/v1/finish", {"result": "ok"}, kind="result")
        assert len(outbox) == 2


def test_a_download_that_fills_the_disk_fails_with_the_reason_and_is_resumable(tmp_path, monkeypatch):
    """The catalog gives no size and no reserve is kept (so the free-space preflight lets it start): the disk
    fills mid-way."""
    monkeypatch.setenv(RESERVE_ENV, "0")
    hub = FakeHub().start()
    try:
        item_path = Path(gemma_model_path())
        hub.add_repo("acme/gemma", {"model.gguf": item_path})
        item = hub.repos["acme/gemma"].files["model.gguf"]
        with tmpfs(tmp_path / "disk", 16) as disk:
            with pytest.raises(DiskFull) as full:
                download_files(
                    repo_id="acme/gemma", revision=hub.repos["acme/gemma"].sha,
                    files=[WantedFile("model.gguf", None, item.sha256, item.git_sha1)],
                    folder=disk / "m", endpoint=hub.url, token=None, on_progress=lambda p, m: False,
                )  # fmt: skip
            assert "the disk filled up while writing model.gguf" in str(full.value)
            assert not (disk / "m" / "model.gguf").exists()  # only a verified file is ever put in place
            part = next((disk / "m").rglob("model.gguf.part"))
            assert 0 < part.stat().st_size <= 16 * MiB  # what arrived is kept, for a resume once there is room
    finally:
        hub.stop()


SQLITE_FULL = """
import json, sqlite3, sys
from django.conf import settings
from tests.test_disk_full import fill
from deployments.services.demo import demo_load
from hardware.models import Host
Host.objects.count()  # a running panel has its connection open (and the -wal and -shm files made)
filler = fill(settings.DATA_DIR)
try:
    demo_load()
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"
hosts_while_full = Host.objects.count()
filler.unlink()
from django.db import connection
connection.close()
check = sqlite3.connect(settings.DATABASES["default"]["NAME"]).execute("PRAGMA integrity_check").fetchone()[0]
demo_load()
print("R=" + json.dumps({"error": error, "hosts_while_full": hosts_while_full, "check": check,
                          "hosts_after": Host.objects.count()}))
"""


def test_a_database_write_on_a_full_disk_fails_whole_and_the_database_stays_sound(tmp_path, migrated):
    with tmpfs(tmp_path / "data", 24) as data:
        env = migrated_copy(migrated, data)
        result = json.loads(manage(env, "shell", "-c", SQLITE_FULL).split("R=", 1)[1])
    assert result["error"] is not None and "database or disk is full" in result["error"]
    assert result["hosts_while_full"] == 0  # the failed transaction left nothing half-stored
    assert result["check"] == "ok"
    assert result["hosts_after"] == 2  # and the same write goes through once there is room


@pytest.mark.django_db
def test_a_page_whose_write_meets_a_full_disk_says_so_and_the_panel_stays_up(client, admin_user, monkeypatch):
    from django.db import OperationalError

    from deployments.models import Secret
    from hardware.models import Host

    host = Host.objects.create(name="h1", queue="host.h1")

    def full(*args, **kwargs):
        raise OperationalError("database or disk is full")

    monkeypatch.setattr(Secret, "save", full)  # the row's INSERT meets the full disk
    client.force_login(admin_user)
    response = client.post(f"/hosts/{host.name}/secrets/", {"name": "api", "value": "sk-1"})
    assert response.status_code == 507
    assert "The panel's disk is full: this change was not saved" in response.content.decode()
    assert not Secret.objects.exists()
    assert client.get(f"/hosts/{host.name}/secrets/").status_code == 200


def test_an_engine_start_on_a_full_disk_fails_with_the_reason_and_starts_nothing(tmp_path):
    """The start cannot note its watchdog pause (or the log its header): it ends before anything runs."""
    from hostagent.runtime.strays import port_is_free
    from hostagent.runtime.supervisor import Supervisor
    from tests.hostagent.runtime.test_supervisor import llama_spec
    from tests.support.llama import free_port

    with tmpfs(tmp_path / "disk", 1) as disk:
        supervisor = Supervisor(disk / "state", stop_grace=2.0)
        (disk / "state" / "engine.log").write_text("an earlier start's output\n")
        fill(disk)
        port = free_port()
        with pytest.raises(DiskFullError, match=r"The disk holding .*/state.* is full: .* was not written"):
            supervisor.start(llama_spec(port, binary=sys.executable, model="unused.gguf"), revision_label="r1")
        assert supervisor.state.read_engine() is None
        assert port_is_free(port)
        assert (disk / "state" / "engine.log").read_text() == "an earlier start's output\n"


def _caused(outer: Exception, cause: BaseException) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("exc", "full"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (_caused(OperationalError("could not extend file"), psycopg.errors.DiskFull()), True),  # SQLSTATE 53100
        (OperationalError("database or disk is full"), True),  # SQLite
        (OperationalError("database is locked"), False),
        (OSError(errno.EACCES, "Permission denied"), False),
    ],
    ids=["ENOSPC", "EDQUOT", "postgresql", "sqlite", "locked", "EACCES"],
)
def test_a_full_disk_is_told_apart_from_other_failures(exc, full):
    assert is_disk_full(exc) is full


AGENT_REPORT_FULL = """
import json, time
from django.conf import settings
from django.test import Client
from tests.test_disk_full import fill
from hardware.credentials import host_token_issue
from hardware.models import HostSample
host, token = host_token_issue(name="gpu-1", actor=None)
client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
now = time.time()
body = {"gpu_samples": [], "host_samples": [{"timestamp": now - i, "cpu_percent": 5.0} for i in range(500)]}
def post():
    answer = client.post("/agent/v1/telemetry", data=json.dumps(body), content_type="application/json")
    return answer.status_code, answer.headers.get("Content-Type"), answer.content.decode()
filler = fill(settings.DATA_DIR)
full = post()
rows_while_full = HostSample.objects.count()
filler.unlink()
again = post()
print("R=" + json.dumps({"full": full, "rows_while_full": rows_while_full, "again": again[0],
                          "rows_after": HostSample.objects.count()}))
"""


def test_an_agent_report_on_a_full_disk_is_refused_whole_with_507_so_the_agent_keeps_it(tmp_path, migrated):
    """The agent API skips the pages' middleware: it says so itself, in JSON. A 5xx is "the panel is
    away" to the agent (hostagent/panel.py), which keeps the report in its outbox and sends it again."""
    with tmpfs(tmp_path / "data", 24) as data:
        env = migrated_copy(migrated, data)
        result = json.loads(manage(env, "shell", "-c", AGENT_REPORT_FULL).split("R=", 1)[1])
    status, content_type, text = result["full"]
    assert status == 507 and content_type == "application/json"
    assert "The panel's disk is full: this change was not saved" in json.loads(text)["error"]
    assert result["rows_while_full"] == 0  # nothing half-stored
    assert result["again"] in (200, 204) and result["rows_after"] == 500  # the same report, once there is room


def test_a_command_on_a_full_disk_says_so_in_one_sentence_without_a_traceback(tmp_path, migrated):
    with tmpfs(tmp_path / "data", 24) as data:
        env = migrated_copy(migrated, data)
        filler = fill(data)
        out = subprocess.run(  # noqa: S603 - fixed argv
            [sys.executable, "manage.py", "catalog", "load"], cwd=Path(__file__).resolve().parent.parent,
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        filler.unlink()
        assert out.returncode == 1
        assert "Traceback" not in out.stderr, out.stderr
        assert "manage.py catalog: the disk is full (" in out.stderr
        assert "What it was writing was not saved" in out.stderr
        manage(env, "catalog", "load")  # room again: the same command goes through
