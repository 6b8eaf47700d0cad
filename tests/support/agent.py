"""A real host agent (`manage.py agent`) in a subprocess, bound to the test database and the
real Redis broker, with its own state folder. Used by Celery integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent.parent


def test_database_url() -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class AgentProcess:
    def __init__(self, name: str, state_dir: Path, log_path: Path, *, extra_env: dict[str, str] | None = None):
        self.name = name
        self.state_dir = state_dir
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProcess:
        from tests.support.llama import gemma_model_path

        env = dict(os.environ)
        # The folders this host's engines may open: the test model's and the test's own.
        model_dirs = f"{Path(gemma_model_path()).parent}:{self.state_dir.parent}"
        env.update(
            CONTROLPANEL_MODEL_DIRS=model_dirs,
            DATABASE_URL=test_database_url(),
            CONTROLPANEL_HOST_STATE_DIR=str(self.state_dir),
            CONTROLPANEL_ENGINE_BIND_HOST="127.0.0.1",
            CONTROLPANEL_AGENT_HEARTBEAT_S="1",
            CONTROLPANEL_ENGINE_READY_TIMEOUT_S="60",
            **self.extra_env,
        )
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "agent", "--name", self.name, "--no-telemetry", "--loglevel", "INFO"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def wait_registered(self, timeout: float = 60.0) -> None:
        from hardware.models import Host

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log_tail()
            if (
                Host.objects.filter(name=self.name, last_heartbeat__isnull=False).exists()
                and "ready" in self.log_tail()
            ):
                return
            time.sleep(0.2)
        raise AssertionError(f"agent did not come up:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the worker only (not the engine it started, which lives in its own session)."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""
