"""The panel's own Celery worker as a real process on the test database, consuming one queue
(the test's own, so nothing another test left on the broker reaches it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.db import connection

from tests.support.panel import ROOT, test_database_url


class PanelWorker:
    def __init__(
        self,
        queue: str,
        log_path: Path,
        concurrency: int = 2,
        extra_env: dict[str, str] | None = None,
        flags: tuple[str, ...] = ("--without-heartbeat", "--without-gossip", "--without-mingle"),
    ) -> None:
        self.queue = queue
        self.flags = flags  # () starts it as docker-compose does
        self.extra_env = extra_env or {}
        self.log_path = log_path
        self.concurrency = concurrency
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> PanelWorker:
        env = dict(os.environ)
        env["DJANGO_SECRET_KEY"] = settings.SECRET_KEY  # channel URLs it stored decrypt the same
        if connection.vendor == "postgresql":
            env["DATABASE_URL"] = test_database_url()
        env["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings"
        env["CONTROLPANEL_NOTIFICATIONS_QUEUE"] = self.queue  # what it queues itself (beat's checks) comes back here
        env.update(self.extra_env)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        argv = [sys.executable, "-m", "celery", "-A", "controlpanel", "worker", "-Q", self.queue, "-l", "INFO"]
        self.proc = subprocess.Popen(
            [*argv, "-c", str(self.concurrency), *self.flags],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the panel worker exited:\n{self.log_tail()}")
            if " ready." in self.log_tail():
                return self
            time.sleep(0.2)
        self.stop()  # not left running behind a failed test
        raise AssertionError(f"the panel worker did not come up:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""
