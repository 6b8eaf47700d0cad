"""The panel's web server (gunicorn) as a real process on the test database, for tests where
the panel must go away and come back while an agent works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent.parent


def test_database_url() -> str:
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class PanelServer:
    def __init__(self, port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> PanelServer:
        env = dict(os.environ)
        # The same database and key as this process (secrets it stored decrypt the same); SQLite
        # is the same file already (same data folder).
        env["DJANGO_SECRET_KEY"] = settings.SECRET_KEY
        if connection.vendor == "postgresql":
            env["DATABASE_URL"] = test_database_url()
        env["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings"
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        argv = [sys.executable, "-m", "gunicorn", "controlpanel.wsgi", "-b", f"127.0.0.1:{self.port}"]
        self.proc = subprocess.Popen(
            [*argv, "-w", "1", "--threads", "8", "--graceful-timeout", "2"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_tail()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"the panel did not come up:\n{self.log_tail()}")

    def kill(self) -> None:
        """Gone at once, as a crashed or restarting panel is."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""
