"""A real host agent (`manage.py agent`) in a subprocess, as a GPU host runs it: its
environment holds the broker URL, the panel's URL and its own host token, and no database URL
and no secret key. It talks to the panel (the test's live server) over HTTP only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# What a GPU host must not hold: the panel's database and its key.
PANEL_ONLY = ("DATABASE_URL", "DJANGO_SECRET_KEY", "SECRETS_ENCRYPTION_KEY", "DJANGO_SETTINGS_MODULE")


class AgentProcess:
    def __init__(
        self,
        name: str,
        state_dir: Path,
        log_path: Path,
        *,
        panel_url: str,
        token: str,
        extra_env: dict[str, str] | None = None,
    ):
        self.name = name
        self.state_dir = state_dir
        self.log_path = log_path
        self.panel_url = panel_url
        self.token = token
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def sibling(self, log_path: Path) -> AgentProcess:
        """Another agent process for the same host (same token, state folder and panel)."""
        return AgentProcess(
            self.name, self.state_dir, log_path, panel_url=self.panel_url, token=self.token, extra_env=self.extra_env
        )

    def environment(self) -> dict[str, str]:
        from tests.support.llama import gemma_model_path

        env = {k: v for k, v in os.environ.items() if k not in PANEL_ONLY}
        # The folders this host's engines may open: the test model's and the test's own.
        model_dirs = f"{Path(gemma_model_path()).parent}:{self.state_dir.parent}"
        env.update(
            CONTROLPANEL_URL=self.panel_url,
            CONTROLPANEL_HOST_TOKEN=self.token,
            CONTROLPANEL_MODEL_DIRS=model_dirs,
            # The one folder its installs may read a wheelhouse from: the test's own `wheelhouse`.
            CONTROLPANEL_INSTALL_DIRS=str(self.state_dir.parent / "wheelhouse"),
            CONTROLPANEL_HOST_STATE_DIR=str(self.state_dir),
            CONTROLPANEL_ENGINE_BIND_HOST="127.0.0.1",
            CONTROLPANEL_AGENT_HEARTBEAT_S="1",
            CONTROLPANEL_ENGINE_READY_TIMEOUT_S="60",
            # Several agents run on this machine at once: a test that wants the front door sets a port.
            CONTROLPANEL_FRONT_DOOR_BIND="off",
        )
        env.update(self.extra_env)  # a test may set its own model folders, HF_ENDPOINT, ...
        return env

    def start(self) -> AgentProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        # Telemetry is off unless a test sets its interval (it wants the reports, e.g. memory held).
        telemetry = [] if "CONTROLPANEL_TELEMETRY_INTERVAL_S" in self.extra_env else ["--no-telemetry"]
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "agent", "--name", self.name, *telemetry, "--loglevel", "INFO"],
            cwd=ROOT,
            env=self.environment(),
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

    def process_environment(self) -> dict[str, str]:
        """The running agent's environment as the kernel has it (/proc/<pid>/environ)."""
        assert self.proc is not None
        raw = Path(f"/proc/{self.proc.pid}/environ").read_bytes()
        pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}

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
