"""The embedded default as a user runs it: `python -m embedded` in a subprocess with
its own data folder and port, and neither DATABASE_URL nor CELERY_BROKER_URL (so SQLite and the
embedded Redis). Used by tests/test_embedded.py and bench/bench_soak.py; no Django needed here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from hostagent.runtime.processes import descendants, read_cmdline, read_stat
from tests.support.llama import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
PANEL_ENV = {"DATABASE_URL", "CELERY_BROKER_URL", "CONTROLPANEL_HOST_STATE_DIR", "DJANGO_SETTINGS_MODULE"}
ADMIN = ("soak", "soak-pass-123")


def embedded_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PANEL_ENV}
    env.update(CONTROLPANEL_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="controlpanel.settings")
    env.update(CONTROLPANEL_ROUTER_BIND=f"127.0.0.1:{free_port()}", **extra)  # tests run side by side
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def prepare(data_dir: Path, env: dict[str, str]) -> None:
    """What scripts/run does before it starts the supervisor, plus an admin with a known password."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    manage(env, "migrate", "--noinput", "-v0")
    manage(env, "collectstatic", "--noinput", "-v0")
    manage(env, "catalog", "load")
    manage(env, "host", "register-local")
    manage(env, "shell", "-c", DJANGO_ADMIN.format(user=ADMIN[0], password=ADMIN[1]))


DJANGO_ADMIN = """
from django.contrib.auth.models import Group, User
user = User.objects.create_superuser("{user}", password="{password}")
user.groups.add(Group.objects.get_or_create(name="admin")[0])
"""


def copy_prepared(template: Path, data_dir: Path) -> None:
    shutil.copytree(template, data_dir, symlinks=True)


@dataclass(frozen=True)
class Proc:
    pid: int
    start_ticks: int
    cmdline: str

    def state(self) -> str | None:
        """Its state letter (Z for a zombie), or None once it is gone (reaped)."""
        stat = read_stat(self.pid)
        return stat.state if stat is not None and stat.start_ticks == self.start_ticks else None


class EmbeddedPanel:
    def __init__(self, data_dir: Path, port: int, *, extra_env: dict[str, str] | None = None, args: list[str] = ()):
        self.data_dir = data_dir
        self.port = port
        self.env = embedded_env(data_dir, **(extra_env or {}))
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.out_path = data_dir / "supervisor.out"
        self._ready_before: dict[str, int] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EmbeddedPanel:
        # The data folder may hold an earlier run's logs: readiness counts only new lines.
        self._ready_before = {name: self.log(name).count(" ready.") for name in ("worker", "agent")}
        out = open(self.out_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "embedded", "--bind", f"127.0.0.1:{self.port}", *self.args],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # like a terminal's job: only our signals reach it
        )
        return self

    def wait_healthy(self, timeout: float = 60.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            assert self.proc is not None and self.proc.poll() is None, self.output()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200 and self._all_up():
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the embedded panel did not come up:\n{self.output()}")

    def _all_up(self) -> bool:
        """This supervisor started everything and the worker and the agent say they are ready."""
        assert self.proc is not None
        try:
            state = self.state()
        except (OSError, ValueError):
            return False
        if state["pid"] != self.proc.pid or not all(c["pid"] for c in state["children"].values()):
            return False
        return all(self.log(name).count(" ready.") > before for name, before in self._ready_before.items())

    def state(self) -> dict[str, Any]:
        return json.loads((self.data_dir / "embedded.json").read_text())

    def child_pid(self, name: str) -> int | None:
        return self.state()["children"][name]["pid"]

    def log(self, name: str) -> str:
        try:
            return (self.data_dir / "logs" / f"{name}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")[-6000:]
        except FileNotFoundError:
            return ""

    def tree(self) -> list[Proc]:
        """The supervisor and every live process below it (engines included)."""
        assert self.proc is not None
        found = []
        for pid in descendants(self.proc.pid):
            stat = read_stat(pid)
            if stat is not None:
                found.append(Proc(pid, stat.start_ticks, " ".join(read_cmdline(pid))[:160]))
        return found

    def django(self, code: str, timeout: float = 120) -> str:
        """Run Python in the panel's own settings (`manage.py shell -c`); returns its stdout."""
        return manage(self.env, "shell", "-c", code, timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> float:
        """Signal the supervisor and wait for it to exit; the seconds it took."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return 0.0
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        return time.monotonic() - t0

    def kill_all(self) -> None:
        """Last resort for a failed test: SIGKILL the whole tree."""
        if self.proc is None:
            return
        for proc in reversed(self.tree()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
