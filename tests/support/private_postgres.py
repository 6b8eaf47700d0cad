"""A throwaway PostgreSQL cluster of our own (initdb and pg_ctl from /usr/lib/postgresql/*/bin) on
a free loopback port under a temporary folder, for a benchmark that SIGKILLs the database and
starts it again (bench/chaos.py). The machine's own server (5432) is never touched. PostgreSQL
refuses to run as root: as root the cluster belongs to the `postgres` user."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from hostagent.runtime.processes import read_cmdline
from tests.support.private_redis import _free_port


def postgres_bin() -> Path | None:
    """The newest installed server's bin folder, or None when there is no server to run."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parent.parent.name))
    return Path(found[-1]).parent if found else None


class PrivatePostgres:
    def __init__(self, folder: Path | None = None) -> None:
        # Its own temporary folder by default: the `postgres` user must be able to reach it.
        self.folder = folder or Path(tempfile.mkdtemp(prefix="private-pg-"))
        self.data = self.folder / "pgdata"
        self.sockets = self.folder / "sockets"
        self.port = 0
        binary = postgres_bin()
        if binary is None:
            raise RuntimeError("no PostgreSQL server installed (/usr/lib/postgresql/*/bin)")
        self.bin = binary
        self.user: str | None = "postgres" if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/panel"

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {"user": self.user} if self.user else {}
        done = subprocess.run(  # noqa: S603 - fixed argv
            [str(self.bin / argv[0]), *argv[1:]],
            capture_output=True, text=True, timeout=timeout, check=False, cwd="/", **kwargs,
        )  # fmt: skip
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr[-2000:])
        return done

    def init(self) -> PrivatePostgres:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(exist_ok=True)
        if self.user:
            owner = pwd.getpwnam(self.user)
            for path in (self.folder, self.sockets):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.port = _free_port()
        return self

    def start(self, timeout: float = 60) -> PrivatePostgres:
        options = f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "postgres.log"), "-w",
                  "-t", str(int(timeout)), "start", timeout=timeout + 10)  # fmt: skip
        return self

    def create_database(self) -> None:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "panel")

    def postmaster_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        return None

    def kill(self) -> None:
        """SIGKILL the postmaster, as the OOM killer would; its backends notice and exit."""
        pid = self.postmaster_pid()
        # postmaster.pid outlives a killed server, and its pid may be another process's by now:
        # only a postgres serving this cluster's data folder is killed, never the machine's own.
        if pid is not None and any(str(self.data) in arg for arg in read_cmdline(pid)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)

    def stop(self) -> None:
        if self.postmaster_pid() is not None:
            with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=30)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
